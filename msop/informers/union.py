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

It does not run its members: their owner does.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field

from msop.informers.informer import (
    AddHandler,
    DeleteHandler,
    HandlerRegistration,
    SharedInformer,
    UpdateHandler,
)
from msop.informers.lister import Lister
from msop.kube.objects import JSON

__all__ = ["InformerUnion", "UnionRegistration"]


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

    def __init__(self, members: list[SharedInformer] | None = None) -> None:
        self._members: list[SharedInformer] = []
        self._registrations: list[UnionRegistration] = []
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
