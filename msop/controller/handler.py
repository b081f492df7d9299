"""Event handlers: map an informer event to the Requests a controller should reconcile.

A handler never reconciles and never blocks; it only adds keys to the controller's queue.
Priorities follow controller-runtime: an add from the informer's **initial list** and an
update whose ``resourceVersion`` did not change (a **resync**) are enqueued at
:data:`~.workqueue.PRIORITY_LOW`, so a restart over thousands of objects does not delay fresh
user events; everything else at :data:`~.workqueue.PRIORITY_NORMAL`.

Provided:

* :class:`EnqueueRequestForObject` - the object's own ``namespace/name``;
* :class:`EnqueueRequestForOwner` - the owner of the given group and kind named in the
  object's ``ownerReferences`` (by default only the *controller* owner), in the object's
  namespace;
* :class:`EnqueueRequestsFromMapFunc` - any keys computed by a function;
* :class:`ChangedOnly` - wraps another and drops the updates in which nothing but the
  ``resourceVersion`` changed: where the informer keeps a projection of its objects, a
  change to a field the projection leaves out arrives as one (controller-runtime's
  predicates do this job there).

Handlers must not raise; the controller logs and drops an event whose handler raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from msop.controller.reconcile import Request
from msop.controller.workqueue import PRIORITY_LOW, PRIORITY_NORMAL

__all__ = [
    "ChangedOnly",
    "EnqueueRequestForObject",
    "EnqueueRequestForOwner",
    "EnqueueRequestsFromMapFunc",
    "EventHandler",
    "Obj",
    "RequestQueue",
    "group_of",
    "only_version_changed",
    "request_for",
]

Obj = Mapping[str, Any]


class RequestQueue(Protocol):
    """The part of the work queue a handler uses."""

    def add(self, item: Request, *, priority: int = PRIORITY_NORMAL) -> None: ...


class EventHandler(Protocol):
    """Turns informer events into queued Requests."""

    def create(self, obj: Obj, queue: RequestQueue, *, initial: bool = False) -> None:
        """An object appeared; ``initial`` is True for the informer's initial list."""
        ...

    def update(self, old: Obj, new: Obj, queue: RequestQueue) -> None:
        """An object changed (or was resynced: same resourceVersion)."""
        ...

    def delete(self, obj: Obj, queue: RequestQueue) -> None:
        """An object disappeared; ``obj`` is its last known state."""
        ...


def request_for(obj: Obj) -> Request:
    """The Request naming ``obj`` itself (namespace ``""`` when cluster-scoped)."""
    meta = obj["metadata"]
    return Request(meta.get("namespace") or "", meta["name"])


def group_of(api_version: str) -> str:
    """The API group of an ``apiVersion``: ``"apps/v1"`` -> ``"apps"``, ``"v1"`` -> ``""``."""
    return api_version.rpartition("/")[0]


def _update_priority(old: Obj, new: Obj) -> int:
    rv_old = (old.get("metadata") or {}).get("resourceVersion")
    rv_new = (new.get("metadata") or {}).get("resourceVersion")
    return PRIORITY_LOW if rv_old is not None and rv_old == rv_new else PRIORITY_NORMAL


class _MappingHandler:
    """Shared event plumbing: subclasses say which Requests one object maps to."""

    def requests(self, obj: Obj) -> Iterable[Request]:
        raise NotImplementedError

    def create(self, obj: Obj, queue: RequestQueue, *, initial: bool = False) -> None:
        """Enqueue the object's requests; low priority for the initial list."""
        priority = PRIORITY_LOW if initial else PRIORITY_NORMAL
        for request in self.requests(obj):
            queue.add(request, priority=priority)

    def update(self, old: Obj, new: Obj, queue: RequestQueue) -> None:
        """Enqueue the requests of both versions (an owner may have changed)."""
        priority = _update_priority(old, new)
        seen: set[Request] = set()
        for obj in (old, new):
            for request in self.requests(obj):
                if request not in seen:
                    seen.add(request)
                    queue.add(request, priority=priority)

    def delete(self, obj: Obj, queue: RequestQueue) -> None:
        """Enqueue the last known state's requests."""
        for request in self.requests(obj):
            queue.add(request, priority=PRIORITY_NORMAL)


class EnqueueRequestForObject(_MappingHandler):
    """Enqueues the object's own key."""

    def requests(self, obj: Obj) -> Iterable[Request]:
        """``[request_for(obj)]``."""
        return (request_for(obj),)


class EnqueueRequestForOwner(_MappingHandler):
    """Enqueues the owner (given ``api_version``'s group and ``kind``) of an owned object.

    Only the API group of ``api_version`` is compared (the version is ignored), as
    controller-runtime does, so an owner reference written with another served version still
    matches. With ``is_controller=True`` (default) only the reference with
    ``controller: true`` counts. The owner is looked up in the owned object's namespace
    (owner references cannot cross namespaces).
    """

    def __init__(self, api_version: str, kind: str, *, is_controller: bool = True) -> None:
        self.group = group_of(api_version)
        self.kind = kind
        self.is_controller = is_controller

    def requests(self, obj: Obj) -> Iterable[Request]:
        """The matching owner references' Requests."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        out: list[Request] = []
        for ref in meta.get("ownerReferences") or ():
            if ref.get("kind") != self.kind or group_of(ref.get("apiVersion", "")) != self.group:
                continue
            if self.is_controller and not ref.get("controller"):
                continue
            out.append(Request(namespace, ref["name"]))
        return out


class EnqueueRequestsFromMapFunc(_MappingHandler):
    """Enqueues whatever ``map_func(obj)`` returns (e.g. keys found by a label)."""

    def __init__(self, map_func: Callable[[Obj], Iterable[Request]]) -> None:
        self.map_func = map_func

    def requests(self, obj: Obj) -> Iterable[Request]:
        """``map_func(obj)``."""
        return self.map_func(obj)


def only_version_changed(old: Obj, new: Obj) -> bool:
    """Whether ``old`` and ``new`` differ in their ``metadata.resourceVersion`` and in
    nothing else (a resync, the same resourceVersion, is not such an update)."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    rv_old, rv_new = old_meta.get("resourceVersion"), new_meta.get("resourceVersion")
    if not rv_old or not rv_new or rv_old == rv_new or old.keys() != new.keys():
        return False
    if any(old[k] != new[k] for k in old if k != "metadata"):
        return False
    if old_meta.keys() != new_meta.keys():
        return False
    return all(old_meta[k] == new_meta[k] for k in old_meta if k != "resourceVersion")


class ChangedOnly:
    """An :class:`EventHandler` that passes every event to ``inner`` but the updates in
    which only the ``resourceVersion`` changed (:func:`only_version_changed`).

    The reconciler reads the same cached object after such an update as before it, so a
    reconcile would plan what the last one did. With a projected pod cache these are
    common at scale: the node lifecycle controller marking every pod of a node not ready,
    then ready again, changes only conditions the projection leaves out. A resync, or an
    event source announcing news about an unchanged object (the same resourceVersion),
    still passes."""

    def __init__(self, inner: EventHandler) -> None:
        self.inner = inner

    def create(self, obj: Obj, queue: RequestQueue, *, initial: bool = False) -> None:
        self.inner.create(obj, queue, initial=initial)

    def update(self, old: Obj, new: Obj, queue: RequestQueue) -> None:
        if not only_version_changed(old, new):
            self.inner.update(old, new, queue)

    def delete(self, obj: Obj, queue: RequestQueue) -> None:
        self.inner.delete(obj, queue)
