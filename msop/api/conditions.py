"""Kubeflow JobStatus condition rules, as functions over a plain `status` dict.

`status["conditions"]` is a list of dicts with the keys `type`, `status` ("True" | "False" |
"Unknown"), `reason`, `message`, `lastUpdateTime` and `lastTransitionTime` (RFC3339 strings such
as "2026-01-01T00:00:00Z", supplied by the caller as `now` so the functions stay pure).

The rules `set_condition` enforces:

1. **Finished is final.** Once Failed or Succeeded is True, nothing changes any more: every call
   returns False and leaves the list as it is, whatever the type (Failed and Succeeded included,
   so a Failed reason/message cannot be rewritten either).
2. **Unchanged is a no-op.** Setting a condition to the status, reason and message it already has
   returns False and keeps its timestamps and its position in the list.
3. **Changed moves to the end.** A changed or new condition is removed from where it was and
   appended, because the `State` printer column shows the type of the last condition.
   `lastUpdateTime` becomes `now`; `lastTransitionTime` becomes `now` only if `status` flipped
   (or the condition is new), otherwise it is kept.
4. **Exclusions.** Setting Running True turns a True Restarting False, and vice versa. Setting
   Succeeded, Failed or Suspended True turns a True Running and a True Restarting False. Setting
   Running, Succeeded, Failed or Suspended True turns a True Queued False. Such a side-effect
   change stays in place (so that the condition just set is the last one), keeps its reason and
   message, and gets `now` as both timestamps.
5. **Out of the State on request.** `in_place=True` updates an existing condition where it is,
   or moves it to the front if it was the last: a condition that turns False (Queued once the
   gang is placed) must not be, or stay, what the State column shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msop.api import constants as c

_TURNS_FALSE: dict[str, tuple[str, ...]] = {
    c.RUNNING: (c.RESTARTING, c.QUEUED),
    c.RESTARTING: (c.RUNNING,),
    c.SUCCEEDED: (c.RUNNING, c.RESTARTING, c.QUEUED),
    c.FAILED: (c.RUNNING, c.RESTARTING, c.QUEUED),
    c.SUSPENDED: (c.RUNNING, c.RESTARTING, c.QUEUED),
}


def _conditions(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return []
    return [x for x in conditions if isinstance(x, dict)]


def get_condition(status: Mapping[str, Any], cond_type: str) -> dict[str, Any] | None:
    """The condition of `cond_type` in `status`, or None. The dict returned is the one inside
    `status`: treat it as read-only and change conditions with `set_condition`."""
    for condition in _conditions(status):
        if condition.get("type") == cond_type:
            return condition
    return None


def is_true(status: Mapping[str, Any], cond_type: str) -> bool:
    """Whether `status` has a condition of `cond_type` with status "True"."""
    condition = get_condition(status, cond_type)
    return condition is not None and condition.get("status") == c.CONDITION_TRUE


def is_finished(status: Mapping[str, Any]) -> bool:
    """Whether the job has Succeeded or Failed (a True condition of either type)."""
    return is_true(status, c.SUCCEEDED) or is_true(status, c.FAILED)


def latest_condition_type(status: Mapping[str, Any]) -> str | None:
    """The type of the last condition in the list (what the `State` printer column shows)."""
    conditions = _conditions(status)
    if not conditions:
        return None
    cond_type = conditions[-1].get("type")
    return cond_type if isinstance(cond_type, str) else None


def set_condition(
    status: dict[str, Any],
    cond_type: str,
    cond_status: str,
    reason: str,
    message: str,
    now: str,
    *,
    in_place: bool = False,
) -> bool:
    """Set one condition following the module's rules; return whether `status` changed.

    Mutates `status` in place (its `conditions` list and the condition dicts in it); a missing or
    malformed `conditions` value is replaced by a fresh list when something is written. Pass a
    copy if the original must stay intact (e.g. to compare old and new status afterwards).
    """
    if is_finished(status):
        return False
    current = get_condition(status, cond_type)
    if (
        current is not None
        and current.get("status") == cond_status
        and current.get("reason") == reason
        and current.get("message") == message
    ):
        return False
    transition = now
    if current is not None and current.get("status") == cond_status:
        old_transition = current.get("lastTransitionTime")
        transition = old_transition if isinstance(old_transition, str) else now
    if in_place and current is not None:
        current.update(
            status=cond_status, reason=reason, message=message, lastUpdateTime=now,
            lastTransitionTime=transition,
        )  # fmt: skip
        conditions = _conditions(status)
        if conditions and conditions[-1] is current:
            conditions.insert(0, conditions.pop())
        status["conditions"] = conditions
        return True
    conditions = [x for x in _conditions(status) if x.get("type") != cond_type]
    if cond_status == c.CONDITION_TRUE:
        excluded = _TURNS_FALSE.get(cond_type, ())
        for condition in conditions:
            if condition.get("type") in excluded and condition.get("status") == c.CONDITION_TRUE:
                condition["status"] = c.CONDITION_FALSE
                condition["lastUpdateTime"] = now
                condition["lastTransitionTime"] = now
    conditions.append(
        {
            "type": cond_type,
            "status": cond_status,
            "reason": reason,
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": transition,
        }
    )
    status["conditions"] = conditions
    return True
