"""A union of informers of one resource that come and go while it is read and watched.

A sharded controller watches its children through one informer per shard it holds (a
label selector each), and a shard changes hands while the controller runs. Its watches
(:meth:`msop.controller.controller.Controller.watch`) and its reads are fixed when it
starts, so they go through one :class:`InformerUnion`:

* :meth:`InformerUnion.add_event_handler` registers callbacks on every member, present and
  future; a member that joins replays its cache to them as initial-list adds (as a late
  handler on an informer gets).
* :meth:`InformerUnion.attach` and :meth:`InformerUnion.detach` add and remove a member.
  A member that leaves goes silently: no delete is announced for its objects (they were
  not deleted; they are someone else's now).
* :meth:`InformerUnion.get` and :meth:`InformerUnion.by_index` read every member (a
  :class:`~msop.informers.lister.Reader`); an object found in two members is returned
  once, from the first.
* :meth:`InformerUnion.add_indexers` adds indexes to every member, present and future;
  :attr:`InformerUnion.store` reads the members' keys and indexes as one store
  (:class:`UnionStore`), for the code that reads an informer's store.

It does not run its members: their owner does.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field

from msop.informers.informer import (
    AddHandler,
    DeleteHandler,
    HandlerRegistration,
    SharedInformer,
    UpdateHandler,
)
from msop.informers.lister import Lister
from msop.informers.store import IndexFunc
from msop.kube.objects import JSON

__all__ = ["InformerUnion", "UnionRegistration", "UnionStore"]


@dataclass(eq=False)
class UnionRegistration:
    """The handle :meth:`InformerUnion.add_event_handler` returns."""

    on_add: AddHandler | None
    on_update: UpdateHandler | None
    on_delete: DeleteHandler | None
    on_members: dict[int, HandlerRegistration] = field(default_factory=dict)
    """The registration on each member, by ``id(member)``."""


class InformerUnion:
    """See the module docstring."""

    namespace: str | None = None
    """As an informer's: the union may hold objects of every namespace."""

    def __init__(self, members: list[SharedInformer] | None = None) -> None:
        self._members: list[SharedInformer] = []
        self._registrations: list[UnionRegistration] = []
        self._indexers: dict[str, IndexFunc] = {}
        self.store = UnionStore(self)
        """The members' caches, read as one."""
        for member in members or []:
            self.attach(member)

    @property
    def members(self) -> list[SharedInformer]:
        """The informers in the union now."""
        return list(self._members)

    def attach(self, informer: SharedInformer) -> None:
        """Add ``informer``: the handlers registered so far get its cache as initial adds,
        then its events. ValueError if it is a member already."""
        if any(m is informer for m in self._members):
            raise ValueError("informer is in the union already")
        _index(informer, self._indexers)
        self._members.append(informer)
        for reg in self._registrations:
            reg.on_members[id(informer)] = informer.add_event_handler(
                reg.on_add, reg.on_update, reg.on_delete
            )

    def detach(self, informer: SharedInformer) -> None:
        """Remove ``informer`` silently (no deletes announced); nothing if not a member."""
        if not any(m is informer for m in self._members):
            return
        self._members = [m for m in self._members if m is not informer]
        for reg in self._registrations:
            handle = reg.on_members.pop(id(informer), None)
            if handle is not None:
                informer.remove_event_handler(handle)

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add indexes to every member, now and when it joins (a member that has an index
        of that name already keeps its own). ValueError if the union has one."""
        for name in indexers:
            if name in self._indexers:
                raise ValueError(f"index {name!r} already exists")
        self._indexers.update(indexers)
        for member in self._members:
            _index(member, indexers)

    # -- EventSource ---------------------------------------------------------------------

    def add_event_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> UnionRegistration:
        """Register callbacks on every member, now and later."""
        reg = UnionRegistration(on_add, on_update, on_delete)
        self._registrations.append(reg)
        for member in self._members:
            reg.on_members[id(member)] = member.add_event_handler(on_add, on_update, on_delete)
        return reg

    def remove_event_handler(self, registration: UnionRegistration) -> None:
        """Unregister from every member. ValueError if it is not registered."""
        self._registrations.remove(registration)
        for member in self._members:
            handle = registration.on_members.pop(id(member), None)
            if handle is not None:
                member.remove_event_handler(handle)

    # -- Reader --------------------------------------------------------------------------

    def get(self, name: str, namespace: str) -> JSON | None:
        """The object from the first member that has it (a member watching another
        namespace does not)."""
        for member in self._members:
            if member.namespace not in (None, namespace):
                continue
            found: JSON | None = Lister(member).get(name, namespace)
            if found is not None:
                return found
        return None

    def by_index(self, index_name: str, value: str) -> builtins.list[JSON]:
        """Index lookups across the members, each object once (by namespace and name)."""
        out: builtins.list[JSON] = []
        seen: set[tuple[str, str]] = set()
        for member in self._members:
            for obj in Lister(member).by_index(index_name, value):
                meta = obj.get("metadata") or {}
                key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
                if key not in seen:
                    seen.add(key)
                    out.append(obj)
        return out


def _index(informer: SharedInformer, indexers: Mapping[str, IndexFunc]) -> None:
    have = set(informer.store.index_names())
    missing = {name: f for name, f in indexers.items() if name not in have}
    if missing:
        informer.add_indexers(missing)


class UnionStore:
    """The read side of a store (keys, and index lookups by key) across a union's
    members, each key once."""

    def __init__(self, union: InformerUnion) -> None:
        self._union = union

    def keys(self) -> builtins.list[str]:
        """Every member's keys, each once."""
        found = (m.store.keys() for m in self._union.members)
        return list(dict.fromkeys(k for keys in found for k in keys))

    def __len__(self) -> int:
        return len(self.keys())

    def get_by_name(self, namespace: str, name: str) -> JSON | None:
        """The object ``namespace/name`` from the first member that has it."""
        return self._union.get(name, namespace)

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        """The keys of ``value`` in index ``index_name`` of every member, each once."""
        found = (m.store.index_keys(index_name, value) for m in self._union.members)
        return list(dict.fromkeys(k for keys in found for k in keys))

    def index_values(self, index_name: str) -> builtins.list[str]:
        """The values of index ``index_name`` in any member, each once."""
        found = (m.store.index_values(index_name) for m in self._union.members)
        return list(dict.fromkeys(v for values in found for v in values))
