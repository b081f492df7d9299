"""``status.progress``: what a training reports about itself, checked and reduced.

A reporter in the Worker 0 pod (``msop.integrations``) serves its latest snapshot as JSON
(the *wire format*, version 1), and writes a final one to its termination message when
training ends. The operator fetches the first and reads the second from the pod's status;
both pass through :func:`parse_report` here, which accepts only well-formed, bounded
input, and :func:`to_status` turns a report into the ``status.progress`` object:

- ``percentComplete`` (integer 0-100, rounded down: 100 only once everything is done);
- ``step``/``totalSteps`` and ``epoch``/``totalEpochs`` (what the reporter knows);
- ``estimatedRemainingSeconds``;
- ``metrics``: at most :data:`MAX_METRICS` ``{name, value}`` pairs, values as strings
  (a status is compared and diffed as text; a float would flap in its last digit);
- ``lastReportTime``: when the reported snapshot was taken;
- ``lastCheckpoint``: ``{step, epoch, path, time}``, the last checkpoint the script said it
  saved (``Reporter.checkpoint``), timed by the report. A report without one does not
  erase the stored one (:func:`keep_checkpoint`): a restarted run that has not saved yet
  still resumes from it.

The wire format is version 1; fields are only ever added to it (``checkpoint`` was), and
each side ignores what it does not know, so an old reporter and a new operator (or the
reverse) still agree on the rest.

Nothing here trusts the reporter beyond its numbers: the identity check (the report names
the pod it came from, and that pod is the one the operator asked) is the caller's, with
:attr:`Report.pod_uid`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from msop.integrations import wire
from msop.kube.objects import JSON, format_time, parse_time

# The wire format's limits are the reporter's (one definition, in the stdlib-only module
# that training images install).
WIRE_VERSION = wire.WIRE_VERSION
#: Largest report body read from a pod (a well-formed one is under 2 KiB).
MAX_REPORT_BYTES = 16 * 1024
MAX_METRICS = wire.MAX_METRICS
MAX_METRIC_VALUE = wire.MAX_METRIC_VALUE
MAX_CHECKPOINT_PATH = wire.MAX_CHECKPOINT_PATH
METRIC_NAME = re.compile(rf"^[A-Za-z0-9_./-]{{1,{wire.MAX_METRIC_NAME}}}$")
#: Larger counts are not training steps but garbage (and exceed a JSON number's precision).
MAX_COUNT = 2**53 - 1
#: A year: larger estimates are noise, not information.
MAX_ETA_SECONDS = 366 * 24 * 3600


class InvalidReport(ValueError):
    """The body is not a version-1 progress report; the message says why."""


@dataclass(frozen=True)
class Report:
    """A parsed report. ``progress`` is ``status.progress`` without ``lastReportTime``."""

    pod_name: str
    pod_uid: str
    seq: int
    age: float
    """Seconds between the snapshot and the answer (0 in a final report)."""
    final: bool
    progress: JSON
    checkpoint: JSON | None = None
    """``{step, epoch, path}`` of the last checkpoint saved (those the script gave)."""
    checkpoint_age: float = 0.0
    """Seconds between that checkpoint and the snapshot."""


def _count(raw: JSON, key: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise InvalidReport(f"{key} must be an integer from 0 to {MAX_COUNT}, not {value!r}")
    return value


def _number(raw: JSON, key: str, high: float) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= high
    ):
        raise InvalidReport(f"{key} must be a number from 0 to {high:g}, not {value!r}")
    return float(value)


def _metrics(raw: Any) -> list[JSON]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_METRICS:
        raise InvalidReport(f"metrics must be a list of at most {MAX_METRICS} entries")
    out: list[JSON] = []
    seen: set[str] = set()
    for entry in raw:
        if not isinstance(entry, dict):
            raise InvalidReport("each metric must be an object with a name and a value")
        name, value = entry.get("name"), entry.get("value")
        if not isinstance(name, str) or not METRIC_NAME.match(name):
            raise InvalidReport(f"metric name {name!r} must match {METRIC_NAME.pattern}")
        if not isinstance(value, str) or len(value) > MAX_METRIC_VALUE:
            raise InvalidReport(
                f"metric {name} must have a string value of at most {MAX_METRIC_VALUE} characters"
            )
        if name in seen:
            raise InvalidReport(f"metric {name} appears twice")
        seen.add(name)
        out.append({"name": name, "value": value})
    return out


def _percent(raw: JSON, counts: JSON) -> int | None:
    """The reported percentage, else steps done over planned, else epochs; rounded down
    so that 100 means done."""
    reported = _number(raw, "percentComplete", 100.0)
    if reported is None:
        for done, total in (("step", "totalSteps"), ("epoch", "totalEpochs")):
            if counts.get(done) is not None and counts.get(total):
                reported = min(100.0, 100.0 * counts[done] / counts[total])
                break
    return None if reported is None else math.floor(reported + 1e-9)


def parse_report(body: bytes | str) -> Report:
    """Check a report (the HTTP answer or a termination message) and reduce it; raises
    InvalidReport naming what is wrong."""
    raw = _envelope(body)
    pod = raw.get("pod")
    if not isinstance(pod, dict) or not all(
        isinstance(pod.get(k), str) and pod.get(k) for k in ("name", "uid")
    ):
        raise InvalidReport("pod must name the reporting pod: {name, uid}")
    seq = _count(raw, "seq")
    if not seq:
        raise InvalidReport("seq must be a positive integer")
    final = raw.get("final", False)
    if not isinstance(final, bool):
        raise InvalidReport("final must be true or false")
    age = _number(raw, "age", MAX_ETA_SECONDS) or 0.0
    checkpoint, checkpoint_age = _checkpoint(raw.get("checkpoint"))
    return Report(
        str(pod["name"]), str(pod["uid"]), seq, age, final, _progress(raw),
        checkpoint, checkpoint_age,
    )  # fmt: skip


def _checkpoint(raw: Any) -> tuple[JSON | None, float]:
    """The report's ``checkpoint``: ``{step, epoch, path}`` and its age, or (None, 0)."""
    if raw is None:
        return None, 0.0
    if not isinstance(raw, dict):
        raise InvalidReport("checkpoint must be an object: {step, epoch, path, age}")
    out: JSON = {}
    for key in ("step", "epoch"):
        value = _count(raw, key)
        if value is not None:
            out[key] = value
    if not out:
        raise InvalidReport("checkpoint must have a step or an epoch")
    path = raw.get("path")
    if path is not None:
        if not isinstance(path, str) or not 0 < len(path) <= MAX_CHECKPOINT_PATH:
            raise InvalidReport(
                f"checkpoint path must be a string of 1 to {MAX_CHECKPOINT_PATH} characters"
            )
        out["path"] = path
    return out, _number(raw, "age", MAX_ETA_SECONDS) or 0.0


