"""The cache: plain-dict objects keyed ``namespace/name`` with named indexes.

:class:`Store` is client-go's ``Indexer`` for one event loop. It is not thread-safe and
never awaits, so every method runs atomically with respect to other coroutines.

Objects are stored as given, without copying. Anything read from a store (and every
object passed to an informer's handlers) is shared with the cache and with every other
consumer: **treat it as read-only**. Copy before modifying (``copy.deepcopy``), e.g. to
build a patch or an update.

Index functions map an object to a list of index values; :func:`by_namespace` and
:func:`by_controller_uid` are built in. They must not raise; an exception from an index
function propagates out of the mutating call, leaving the store unchanged for that object.

:class:`EncodedStore` has the same interface but keeps each object encoded (compact JSON,
deflated against a dictionary) and decodes it on every read: a new dict each time, so
readers may even modify what they get, but two reads of one object are equal, not
identical. A projected pod of ~800 bytes as JSON takes ~2.5 KB as Python dicts and about
a hundred bytes encoded, and the long-lived part of the cache is a few objects per entry
instead of dozens that pin the allocator's arenas. Decoding costs a few microseconds per
object: meant for caches read a few objects at a time.

Transforms (:data:`Transform`) run before objects enter a store - the informer applies
them, the store does not. :func:`default_transform` drops ``metadata.managedFields``, which
is often half the size of a small object and is never needed by a controller, and
interns repeated strings so that cached objects share them (about half the memory).
"""

from __future__ import annotations

import builtins
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, NamedTuple

import orjson

from msop.kube.objects import controller_ref

__all__ = [
    "BY_CONTROLLER_UID",
    "BY_NAMESPACE",
    "LAST_APPLIED_ANNOTATION",
    "DeflatedJSON",
    "DeletedFinalStateUnknown",
    "Delta",
    "EncodedStore",
    "IndexFunc",
    "Obj",
    "Store",
    "Transform",
    "by_controller_uid",
    "by_namespace",
    "default_transform",
    "intern_strings",
    "iter_relist_deltas",
    "key_of",
    "make_transform",
    "relist_deltas",
    "split_key",
]

Obj = dict[str, Any]
"""A Kubernetes object as the API server sends it."""

IndexFunc = Callable[[Obj], list[str]]
"""Maps an object to the index values it is filed under (possibly none)."""

Transform = Callable[[Obj], Obj]
"""Runs on each object before it is stored; may modify its argument and return it."""

BY_NAMESPACE = "namespace"
BY_CONTROLLER_UID = "controller-uid"
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


