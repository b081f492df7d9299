"""Read-only views over informer caches.

:class:`Lister` reads one informer's store. :class:`MultiNamespaceLister` reads several
informers that each watch one namespace of the same resource - the way to cache a
fixed set of namespaces without cluster-wide list/watch permission::

    informers = [factory.informer_for(PODS, namespace=ns) for ns in ("a", "b")]
    pods = MultiNamespaceLister(informers)
    pods.list("a")             # only namespace a
    pods.list()                # both namespaces
    pods.by_index(BY_CONTROLLER_UID, uid)

Objects returned are the cached ones: do not modify them. Nothing here raises for a
missing object; ``get`` returns None.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from msop.informers.informer import SharedInformer
from msop.informers.store import Obj, Store

__all__ = ["Lister", "MultiNamespaceLister", "Reader", "matches_labels"]


class Reader(Protocol):
    """What a reconciler reads a cache through: a :class:`Lister` or a
    :class:`MultiNamespaceLister` (or a test's fake)."""

    def get(self, name: str, namespace: str) -> Any: ...

    def by_index(self, index_name: str, value: str) -> list[Any]: ...


def matches_labels(obj: Obj, selector: Mapping[str, str] | None) -> bool:
    """True when every ``key: value`` of an equality selector is among the object's labels."""
    if not selector:
        return True
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


class Lister:
    """Reads of one store (an informer's, or a bare one in tests)."""

    def __init__(self, source: SharedInformer | Store) -> None:
        self._store = source.store if isinstance(source, SharedInformer) else source

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        """The object ``namespace/name`` (``namespace=None`` for cluster-scoped), or None."""
        return self._store.get_by_name(namespace, name)

    def list(
        self, namespace: str | None = None, *, labels: Mapping[str, str] | None = None
    ) -> builtins.list[Obj]:
        """Objects, optionally of one namespace and matching an equality label selector."""
        objs = self._store.by_index("namespace", namespace) if namespace else self._store.list()
        return [o for o in objs if matches_labels(o, labels)] if labels else objs

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        """Objects filed under ``value`` in the named index."""
        return self._store.by_index(index_name, value)


class MultiNamespaceLister:
    """Reads across per-namespace informers of one resource, routing by namespace.

    ValueError if two informers claim the same namespace or one watches all namespaces.
    """

    def __init__(self, informers: Iterable[SharedInformer]) -> None:
        self._by_ns: dict[str, Lister] = {}
        for inf in informers:
            if inf.namespace is None:
                raise ValueError("MultiNamespaceLister needs namespaced informers")
            if inf.namespace in self._by_ns:
                raise ValueError(f"two informers for namespace {inf.namespace!r}")
            self._by_ns[inf.namespace] = Lister(inf)

    @property
    def namespaces(self) -> builtins.list[str]:
        """The namespaces covered."""
        return list(self._by_ns)

    def get(self, name: str, namespace: str) -> Obj | None:
        """The object, or None (also for a namespace that is not covered)."""
        lister = self._by_ns.get(namespace)
        return lister.get(name, namespace) if lister else None

    def list(
        self, namespace: str | None = None, *, labels: Mapping[str, str] | None = None
    ) -> builtins.list[Obj]:
        """Objects of one namespace, or of all covered namespaces."""
        if namespace is not None:
            lister = self._by_ns.get(namespace)
            return lister.list(namespace, labels=labels) if lister else []
        return [o for lister in self._by_ns.values() for o in lister.list(labels=labels)]

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        """Index lookups across every covered namespace."""
        return [o for lister in self._by_ns.values() for o in lister.by_index(index_name, value)]
