"""msop.kube: a plain-dict Kubernetes client.

Objects are dicts exactly as the API server sends them. The public surface:

- :class:`KubeClient` - get/list/list_all/create/replace/replace_status/patch/delete/watch;
- :class:`Resource` and the constants ``PODS``, ``SERVICES``, ``EVENTS``, ``CONFIGMAPS``,
  ``NAMESPACES``, ``LEASES``;
- :class:`ApiError`, :class:`ApiUnavailable`, :class:`ApiTimeout` and the ``is_*``
  predicates;
- :class:`TokenBucket`, the client-side rate limiter (also used by the workqueue).
"""

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
