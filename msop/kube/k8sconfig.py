"""kubernetes_asyncio's config loaders, without paying for its model classes.

msop uses kubernetes_asyncio for what it does well: reading kubeconfig files and the
in-cluster service account, TLS material, exec credential plugins and token refresh
(:mod:`kubernetes_asyncio.config`). It never uses the generated API or model classes:
objects are plain dicts. But importing the config package runs
``kubernetes_asyncio/__init__.py`` and ``kubernetes_asyncio/client/__init__.py``, which
import every API class and all ~1,000 model modules: about 60 MiB of RSS and 1,100
modules for nothing (measured: a bare interpreter at 10 MiB goes to 72 MiB).

:func:`install` registers ``kubernetes_asyncio``, ``kubernetes_asyncio.client`` and
``kubernetes_asyncio.client.models`` as **lazy packages** before anything imports them:
the package objects exist with their real ``__path__`` (so ``kubernetes_asyncio.config``
and ``kubernetes_asyncio.client.configuration`` import normally, from the installed
files), but their ``__init__`` modules run only when code asks for a name they define
and no submodule provides. ``Configuration`` and ``ApiClient`` resolve to their own
submodules. While :func:`install` imports the config package, its module-level
``ApiClient`` name (used only by ``new_client_from_config``) is bound to a factory that
imports the real class when called, so the REST client and its imports (dateutil,
multiprocessing) load only if someone builds one. Anything else -
``kubernetes_asyncio.client.V1Pod``, ``CoreV1Api``, model deserialization in
``ApiClient`` - runs the real ``__init__`` at that moment and gets what it always got.
Nothing of the library is copied or patched; only the moment its package initializers
run changes.

``urllib3`` is made lazy the same way: kubernetes_asyncio's ``Configuration`` imports it
for ``urllib3.util.make_headers`` (basic auth) alone.

The mechanism is :func:`msop.lazy.lazy_package`. If a package is already imported
(someone imported kubernetes_asyncio first), :func:`install` leaves it as it is. Importing
this module registers nothing: :meth:`msop.kube.client.KubeClient.from_config` calls
:func:`install` when it loads a config, in the operator and in the SDK alike (unlike the
operator-only settings of :mod:`msop.bootstrap`).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from msop.lazy import lazy_package

__all__ = ["LAZY_PACKAGES", "install", "loaded_modules"]

#: Lazy packages and, for each, the names that live in a submodule of their own.
LAZY_PACKAGES: dict[str, dict[str, str]] = {
    "kubernetes_asyncio": {},
    "kubernetes_asyncio.client": {"Configuration": "configuration", "ApiClient": "api_client"},
    "kubernetes_asyncio.client.models": {},
    # Imported by client/configuration.py only for make_headers (basic auth), which
    # lives in the urllib3.util submodule: its package initializer (PoolManager, HTTP
    # connections, 1.8 MiB of RSS) is never needed by msop.
    "urllib3": {},
}


_deferring = False


class _DeferredApiClient:
    """What ``kubernetes_asyncio.config.kube_config`` binds as ``ApiClient``: calling it
    imports and builds the real ``kubernetes_asyncio.client.ApiClient``."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from kubernetes_asyncio.client.api_client import ApiClient

        return ApiClient(*args, **kwargs)


def _override(attr: str) -> Any:
    """While :func:`install` imports the config package, ``kubernetes_asyncio.client``'s
    ``ApiClient`` is :class:`_DeferredApiClient`."""
    return _DeferredApiClient if _deferring and attr == "ApiClient" else None


def install() -> None:
    """Register the lazy packages and import the config package (idempotent; see the
    module docstring)."""
    global _deferring
    if "kubernetes_asyncio.config" in sys.modules:
        return
    for name, hints in LAZY_PACKAGES.items():
        override = _override if name == "kubernetes_asyncio.client" else None
        lazy_package(name, hints, override)
    _deferring = True
    try:
        importlib.import_module("kubernetes_asyncio.config")
    finally:
        _deferring = False


def loaded_modules(prefix: str = "kubernetes_asyncio") -> list[str]:
    """The imported modules under ``prefix`` (for tests and diagnostics)."""
    return sorted(m for m in sys.modules if m == prefix or m.startswith(prefix + "."))