def _envelope(body: bytes | str) -> JSON:
    """The report as a JSON object of this wire version."""
    if len(body) > MAX_REPORT_BYTES:
        raise InvalidReport(f"larger than {MAX_REPORT_BYTES} bytes")
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidReport(f"not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise InvalidReport("not a JSON object")
    if raw.get("version") != WIRE_VERSION:
        raise InvalidReport(f"version must be {WIRE_VERSION}, not {raw.get('version')!r}")
    return raw


def _progress(raw: JSON) -> JSON:
    """The ``status.progress`` fields of a report (without ``lastReportTime``)."""
    progress: JSON = {}
    for key in ("step", "totalSteps", "epoch", "totalEpochs"):
        value = _count(raw, key)
        if value is not None:
            progress[key] = value
    percent = _percent(raw, progress)
    if percent is not None:
        progress = {"percentComplete": percent, **progress}
    eta = _number(raw, "estimatedRemainingSeconds", MAX_ETA_SECONDS)
    if eta is not None:
        progress["estimatedRemainingSeconds"] = round(eta)
    metrics = _metrics(raw.get("metrics"))
    if metrics:
        progress["metrics"] = metrics
    return progress


def to_status(report: Report, report_time: str) -> JSON:
    """``status.progress`` for ``report`` taken at ``report_time`` (RFC 3339); its
    ``lastCheckpoint`` is timed ``checkpoint_age`` seconds before that."""
    status = {**report.progress, "lastReportTime": report_time}
    if report.checkpoint is not None:
        taken = parse_time(report_time)
        saved = (
            format_time(taken - timedelta(seconds=report.checkpoint_age))
            if taken is not None
            else report_time
        )
        status["lastCheckpoint"] = {**report.checkpoint, "time": saved}
    return status


def keep_checkpoint(best: JSON | None, *others: JSON | None) -> JSON | None:
    """``best`` (the newest progress) with a ``lastCheckpoint``: its own if it has one (a
    later run's, even an earlier step: a rollback is the truth), else the one of the
    newest of ``others`` that has one. A restarted run reports progress before it saves
    anything, and that must not hide where it resumed from."""
    if best is None or "lastCheckpoint" in best:
        return best
    with_one = [o for o in others if o is not None and isinstance(o.get("lastCheckpoint"), dict)]
    source = newest(*with_one)
    if source is None:
        return best
    return {**best, "lastCheckpoint": source["lastCheckpoint"]}


def newest(*candidates: JSON | None) -> JSON | None:
    """The candidate with the latest ``lastReportTime`` (RFC 3339 UTC strings sort in time
    order); on a tie the first one given wins."""
    best: JSON | None = None
    for candidate in candidates:
        if candidate is None:
            continue
        if best is None or str(candidate.get("lastReportTime", "")) > str(
            best.get("lastReportTime", "")
        ):
            best = candidate
    return best


def summary(progress: Any) -> str:
    """``45% epoch 9/20 ETA 2m0s loss=0.0213`` for progress lines; "" when there is none."""
    if not isinstance(progress, dict) or not progress:
        return ""
    parts: list[str] = []
    if isinstance(progress.get("percentComplete"), int):
        parts.append(f"{progress['percentComplete']}%")
    for done, total, noun in (("epoch", "totalEpochs", "epoch"), ("step", "totalSteps", "step")):
        if isinstance(progress.get(done), int):
            of = f"/{progress[total]}" if isinstance(progress.get(total), int) else ""
            parts.append(f"{noun} {progress[done]}{of}")
            break
    eta = progress.get("estimatedRemainingSeconds")
    if isinstance(eta, int):
        parts.append(f"ETA {format_duration(eta)}")
    for metric in progress.get("metrics") or []:
        if isinstance(metric, dict) and metric.get("name") == "loss":
            parts.append(f"loss={metric.get('value')}")
    return " ".join(parts)


def format_duration(seconds: int) -> str:
    """``1h2m``, ``3m5s``, ``42s``."""
    hours, rest = divmod(max(0, seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
