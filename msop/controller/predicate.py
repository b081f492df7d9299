"""Predicates: filters that decide whether an informer event reaches a controller's handler.

A :class:`Predicate` has one method per event kind and returns True to let the event through.
A controller passes an event on only if *every* predicate of the watch accepts it. Predicates
get the cached objects (plain dicts, read-only) and must not raise; an exception is treated as
"reject" and logged by the controller.

Provided: :class:`Funcs` (from plain functions), :class:`GenerationChangedPredicate`,
:class:`ResourceVersionChangedPredicate`, :class:`LabelChangedPredicate`,
:class:`AnnotationChangedPredicate`, :class:`LabelSelectorPredicate`, and the combinators
:func:`all_of`, :func:`any_of`, :func:`negate`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "AnnotationChangedPredicate",
    "Funcs",
    "GenerationChangedPredicate",
    "LabelChangedPredicate",
    "LabelSelectorPredicate",
    "Obj",
    "Predicate",
    "ResourceVersionChangedPredicate",
    "all_of",
    "any_of",
    "label_selector_matches",
    "negate",
]

Obj = Mapping[str, Any]


class Predicate(Protocol):
    """Filters events; every method returns True to let the event through."""

    def create(self, obj: Obj) -> bool:
        """An object appeared (including the initial list)."""
        ...

    def update(self, old: Obj, new: Obj) -> bool:
        """An object changed (including resync, where ``old`` is ``new``'s same version)."""
        ...

    def delete(self, obj: Obj) -> bool:
        """An object disappeared (``obj`` is its last known state)."""
        ...


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class _AcceptAll:
    def create(self, obj: Obj) -> bool:
        return True

    def update(self, old: Obj, new: Obj) -> bool:
        return True

    def delete(self, obj: Obj) -> bool:
        return True


@dataclass(frozen=True)
class Funcs:
    """A predicate from optional functions; a missing function accepts everything."""

    create_func: Callable[[Obj], bool] | None = None
    """Filter for create events."""
    update_func: Callable[[Obj, Obj], bool] | None = None
    """Filter for update events (old, new)."""
    delete_func: Callable[[Obj], bool] | None = None
    """Filter for delete events."""

    def create(self, obj: Obj) -> bool:
        """Apply ``create_func`` (accept if None)."""
        return self.create_func is None or self.create_func(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        """Apply ``update_func`` (accept if None)."""
        return self.update_func is None or self.update_func(old, new)

    def delete(self, obj: Obj) -> bool:
        """Apply ``delete_func`` (accept if None)."""
        return self.delete_func is None or self.delete_func(obj)


class GenerationChangedPredicate(_AcceptAll):
    """Passes updates only when ``metadata.generation`` changed (spec edits, not status).

    Objects without a generation (most built-in kinds lack spec generation tracking only for
    some fields) pass every update. Create and delete always pass.
    """

    def update(self, old: Obj, new: Obj) -> bool:
        """True when the generation differs or is missing."""
        g_old, g_new = _meta(old).get("generation"), _meta(new).get("generation")
        if g_old is None or g_new is None:
            return True
        return bool(g_old != g_new)


class ResourceVersionChangedPredicate(_AcceptAll):
    """Passes updates only when ``metadata.resourceVersion`` changed (drops resyncs)."""

    def update(self, old: Obj, new: Obj) -> bool:
        """True when the resourceVersion differs."""
        return bool(_meta(old).get("resourceVersion") != _meta(new).get("resourceVersion"))


class LabelChangedPredicate(_AcceptAll):
    """Passes updates only when ``metadata.labels`` changed."""

    def update(self, old: Obj, new: Obj) -> bool:
        """True when the labels differ."""
        return bool((_meta(old).get("labels") or {}) != (_meta(new).get("labels") or {}))


class AnnotationChangedPredicate(_AcceptAll):
    """Passes updates only when ``metadata.annotations`` changed."""

    def update(self, old: Obj, new: Obj) -> bool:
        """True when the annotations differ."""
        old_a = _meta(old).get("annotations") or {}
        return bool(old_a != (_meta(new).get("annotations") or {}))


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Evaluate a ``metav1.LabelSelector`` dict (``matchLabels``/``matchExpressions``).

    Operators: In, NotIn, Exists, DoesNotExist. An empty selector matches everything.
    Raises ValueError for an unknown operator.
    """
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr["key"], expr["operator"]
        values: Sequence[str] = expr.get("values") or []
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            raise ValueError(f"unknown label selector operator {op!r}")
        if not ok:
            return False
    return True


class LabelSelectorPredicate:
    """Passes events of objects whose labels match a ``metav1.LabelSelector`` dict.

    For updates, the new object decides. The selector is validated at construction
    (ValueError for an unknown operator).
    """

    def __init__(self, selector: Mapping[str, Any]) -> None:
        self.selector = selector
        label_selector_matches(selector, {})

    def _matches(self, obj: Obj) -> bool:
        return label_selector_matches(self.selector, _meta(obj).get("labels") or {})

    def create(self, obj: Obj) -> bool:
        """True when ``obj`` matches."""
        return self._matches(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        """True when ``new`` matches."""
        return self._matches(new)

    def delete(self, obj: Obj) -> bool:
        """True when ``obj`` matches."""
        return self._matches(obj)


class _Combined:
    def __init__(self, predicates: Sequence[Predicate], combine: Callable[[Any], bool]) -> None:
        self._predicates = predicates
        self._combine = combine

    def create(self, obj: Obj) -> bool:
        return self._combine(p.create(obj) for p in self._predicates)

    def update(self, old: Obj, new: Obj) -> bool:
        return self._combine(p.update(old, new) for p in self._predicates)

    def delete(self, obj: Obj) -> bool:
        return self._combine(p.delete(obj) for p in self._predicates)


def all_of(*predicates: Predicate) -> Predicate:
    """A predicate passing events that every one of ``predicates`` passes."""
    return _Combined(predicates, all)


def any_of(*predicates: Predicate) -> Predicate:
    """A predicate passing events that at least one of ``predicates`` passes."""
    return _Combined(predicates, any)


class _Not:
    def __init__(self, predicate: Predicate) -> None:
        self._p = predicate

    def create(self, obj: Obj) -> bool:
        return not self._p.create(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        return not self._p.update(old, new)

    def delete(self, obj: Obj) -> bool:
        return not self._p.delete(obj)


def negate(predicate: Predicate) -> Predicate:
    """A predicate passing exactly the events ``predicate`` rejects."""
    return _Not(predicate)
