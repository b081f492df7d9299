"""The shared informer: one cache of one resource, feeding many event handlers.

A :class:`SharedInformer` owns a :class:`~msop.informers.store.Store` and a
:class:`~msop.informers.reflector.Reflector`. Each object the reflector delivers is first
passed through the informer's transform (default: strip ``managedFields`` and the
last-applied annotation), then stored, then announced to every handler.

Handlers are plain synchronous callables, run in registration order on the event loop,
after the store already reflects the change:

- ``on_add(obj, is_initial_list)`` - ``is_initial_list`` is True for objects of the
  first list (and for the replay of the cache to a handler registered late), False for
  objects created later. Queues use it to put a restart's backlog at low priority.
- ``on_update(old, new)`` - the object changed (or a relist found it with another
  resourceVersion).
- ``on_delete(obj)`` - ``obj`` is the final state from the watch event, or, when the
  delete was only noticed by a relist, the last state the cache held as a
  :class:`~msop.informers.store.DeletedFinalStateUnknown` (a dict too: nothing to unwrap).

Objects are shared with the cache: handlers and listers must not modify them.

Handler exceptions are logged (with the traceback) and swallowed, so that one faulty
handler cannot stop the others or the cache; they are counted in ``statistics()``.
Handlers should be quick (enqueue a key); they run inline with the watch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from msop.informers.reflector import Reflector, ReflectorOptions
from msop.informers.store import (
    DeletedFinalStateUnknown,
    EncodedStore,
    IndexFunc,
    Obj,
    Store,
    Transform,
    default_transform,
    iter_relist_deltas,
)
from msop.kube.client import KubeClient
from msop.kube.resources import Resource

__all__ = [
    "AddHandler",
    "DeleteHandler",
    "HandlerRegistration",
    "InformerStatistics",
    "SharedInformer",
    "UpdateHandler",
]

log = structlog.get_logger("msop.informers.informer")

AddHandler = Callable[[Obj, bool], None]
"""``on_add(obj, is_initial_list)``."""
UpdateHandler = Callable[[Obj, Obj], None]
"""``on_update(old, new)``."""
DeleteHandler = Callable[[Obj], None]
"""``on_delete(obj_or_tombstone)``."""


@dataclass(frozen=True, eq=False)
class HandlerRegistration:
    """A handle returned by :meth:`SharedInformer.add_event_handler`."""

    on_add: AddHandler | None
    on_update: UpdateHandler | None
    on_delete: DeleteHandler | None


@dataclass(frozen=True)
class InformerStatistics:
    """A snapshot of an informer's state."""

    resource: str
    namespace: str | None
    label_selector: str | None
    field_selector: str | None
    shard_selector: str | None
    synced: bool
    objects: int
    handlers: int
    last_sync_resource_version: str
    lists: int
    watches: int
    events: int
    bookmarks: int
    watch_restarts: dict[str, int]
    handler_errors: int
    last_error: str | None


