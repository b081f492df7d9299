"""msop.kube: a plain-dict Kubernetes client.

Objects are dicts exactly as the API server sends them. The public surface:

- :class:`KubeClient` - get/list/list_all/create/replace/replace_status/patch/delete/watch;
- :class:`Resource` and the constants ``PODS``, ``SERVICES``, ``EVENTS``, ``CONFIGMAPS``,
  ``NAMESPACES``, ``LEASES``;
- :class:`ApiError`, :class:`ApiUnavailable`, :class:`ApiTimeout` and the ``is_*``
  predicates;
- :class:`TokenBucket`, the client-side rate limiter (also used by the workqueue).

The names load on first use (PEP 562): importing ``msop.kube.errors`` or
``msop.kube.objects`` alone, as the planner and ``msop validate`` do, does not load the
HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from msop.kube.client import KubeClient, PatchType
    from msop.kube.errors import (
        ApiError,
        ApiTimeout,
        ApiUnavailable,
        is_allocation_failure,
        is_already_exists,
        is_conflict,
        is_forbidden,
        is_gone,
        is_invalid,
        is_not_found,
        is_patch_test_failed,
        is_too_many_requests,
        is_unavailable,
    )
    from msop.kube.flowcontrol import TokenBucket
    from msop.kube.resources import (
        CONFIGMAPS,
        EVENTS,
        LEASES,
        NAMESPACES,
        PODS,
        SERVICES,
        Resource,
    )

_HOME = {
    "ApiError": "msop.kube.errors",
    "ApiTimeout": "msop.kube.errors",
    "ApiUnavailable": "msop.kube.errors",
    "CONFIGMAPS": "msop.kube.resources",
    "EVENTS": "msop.kube.resources",
    "KubeClient": "msop.kube.client",
    "LEASES": "msop.kube.resources",
    "NAMESPACES": "msop.kube.resources",
    "PODS": "msop.kube.resources",
    "PatchType": "msop.kube.client",
    "Resource": "msop.kube.resources",
    "SERVICES": "msop.kube.resources",
    "TokenBucket": "msop.kube.flowcontrol",
    "is_allocation_failure": "msop.kube.errors",
    "is_already_exists": "msop.kube.errors",
    "is_conflict": "msop.kube.errors",
    "is_forbidden": "msop.kube.errors",
    "is_gone": "msop.kube.errors",
    "is_invalid": "msop.kube.errors",
    "is_not_found": "msop.kube.errors",
    "is_patch_test_failed": "msop.kube.errors",
    "is_too_many_requests": "msop.kube.errors",
    "is_unavailable": "msop.kube.errors",
}

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "PODS",
    "SERVICES",
    "ApiError",
    "ApiTimeout",
    "ApiUnavailable",
    "KubeClient",
    "PatchType",
    "Resource",
    "TokenBucket",
    "is_allocation_failure",
    "is_already_exists",
    "is_conflict",
    "is_forbidden",
    "is_gone",
    "is_invalid",
    "is_not_found",
    "is_patch_test_failed",
    "is_too_many_requests",
    "is_unavailable",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
