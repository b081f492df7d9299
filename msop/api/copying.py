"""A deep copy for JSON values (what the API server sends), without ``copy.deepcopy``'s cost.

``copy.deepcopy`` keeps a memo of every object it visits and dispatches on type through
a table; decoded JSON has no shared or cyclic parts and only six types, so a plain
recursion over dicts and lists gives the same result several times faster. The planner
copies the MSJob (defaulting) and its status on every reconcile, so this is on the hot
path (``make bench`` CPU per lifecycle).
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def copy_json(value: T) -> T:
    """A copy of `value` sharing nothing mutable with it.

    Dicts and lists (and their subclasses, copied as plain ``dict``/``list``) are copied
    recursively; everything else is returned as is. Strings, numbers, booleans and
    ``None`` are immutable, so that is a deep copy of any JSON value. Tuples are
    returned as is too: keep other mutable types out of the value.
    """
    return _copy(value)  # type: ignore[no-any-return]


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) if isinstance(v, (dict, list)) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) if isinstance(v, (dict, list)) else v for v in value]
    return value
