"""Every process-level setting of the operator process, in one place.

``msop run`` calls :func:`apply` first, before it imports the runtime. No other module of
msop registers a lazy package, patches a library or tunes the heap when it is imported:
the SDK in a notebook and the integrations in a training pod import their dependencies
the ordinary way and leave their host process as they found it
(``tests/unit/test_bootstrap.py`` checks both in fresh interpreters).

What :func:`apply` does, with what leaving it out costs. A setting stays here only where
it saves under load or saves tens of MiB.

- **Heap thresholds** (:func:`msop.malloc.limit_heap_growth`, before any list page is
  parsed): nothing at idle or at startup; its saving is under load: a 4 KB TLS record
  read with ``SSLObject.read(256 KiB)``, once per watch event, takes 3-5 us instead of
  31-40 us, and RSS per cached pod went from 2.3 to 1.5 KB at 10,000 pods (see that
  module).

Dropped, because each saved about 1 MiB of idle memory, which is not what an operator's
users pay for, at a cost in what the process does: structlog as a lazy package (a map of
structlog's private modules, 0.1-0.2 MiB); prometheus_client as a lazy package (0.9 MiB:
its exposition module, which ``/metrics`` now uses for OpenMetrics and gzip); frozenlist's
pure-Python build (1.0 MiB); aiohttp's default TLS contexts made without CAs (0.8 MiB).

Not here: kubernetes_asyncio's lazy package initializers (:mod:`msop.kube.k8sconfig`:
38 MiB and about 230 ms). :meth:`msop.kube.client.KubeClient.from_config` registers them
when it loads a config, never at import time, in every process that loads one: the SDK
and ``msop list`` need them as much as the operator does.
"""

from __future__ import annotations

from msop import malloc

__all__ = ["apply"]


def apply() -> None:
    """Apply every setting of the module docstring (idempotent)."""
    malloc.limit_heap_growth()
