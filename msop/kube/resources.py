"""API resource descriptors: which URL an object kind lives at.

A :class:`Resource` is a small value object naming one REST resource of the API server
(group, version, plural) together with its kind and scope. It builds request paths and
never talks to the network; it raises :class:`ValueError` only for impossible paths
(a namespace on a cluster-scoped resource, a subresource without a name).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "SERVICES",
    "SUBJECTACCESSREVIEWS",
    "TOKENREVIEWS",
    "Resource",
]


def _segment(value: str) -> str:
    # Names are DNS labels in practice, but quote anyway so a bad name can never
    # address a different path.
    return quote(value, safe="")


@dataclass(frozen=True)
class Resource:
    """One REST resource, e.g. ``pods`` in core ``v1`` or ``leases`` in ``coordination.k8s.io``."""

    group: str
    """API group; ``""`` for the core (legacy) group."""
    version: str
    """API version within the group, e.g. ``"v1"``."""
    plural: str
    """Lower-case plural resource name used in URLs, e.g. ``"configmaps"``."""
    kind: str
    """The ``kind`` of single objects, e.g. ``"ConfigMap"``."""
    namespaced: bool = True
    """Whether objects live in a namespace."""

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field of objects: ``"v1"`` or ``"<group>/<version>"``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """``/api/v1`` for the core group, ``/apis/<group>/<version>`` otherwise."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def __str__(self) -> str:
        """``plural`` for the core group, ``plural.group`` otherwise (kubectl's spelling)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """Return the request path for a collection, an object or an object's subresource.

        ``namespace=None`` on a namespaced resource addresses all namespaces (valid for
        list and watch only). Raises :class:`ValueError` when a namespace is given for a
        cluster-scoped resource or a subresource without a name.
        """
        parts = [self.prefix]
        if namespace is not None:
            if not self.namespaced:
                raise ValueError(f"{self} is cluster-scoped; got namespace {namespace!r}")
            parts.append(f"namespaces/{_segment(namespace)}")
        parts.append(self.plural)
        if name is not None:
            parts.append(_segment(name))
        if subresource is not None:
            if name is None:
                raise ValueError("a subresource needs an object name")
            parts.append(subresource)
        return "/".join(parts)


PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
EVENTS = Resource("", "v1", "events", "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
#: Volcano's PodGroup (gang scheduling); its CRD is optional (``--enable-gang-scheduling``).
PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
#: Kueue's objects (``--enable-kueue``); their CRDs are optional.
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
RESOURCEFLAVORS = Resource(
    "kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False
)
WORKLOADPRIORITYCLASSES = Resource(
    "kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass",
    namespaced=False,
)  # fmt: skip
PRIORITYCLASSES = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
#: The reviews a server sends to have the API server authenticate a bearer token and
#: authorize its user (create only; nothing is stored).
TOKENREVIEWS = Resource(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
SUBJECTACCESSREVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
