"""Lazy packages: a third-party package whose ``__init__`` runs only when it is needed.

A library msop uses has a package ``__init__`` that imports far more than msop needs:
``kubernetes_asyncio`` imports ~1,000 model modules, about 33 MiB of resident memory (see
:mod:`msop.kube.k8sconfig`).

:func:`lazy_package` registers such a package in :data:`sys.modules` *before anything
imports it*: the package object exists with its real ``__path__`` and spec, so its
submodules (``kubernetes_asyncio.config``) import normally from the installed files, but
its ``__init__`` module runs only when code asks the package for a name that no submodule
provides and no hint maps to a submodule. Then the real ``__init__`` runs in the same
module object and the caller gets what it always got. A name the hints map
to a submodule (``from kubernetes_asyncio import config``) keeps working without it, and
so does any other use of the package, only later.
Nothing of the libraries is copied or patched; only the moment their package initializers
run changes.

Registering is a change to the whole process, so no module of msop does it when it is
imported: :func:`msop.kube.k8sconfig.install` (when a client loads a kubeconfig) registers
kubernetes_asyncio, whose package initializers would import every API and model class.
If a package is already imported, :func:`lazy_package` leaves it as it is, so the saving
depends on registering first.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_package"]

#: Dunder names that are not submodules but that the package ``__init__`` defines: asking
#: for them runs it. Other dunder names (``__wrapped__``, ``__loader__``...) are probed by
#: introspection tools and raise AttributeError as for any module without them.
_INIT_DUNDERS = frozenset({"__all__", "__version__"})


def lazy_package(
    name: str,
    hints: dict[str, str] | None = None,
    override: Callable[[str], Any] | None = None,
) -> None:
    """Register ``name`` as a lazy package (see the module docstring).

    ``hints`` maps names of the package to the submodule that defines them. ``override``,
    if given, is asked first for every missing name and returns its value, or None to
    fall through.
    """
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    hints = hints or {}
    initialized = False

    def __getattr__(attr: str) -> Any:  # the module-level hook of PEP 562
        nonlocal initialized
        if attr.startswith("__") and attr not in _INIT_DUNDERS:
            raise AttributeError(attr)
        if override is not None:
            value = override(attr)
            if value is not None:
                return value
        sub = hints.get(attr)
        if sub is not None:
            return getattr(importlib.import_module(f"{name}.{sub}"), attr)
        if (
            not initialized
            and not attr.startswith("__")
            and importlib.util.find_spec(f"{name}.{attr}") is not None
        ):
            return importlib.import_module(f"{name}.{attr}")
        if not initialized:
            initialized = True
            loader.exec_module(module)  # the package's real __init__, now
            if attr in module.__dict__:
                return module.__dict__[attr]
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
