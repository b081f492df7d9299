"""Every process-level setting of the operator process, in one place.

``msop run`` calls :func:`apply` first, before it imports the runtime. No other module of
msop registers a lazy package, patches a library or tunes the heap when it is imported:
the SDK in a notebook and the integrations in a training pod import their dependencies
the ordinary way and leave their host process as they found it
(``tests/unit/test_bootstrap.py`` checks both in fresh interpreters).

What :func:`apply` does, in order, each with what leaving it out costs (measured with
``hack/bootstrap_savings.py`` on a 2-core machine with a benchmark running beside it).
Idle RSS: ``msop run`` against an empty API server, 5 s after its caches are synced, as
``make bench`` reads it; about 40.1 MiB with everything below, medians of 5 runs that
spread by less than 0.1 MiB. Startup CPU: ``msop run`` up to reading its kubeconfig, about
300 ms with everything below; the medians and minima of 31 runs move by 10-20 ms from one
batch to the next, so a startup saving under 20 ms is not measurable here.

- **Heap thresholds** (:func:`msop.malloc.limit_heap_growth`, before any list page is
  parsed): nothing at idle or at startup; its saving is under load: a 4 KB TLS record
  read with ``SSLObject.read(256 KiB)``, once per watch event, takes 3-5 us instead of
  31-40 us, and RSS per cached pod went from 2.3 to 1.5 KB at 10,000 pods (see that
  module).
- **prometheus_client as a lazy package** (:func:`msop.lazy.lazy_package`): its
  ``__init__`` imports its exposition module (http.server, wsgiref, email, gzip,
  urllib.request...), which msop never uses (:mod:`msop.metrics` renders the text format
  itself). 0.9 MiB of idle RSS; startup 0-16 ms.
- **frozenlist's pure-Python build** (``FROZENLIST_NO_EXTENSIONS=1`` unless the
  environment sets it; inherited by child processes): its extension, aiohttp's lists of
  signal handlers and never on a hot path here, is C++ and maps libstdc++. 1.0 MiB;
  startup 0-9 ms.
- **aiohttp's default TLS contexts without CAs**: aiohttp makes two when it is imported,
  loading the system's CA bundle into each; msop never uses them (the API client makes
  its own context from the kubeconfig or the ServiceAccount's CA; progress polls are
  plain HTTP). aiohttp is imported here with ``ssl.SSLContext.load_default_certs`` a
  no-op, restored right after, so a request that fell back on those contexts would fail
  verification, never pass it, and contexts made later load CAs as always. 0.8 MiB;
  startup 2-29 ms.

Dropped: structlog as a lazy package, which needed a map of structlog's private modules:
0.1-0.2 MiB and no measurable startup time.

Not here: kubernetes_asyncio's lazy package initializers (:mod:`msop.kube.k8sconfig`:
38 MiB and about 230 ms). :meth:`msop.kube.client.KubeClient.from_config` registers them
when it loads a config, never at import time, in every process that loads one: the SDK
and ``msop list`` need them as much as the operator does.
"""

from __future__ import annotations

import os
import sys

from msop import malloc
from msop.lazy import lazy_package

__all__ = ["PROMETHEUS_CLIENT", "apply"]

#: Names of prometheus_client that live in a submodule of their own: msop uses its
#: metrics, metrics_core, registry, samples and process_collector submodules.
PROMETHEUS_CLIENT: dict[str, str] = {
    "CollectorRegistry": "registry",
    "Counter": "metrics",
    "Gauge": "metrics",
    "Histogram": "metrics",
    "Metric": "metrics_core",
    "ProcessCollector": "process_collector",
}


def apply() -> None:
    """Apply every setting of the module docstring, in its order (idempotent).

    A package someone imported already stays as it is: call this before anything imports
    prometheus_client or aiohttp.
    """
    malloc.limit_heap_growth()
    lazy_package("prometheus_client", PROMETHEUS_CLIENT)
    os.environ.setdefault("FROZENLIST_NO_EXTENSIONS", "1")
    import_aiohttp_without_default_cas()


def import_aiohttp_without_default_cas() -> None:
    """Import aiohttp with its two default TLS contexts made without CAs (see above)."""
    if "aiohttp" in sys.modules:
        return
    import ssl

    load_default_certs = ssl.SSLContext.load_default_certs
    ssl.SSLContext.load_default_certs = _no_default_certs  # type: ignore[method-assign]
    try:
        import aiohttp.connector  # noqa: F401 - its default contexts are made now
    finally:
        ssl.SSLContext.load_default_certs = load_default_certs  # type: ignore[method-assign]


def _no_default_certs(self: object, purpose: object = None) -> None:
    return None