class SharedInformer:
    """A list+watch cache of one resource with event handlers. See the module docstring.

    ``namespace=None`` watches all namespaces. ``label_selector`` / ``field_selector`` /
    ``shard_selector`` (the API server's ``shardSelector``, where it offers one) scope
    the cache server-side. ``transform=None`` keeps objects unchanged;
    the default is :data:`~msop.informers.store.default_transform`. There is no
    periodic resync: the only controller re-reads on events and requeues itself when a
    deadline is due (controller-runtime's 10-hour resync has no job here).

    ``compact=True`` keeps the cache as an :class:`~msop.informers.store.EncodedStore`
    (objects as compressed JSON, decoded on each read): ten times smaller or more for a
    large cache of alike objects. Listed objects are transformed and encoded page by
    page. Handlers still get the transformed dicts.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        shard_selector: str | None = None,
        transform: Transform | None = default_transform,
        indexers: Mapping[str, IndexFunc] | None = None,
        options: ReflectorOptions | None = None,
        compact: bool = False,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.shard_selector = shard_selector
        self.transform = transform
        self.compact = compact
        self.store = EncodedStore(indexers) if compact else Store(indexers)
        """The cache. Read-only for consumers; the informer is its only writer."""
        self.reflector = Reflector(
            client,
            resource,
            self,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            shard_selector=shard_selector,
            options=options,
            list_transform=self._encode if compact else transform,
        )
        self._handlers: list[HandlerRegistration] = []
        self._synced = asyncio.Event()
        self._running = False
        self._handler_errors = 0
        self._log = log.bind(resource=str(resource), namespace=namespace)

    # -- handlers ---------------------------------------------------------------------

    def add_event_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> HandlerRegistration:
        """Register handlers; any may be None. Returns a handle for removal.

        If the cache already holds objects, they are replayed at once to ``on_add`` with
        ``is_initial_list=True``, so a late handler sees the same world as an early one.
        """
        reg = HandlerRegistration(on_add, on_update, on_delete)
        self._handlers.append(reg)
        if on_add is not None:
            # One object at a time: an EncodedStore's list() would decode them all at
            # once (20 MB at 10,000 pods, and the heap keeps most of it).
            for obj in self.store.snapshot().values():
                self._call(on_add, obj, True)
        return reg

    def remove_event_handler(self, registration: HandlerRegistration) -> None:
        """Stop notifying a registration. ValueError if it is not registered."""
        self._handlers.remove(registration)

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add indexes to the store (existing objects are indexed at once)."""
        self.store.add_indexers(indexers)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            self._handler_errors += 1
            self._log.exception("event handler failed", handler=getattr(fn, "__qualname__", fn))

    def _notify_add(self, obj: Obj, initial: bool) -> None:
        for h in tuple(self._handlers):
            if h.on_add is not None:
                self._call(h.on_add, obj, initial)

    def _notify_update(self, old: Obj, new: Obj) -> None:
        for h in tuple(self._handlers):
            if h.on_update is not None:
                self._call(h.on_update, old, new)

    def _notify_delete(self, obj: Obj) -> None:
        for h in tuple(self._handlers):
            if h.on_delete is not None:
                self._call(h.on_delete, obj)

    def _encode(self, obj: Obj) -> bytes:
        """The reflector's list transform of a compact informer: transform and encode
        each object as its page arrives, so that a long list never exists as dicts."""
        assert isinstance(self.store, EncodedStore)
        return self.store.encode(obj if self.transform is None else self.transform(obj))

    # -- ReflectorSink ----------------------------------------------------------------

    def replace(
        self, items: list[Any], resource_version: str, *, transformed: bool = False
    ) -> None:
        """Apply a full list (ReflectorSink). Called by the reflector only; with
        ``transformed`` the items already went through the reflector's list transform:
        :attr:`transform`, then, for a compact informer, encoding."""
        initial = not self._synced.is_set()
        known = self.store.snapshot()
        listed: Iterable[Obj]
        if transformed and isinstance(self.store, EncodedStore):
            # Decoded again one at a time for the handlers: never all at once.
            self.store.replace_encoded(items, resource_version)
            listed = map(self.store.decode, items)
        else:
            if self.transform is not None and not transformed:
                items = [self.transform(obj) for obj in items]
            self.store.replace(items, resource_version)
            listed = items
        for delta in iter_relist_deltas(known, listed, self.store.key):
            if delta.type == "add":
                assert delta.new is not None
                self._notify_add(delta.new, initial)
            elif delta.type == "update":
                assert delta.old is not None and delta.new is not None
                self._notify_update(delta.old, delta.new)
            else:
                assert delta.old is not None
                self._notify_delete(DeletedFinalStateUnknown(delta.key, delta.old))
        if initial:
            self._log.info("synced", objects=len(items), resource_version=resource_version)
            self._synced.set()

    def watch_event(self, event_type: str, obj: Obj) -> None:
        """Apply one watch event (ReflectorSink). Called by the reflector only."""
        if self.transform is not None:
            obj = self.transform(obj)
        rv = obj["metadata"].get("resourceVersion")
        if event_type == "DELETED":
            self.store.delete(obj)
            if rv:
                self.store.resource_version = rv
            self._notify_delete(obj)
            return
        old = self.store.add(obj)
        if rv:
            self.store.resource_version = rv
        if old is None:
            self._notify_add(obj, False)
        else:
            self._notify_update(old, obj)

    def bookmark(self, resource_version: str) -> None:
        """Record a bookmark (ReflectorSink)."""
        self.store.resource_version = resource_version

    # -- lifecycle --------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled. RuntimeError if already running."""
        if self._running:
            raise RuntimeError(f"informer for {self.resource} is already running")
        self._running = True
        try:
            await self.reflector.run()
        finally:
            self._running = False

    def has_synced(self) -> bool:
        """True once the first list has been stored and announced."""
        return self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until :meth:`has_synced`. Raises TimeoutError after ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            await self._synced.wait()

    @property
    def last_sync_resource_version(self) -> str:
        """resourceVersion of the last list, event or bookmark seen."""
        return self.reflector.last_sync_resource_version

    def statistics(self) -> InformerStatistics:
        """A snapshot of counters and state (cheap; safe to call any time)."""
        s = self.reflector.stats
        return InformerStatistics(
            resource=str(self.resource),
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            shard_selector=self.shard_selector,
            synced=self.has_synced(),
            objects=len(self.store),
            handlers=len(self._handlers),
            last_sync_resource_version=self.last_sync_resource_version,
            lists=s.lists,
            watches=s.watches,
            events=s.events,
            bookmarks=s.bookmarks,
            watch_restarts=dict(s.restarts),
            handler_errors=self._handler_errors,
            last_error=s.last_error,
        )
