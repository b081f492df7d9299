"""msop.informers: list+watch caches of plain-dict objects (client-go's tools/cache).

Stages, one module each: :mod:`~msop.informers.reflector` (list, then watch; relist on
410; stuck-watch restart; backoff) -> :mod:`~msop.informers.store` (the cache with
indexes) -> :mod:`~msop.informers.informer` (event handlers) ->
:mod:`~msop.informers.factory` (one shared informer per scope). Handlers get
``on_add(obj, is_initial_list)``, ``on_update(old, new)`` and
``on_delete(obj)`` (a ``DeletedFinalStateUnknown`` dict when only a relist saw it).
Cached objects are read-only.
"""

from msop.informers.factory import InformerFactory, InformerKey
from msop.informers.informer import (
    AddHandler,
    DeleteHandler,
    HandlerRegistration,
    InformerStatistics,
    SharedInformer,
    UpdateHandler,
)
from msop.informers.lister import Lister, MultiNamespaceLister, matches_labels
from msop.informers.reflector import (
    Backoff,
    Reflector,
    ReflectorOptions,
    ReflectorSink,
    backoff_delay,
    watch_timeout,
)
from msop.informers.store import (
    BY_CONTROLLER_UID,
    BY_NAMESPACE,
    LAST_APPLIED_ANNOTATION,
    DeletedFinalStateUnknown,
    Delta,
    EncodedStore,
    IndexFunc,
    Obj,
    Store,
    Transform,
    by_controller_uid,
    by_namespace,
    default_transform,
    intern_strings,
    iter_relist_deltas,
    key_of,
    make_transform,
    relist_deltas,
    split_key,
)

__all__ = [
    "BY_CONTROLLER_UID",
    "BY_NAMESPACE",
    "LAST_APPLIED_ANNOTATION",
    "AddHandler",
    "Backoff",
    "DeleteHandler",
    "DeletedFinalStateUnknown",
    "Delta",
    "EncodedStore",
    "HandlerRegistration",
    "IndexFunc",
    "InformerFactory",
    "InformerKey",
    "InformerStatistics",
    "Lister",
    "MultiNamespaceLister",
    "Obj",
    "Reflector",
    "ReflectorOptions",
    "ReflectorSink",
    "SharedInformer",
    "Store",
    "Transform",
    "UpdateHandler",
    "backoff_delay",
    "by_controller_uid",
    "by_namespace",
    "default_transform",
    "intern_strings",
    "iter_relist_deltas",
    "key_of",
    "make_transform",
    "matches_labels",
    "relist_deltas",
    "split_key",
    "watch_timeout",
]