def key_of(obj: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects (client-go's key format)."""
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def split_key(key: str) -> tuple[str | None, str]:
    """Inverse of :func:`key_of`: ``(namespace or None, name)``."""
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else (None, namespace)


def by_namespace(obj: Obj) -> builtins.list[str]:
    """Index by ``metadata.namespace`` (cluster-scoped objects are not indexed)."""
    namespace = obj["metadata"].get("namespace")
    return [namespace] if namespace else []


def by_controller_uid(obj: Obj) -> builtins.list[str]:
    """Index by the uid of the ownerReference with ``controller: true``, if any."""
    ref = controller_ref(obj)
    return [ref["uid"]] if ref is not None and ref.get("uid") else []


_INTERN_MAX_LEN = 24


def intern_strings(value: Any) -> Any:
    """Return a copy of a decoded JSON value whose keys and short strings are interned.

    ``json.loads`` allocates every key afresh for each watch event, so ten thousand
    cached pods hold ten thousand copies of ``"metadata"``, ``"containerPort"``, and of
    values such as ``"IfNotPresent"``. Interning keys and strings of up to 24 characters
    makes them shared: a typical pod shrinks to about half. Longer strings (uids,
    images, JSON blobs) are mostly unique and are left alone.
    """
    if type(value) is dict:
        return {sys.intern(k): intern_strings(v) for k, v in value.items()}
    if type(value) is list:
        return [intern_strings(v) for v in value]
    if type(value) is str and len(value) <= _INTERN_MAX_LEN:
        return sys.intern(value)
    return value


def make_transform(*, drop_last_applied: bool = True, intern: bool = True) -> Transform:
    """A transform that strips what controllers never read and shares repeated strings.

    It always drops ``metadata.managedFields`` (server-side-apply bookkeeping). With
    ``drop_last_applied`` (the default) it also drops the
    ``kubectl.kubernetes.io/last-applied-configuration`` annotation: ``kubectl apply``
    stores a full copy of the applied object there, doubling the size of every object a
    user manages with kubectl; a controller needing it must turn this option off.
    With ``intern`` (the default) the result is :func:`intern_strings` of the object,
    i.e. a new dict; otherwise the object is modified in place and returned.
    """

    def transform(obj: Obj) -> Obj:
        meta = obj.get("metadata")
        if meta is not None:
            meta.pop("managedFields", None)
            if drop_last_applied:
                annotations = meta.get("annotations")
                if annotations and LAST_APPLIED_ANNOTATION in annotations:
                    del annotations[LAST_APPLIED_ANNOTATION]
        if intern:
            result: Obj = intern_strings(obj)
            return result
        return obj

    return transform


default_transform: Transform = make_transform()
"""Drops ``managedFields`` and the last-applied annotation, interns strings; see
:func:`make_transform`."""


Bucket = str | tuple[str, ...] | set[str]
"""The keys filed under one index value: one key alone, a few in a tuple, more in a set.
Most index values of a controller's caches have one key (a Service's owner) or a few (a
job's pods); an empty set alone takes 216 bytes, a tuple of five keys 80."""

Index = dict[str, Bucket]

_TUPLE_MAX = 16
"""Buckets grow from a tuple into a set beyond this many keys (a tuple's add and
discard copy it)."""


def _bucket_keys(bucket: Bucket | None) -> tuple[str, ...] | set[str]:
    if bucket is None:
        return ()
    return (bucket,) if isinstance(bucket, str) else bucket


def _bucket_add(index: Index, value: str, key: str) -> None:
    bucket = index.get(value)
    if bucket is None:
        index[value] = key
    elif isinstance(bucket, str):
        if bucket != key:
            index[value] = (bucket, key)
    elif isinstance(bucket, tuple):
        if key not in bucket:
            index[value] = (*bucket, key) if len(bucket) < _TUPLE_MAX else {*bucket, key}
    else:
        bucket.add(key)


def _bucket_discard(index: Index, value: str, key: str) -> None:
    bucket = index.get(value)
    if bucket is None:
        return
    if isinstance(bucket, str):
        if bucket == key:
            del index[value]
    elif isinstance(bucket, tuple):
        if key in bucket:
            rest = tuple(k for k in bucket if k != key)
            index[value] = rest[0] if len(rest) == 1 else rest
    else:
        bucket.discard(key)
        if not bucket:
            del index[value]


class Store:
    """Objects by key, plus named indexes ``name -> value -> keys`` (see :data:`Bucket`).

    ``indexers`` defaults to ``{"namespace": by_namespace, "controller-uid":
    by_controller_uid}``. Mutators return the object previously stored under the key
    (or None). ``resource_version`` is the collection resourceVersion of the last
    :meth:`replace` or the value set by the informer on each watch event/bookmark.
    """

    def __init__(
        self,
        indexers: Mapping[str, IndexFunc] | None = None,
        key_func: Callable[[Obj], str] = key_of,
    ) -> None:
        if indexers is None:
            indexers = {BY_NAMESPACE: by_namespace, BY_CONTROLLER_UID: by_controller_uid}
        self._key = key_func
        self._items: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = dict(indexers)
        self._indices: dict[str, Index] = {name: {} for name in self._indexers}
        self.resource_version = ""

    # -- reading ----------------------------------------------------------------------

    def key(self, obj: Obj) -> str:
        """The key this store files ``obj`` under."""
        return self._key(obj)

    def get(self, key: str) -> Obj | None:
        """The object under ``key`` (``namespace/name``), or None."""
        return self._items.get(key)

    def get_by_name(self, namespace: str | None, name: str) -> Obj | None:
        """The object ``namespace/name`` (or cluster-scoped ``name``), or None."""
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def list(self) -> builtins.list[Obj]:
        """All objects, in no particular order (a new list of shared objects)."""
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        """All keys."""
        return list(self._items)

    def items(self) -> Iterator[tuple[str, Obj]]:
        """Iterate ``(key, obj)``; do not mutate the store while iterating."""
        return iter(self._items.items())

    def snapshot(self) -> Mapping[str, Obj]:
        """The content as ``key -> object`` at this moment (later changes do not show)."""
        return dict(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def index_names(self) -> builtins.list[str]:
        """Names of the registered indexes."""
        return list(self._indexers)

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        """Objects whose index function returned ``value``. KeyError for unknown indexes."""
        items = self._items
        return [items[k] for k in _bucket_keys(self._indices[index_name].get(value))]

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        """Keys of the objects filed under ``value`` in ``index_name``."""
        return list(_bucket_keys(self._indices[index_name].get(value)))

    def index_values(self, index_name: str) -> builtins.list[str]:
        """Every value that currently has objects in ``index_name``."""
        return list(self._indices[index_name])

    # -- writing ----------------------------------------------------------------------

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Register more indexes (indexing existing objects). ValueError on a duplicate."""
        for name in indexers:
            if name in self._indexers:
                raise ValueError(f"index {name!r} already exists")
        for name, func in indexers.items():
            self._indexers[name] = func
            index: Index = {}
            for key, obj in self.items():
                for value in func(obj):
                    _bucket_add(index, value, key)
            self._indices[name] = index

    def _unindex(self, key: str, obj: Obj) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(obj):
                _bucket_discard(index, value, key)

    def _index(self, key: str, obj: Obj) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(obj):
                _bucket_add(index, value, key)

    # Where objects are kept: a subclass may keep them in another form (EncodedStore).
    def _entry(self, obj: Obj) -> Any:
        """The stored form of ``obj``; computed before any change, so a failure changes
        nothing."""
        return obj

    def _swap(self, key: str, entry: Any) -> Obj | None:
        """Store ``entry`` under ``key``; return the object it replaced."""
        old = self._items.get(key)
        self._items[key] = entry
        return old

    def _pop(self, key: str) -> Obj | None:
        return self._items.pop(key, None)

    def add(self, obj: Obj) -> Obj | None:
        """Insert or overwrite ``obj``; return the previous object under its key."""
        key = self._key(obj)
        old = self._swap(key, self._entry(obj))
        if old is not None:
            self._unindex(key, old)
        self._index(key, obj)
        return old

    update = add
    """Same as :meth:`add` (client-go keeps both names)."""

    def delete(self, obj_or_key: Obj | str) -> Obj | None:
        """Remove by object or key; return the removed object (None if absent)."""
        key = obj_or_key if isinstance(obj_or_key, str) else self._key(obj_or_key)
        old = self._pop(key)
        if old is not None:
            self._unindex(key, old)
        return old

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        """Swap the whole content for ``items`` and rebuild the indexes."""
        self._items = {self._key(obj): obj for obj in items}
        self._indices = {name: {} for name in self._indexers}
        for key, obj in self._items.items():
            self._index(key, obj)
        self.resource_version = resource_version


# Raw deflate with an 8 KB window (a dictionary object and the one encoded fit in it) and
# a small state: compressing an object costs a few microseconds.
_WBITS = -13
_MEMLEVEL = 2
_LEVEL = 6


class DeflatedJSON:
    """Objects kept as compact JSON deflated against a preset dictionary: the JSON of the
    first object encoded. Objects of one kind are alike, so each takes about a hundred
    bytes; decoding one costs about as much as parsing its JSON."""

    __slots__ = ("_zdict",)

    def __init__(self) -> None:
        self._zdict: bytes | None = None

    def encode(self, obj: Obj) -> bytes:
        """``obj`` encoded; the first object encoded becomes the dictionary."""
        data = orjson.dumps(obj)
        if self._zdict is None:
            self._zdict = bytes(memoryview(data))  # orjson's buffer is larger than data
        z = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, _MEMLEVEL, zdict=self._zdict)
        return z.compress(data) + z.flush()

    def decode(self, raw: bytes) -> Obj:
        """An object from what :meth:`encode` returned (a new dict each time)."""
        assert self._zdict is not None
        z = zlib.decompressobj(_WBITS, zdict=self._zdict)
        result: Obj = orjson.loads(z.decompress(raw))
        return result


class EncodedStore(Store):
    """A :class:`Store` that keeps objects encoded; see the module docstring.

    An object is stored as its compact JSON, deflated with a preset dictionary: the JSON
    of the first object this store ever encoded. Objects of one cache are alike (the pods
    of a controller differ in a few names, uids and values), so each takes about a
    hundred bytes instead of ~800 as JSON or several KB as dicts; decoding one costs
    about as much as parsing its JSON (a few microseconds).

    Reads return a freshly decoded object each time; index functions and the objects
    returned by mutators (the previous state) see decoded objects too.
    """

    def __init__(
        self,
        indexers: Mapping[str, IndexFunc] | None = None,
        key_func: Callable[[Obj], str] = key_of,
    ) -> None:
        super().__init__(indexers, key_func)
        self._raw: dict[str, bytes] = {}
        del self._items  # every access goes through _raw
        self._codec = DeflatedJSON()

    # -- encoding ---------------------------------------------------------------------

    def encode(self, obj: Obj) -> bytes:
        """The stored form of ``obj``. The first object encoded becomes the dictionary."""
        return self._codec.encode(obj)

    def decode(self, raw: bytes) -> Obj:
        """An object from its stored form (a new dict each time)."""
        return self._codec.decode(raw)

    # -- reading ----------------------------------------------------------------------

    def get(self, key: str) -> Obj | None:
        raw = self._raw.get(key)
        return None if raw is None else self.decode(raw)

    def get_by_name(self, namespace: str | None, name: str) -> Obj | None:
        return self.get(f"{namespace}/{name}" if namespace else name)

    def list(self) -> builtins.list[Obj]:
        return [self.decode(raw) for raw in self._raw.values()]

    def keys(self) -> builtins.list[str]:
        return list(self._raw)

    def items(self) -> Iterator[tuple[str, Obj]]:
        return ((key, self.decode(raw)) for key, raw in self._raw.items())

    def snapshot(self) -> Mapping[str, Obj]:
        """The content at this moment, decoded only where it is read."""
        return _Decoded(dict(self._raw), self.decode)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        raw = self._raw
        return [self.decode(raw[k]) for k in _bucket_keys(self._indices[index_name].get(value))]

    # -- writing ----------------------------------------------------------------------

    def _entry(self, obj: Obj) -> bytes:
        return self.encode(obj)

    def _swap(self, key: str, entry: Any) -> Obj | None:
        old = self._raw.get(key)
        self._raw[key] = entry
        return None if old is None else self.decode(old)

    def _pop(self, key: str) -> Obj | None:
        raw = self._raw.pop(key, None)
        return None if raw is None else self.decode(raw)

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        self.replace_encoded([self.encode(obj) for obj in items], resource_version)

    def replace_encoded(self, raws: Iterable[bytes], resource_version: str) -> None:
        """:meth:`replace` with objects already encoded by this store's :meth:`encode`:
        each is decoded once, alone, to be keyed and indexed. A list can thus be
        encoded page by page and never exist as dicts all at once."""
        content: dict[str, bytes] = {}
        indices: dict[str, Index] = {name: {} for name in self._indexers}
        for raw in raws:
            obj = self.decode(raw)
            key = self._key(obj)
            content[key] = raw
            for name, func in self._indexers.items():
                for value in func(obj):
                    _bucket_add(indices[name], value, key)
        self._raw, self._indices = content, indices
        self.resource_version = resource_version


class _Decoded(Mapping[str, Obj]):
    """A read-only ``key -> object`` view over encoded objects, decoded when read."""

    def __init__(self, raw: dict[str, bytes], decode: Callable[[bytes], Obj]) -> None:
        self._raw = raw
        self._decode = decode

    def __getitem__(self, key: str) -> Obj:
        return self._decode(self._raw[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


class DeletedFinalStateUnknown(dict[str, Any]):
    """A delete noticed by a relist, not by a watch event.

    The object vanished while we were not watching, so its final state is unknown: this
    *is* the last state the cache held (a dict, which may be stale), so a delete handler
    reads it like any object; ``isinstance`` tells the rare handler that cares. ``key``
    is its ``namespace/name``. (client-go wraps the object instead, and every handler
    has to unwrap it.)
    """

    def __init__(self, key: str, obj: Obj) -> None:
        super().__init__(obj)
        self.key = key

    @property
    def obj(self) -> Obj:
        """The last known state (this object itself)."""
        return self


class Delta(NamedTuple):
    """One change found by :func:`relist_deltas`: ``old`` is None for an add, ``new`` is
    None for a delete."""

    type: Literal["add", "update", "delete"]
    key: str
    old: Obj | None
    new: Obj | None


def relist_deltas(
    known: Mapping[str, Obj],
    listed: Iterable[Obj],
    key_func: Callable[[Obj], str] = key_of,
) -> list[Delta]:
    """Diff a fresh list against the cache.

    - an object not in ``known`` is an ``add``;
    - an object whose ``metadata.resourceVersion`` changed is an ``update``; unchanged
      ones yield nothing (the watch history already delivered them);
    - a key in ``known`` but not in ``listed`` is a ``delete`` whose ``old`` is the last
      known state.
    """
    return list(iter_relist_deltas(known, listed, key_func))


def iter_relist_deltas(
    known: Mapping[str, Obj],
    listed: Iterable[Obj],
    key_func: Callable[[Obj], str] = key_of,
) -> Iterator[Delta]:
    """:func:`relist_deltas` one at a time: ``listed`` is consumed as the deltas are, and
    ``known`` is read only for the keys listed and the ones that vanished."""
    seen: set[str] = set()
    for obj in listed:
        key = key_func(obj)
        seen.add(key)
        old = known.get(key)
        if old is None:
            yield Delta("add", key, None, obj)
        elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
            yield Delta("update", key, old, obj)
    for key in known:
        if key not in seen:
            yield Delta("delete", key, known[key], None)
