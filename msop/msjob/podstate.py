"""What a pod's (or Service's) status says: its slot, phase, exit code, how it ended.

Pure reads of one object, shared by the planner, the progress poller and the bench's
reporters. Everything here works on the projected pods of the cache
(``projection.py``) as well as on full ones.
"""

from __future__ import annotations

from msop.api import constants as c
from msop.api import report as progress_api
from msop.kube.objects import JSON


def slot_of(obj: JSON) -> tuple[str, int] | None:
    """(replica type, index) from an object's labels, or None if they are not valid."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    rtype = c.canonical_replica_type(str(labels.get(c.LABEL_REPLICA_TYPE, "")))
    try:
        index = int(labels.get(c.LABEL_REPLICA_INDEX, ""))
    except ValueError:
        return None
    if rtype is None or index < 0:
        return None
    return rtype, index


def exit_code(pod: JSON) -> int | None:
    """The exit code of the ``mindspore`` container (else the first terminated one)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    codes: list[tuple[bool, int]] = []
    for cs in statuses:
        term = (cs.get("state") or {}).get("terminated")
        if term and isinstance(term.get("exitCode"), int):
            codes.append((cs.get("name") == c.DEFAULT_CONTAINER_NAME, term["exitCode"]))
    if not codes:
        return None
    codes.sort(key=lambda x: not x[0])
    return codes[0][1]


def phase(pod: JSON) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def terminating(obj: JSON) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def restart_count(pod: JSON) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(cs.get("restartCount") or 0) for cs in statuses)


def finished_at(pod: JSON) -> str:
    """When the pod's ``mindspore`` container (else any container) terminated, as an
    RFC 3339 string that sorts in time order; "~" (after every time) if unknown."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    times = sorted(
        (cs.get("name") != c.DEFAULT_CONTAINER_NAME, str(term["finishedAt"]))
        for cs in statuses
        if (term := (cs.get("state") or {}).get("terminated")) and term.get("finishedAt")
    )
    return times[0][1] if times else "~"


def service_port(svc: JSON) -> int | None:
    """The Service's ``msjob-port`` (ms-operator's Services have one port per container
    port, this one among them), else its first port; None without ports."""
    ports = (svc.get("spec") or {}).get("ports") or []
    named = [p for p in ports if p.get("name") == c.DEFAULT_PORT_NAME]
    return (named or ports)[0].get("port") if ports else None


#: How much of a failed container's last output the job's condition and Event carry.
TAIL_LINES = 10
TAIL_CHARS = 1000


def _message_lines(pod: JSON, code: int) -> list[str]:
    """The non-empty lines of the ``mindspore`` container's termination message of the run
    that ended with ``code``: what the msrun launcher wrote, or, under
    ``terminationMessagePolicy: FallbackToLogsOnError`` (msop's default), the end of its
    log. None of a progress report (JSON)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") != c.DEFAULT_CONTAINER_NAME:
            continue
        term = (cs.get("state") or {}).get("terminated") or {}
        message = term.get("message")
        if term.get("exitCode") == code and isinstance(message, str):
            if message.lstrip().startswith("{"):
                return []
            return [line.rstrip() for line in message.splitlines() if line.strip()]
    return []


def termination_message(pod: JSON, code: int) -> str:
    """A one-line termination message of the run that ended with ``code`` (the msrun
    launcher's: which local worker ended how), at most 200 characters; "" if there is
    none, or if it has several lines (:func:`last_output` has those)."""
    lines = _message_lines(pod, code)
    return lines[0].strip()[:200] if len(lines) == 1 else ""


def last_output(pod: JSON, code: int) -> str:
    """The end of what the failed run printed (the log tail the kubelet kept as its
    termination message), when it has several lines: the last :data:`TAIL_LINES` lines,
    at most :data:`TAIL_CHARS` characters (cut at the front, marked ``...``); else ""."""
    lines = _message_lines(pod, code)
    if len(lines) < 2:
        return ""
    tail = "\n".join(lines[-TAIL_LINES:])
    return tail if len(tail) <= TAIL_CHARS else "..." + tail[-(TAIL_CHARS - 3) :]


def how_it_ended(pod: JSON) -> str:
    """ "exited with code 137 (OOMKilled)", plus the termination message if it says why
    ("...: msrun: local worker 1 (rank 3) was killed by signal 9 (SIGKILL)"), or the pod's
    reason when no container exited."""
    code = exit_code(pod)
    if code is None:
        status = pod.get("status") or {}
        why = status.get("reason") or "unknown reason"
        detail = f": {status['message']}" if status.get("message") else ""
        return f"failed without an exit code ({why}{detail})"
    reason = ""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term.get("exitCode") == code and term.get("reason"):
            reason = f" ({term['reason']})"
            break
    why = termination_message(pod, code)
    return f"exited with code {code}{reason}{f': {why}' if why else ''}"


def final_progress(pod: JSON) -> JSON | None:
    """The final progress report a pod's reporter wrote as the ``mindspore`` container's
    termination message (current or previous run), timed by when the container finished;
    None if there is none, or it is malformed, or it names another pod."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") != c.DEFAULT_CONTAINER_NAME:
            continue
        for state in ("state", "lastState"):
            term = (cs.get(state) or {}).get("terminated") or {}
            message, finished = term.get("message"), term.get("finishedAt")
            if not (isinstance(message, str) and message.startswith("{") and finished):
                continue
            try:
                report = progress_api.parse_report(message)
            except progress_api.InvalidReport:
                continue
            if report.final and report.pod_uid == pod["metadata"].get("uid"):
                return progress_api.to_status(report, str(finished))
    return None


def pod_succeeded(pod: JSON) -> bool:
    return phase(pod) == "Succeeded" and exit_code(pod) in (0, None)
