"""The job commands of ``msop`` and ``kubectl msjob``: follow a job's whole life.

``list``, ``status``, ``logs``, ``wait``, ``scale``, ``suspend``, ``resume`` and ``delete``
(their flags: :mod:`msop.cli.flags`). Each command is an ``async`` function of an open
:class:`~msop.sdk.MSJobClient` (any object with its methods: tests pass a fake), the
parsed flags and a :class:`Console`; what they print is made by pure functions of the
objects (:func:`format_table`, :func:`format_status`, ...). :func:`run_job_command`
resolves the kubeconfig and namespace as kubectl does, opens the client, runs the
command and turns an error into one line on stderr and an exit code
(:data:`msop.cli.flags.EXIT_CODES`, :func:`exit_code`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from msop.api import constants as c
from msop.api.report import summary
from msop.kube.errors import ApiError, ApiUnavailable, is_not_found
from msop.kube.objects import JSON, parse_time
from msop.sdk import (
    JobStatus,
    MSJobClient,
    MSJobError,
    MSJobNotFoundError,
    MSJobTimeoutError,
    format_progress,
)
from msop.sdk.kubeconfig import kubeconfig_path, namespace_of_context

__all__ = [
    "Console",
    "exit_code",
    "format_list",
    "format_status",
    "format_table",
    "human_duration",
    "kubeconfig_path",
    "namespace_of_context",
    "run_job_command",
]

NONE = "<none>"
"""What a table or summary shows for a value the job does not have (as kubectl does)."""
RESOURCE = f"{c.PLURAL[:-1]}.{c.GROUP}"
"""``msjob.mindspore.gitee.com``: how kubectl names the resource in its messages."""
LAST_OUTPUT = "\nThe last output of pod "
"""What separates a failure condition's message from the failed run's last output."""
EVENTS_SHOWN = 5
DELETE_POLL_SECONDS = 1.0
"""How often ``delete --wait`` asks whether the MSJob is gone."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Console:
    """Where a command prints, and its wall clock (for ages)."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    now: Callable[[], datetime] = _utcnow


class CommandError(Exception):
    """A one-line reason a command failed; exit 1."""


# --- pure formatting ---------------------------------------------------------------------------
def human_duration(seconds: float) -> str:
    """An age as kubectl prints it (apimachinery's ``HumanDuration``): ``42s``, ``5m3s``,
    ``3h``, ``2d4h``, ``400d``."""
    s = int(seconds)
    if s < 0:
        return "0s"
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def _age(timestamp: Any, now: datetime) -> str:
    t = parse_time(timestamp)
    return human_duration((now - t).total_seconds()) if t is not None else NONE


def _table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns three spaces apart, as kubectl's tables."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]  # fmt: skip
    return "\n".join(lines) + "\n"


def _percent(status: JobStatus) -> str:
    percent = (status.progress or {}).get("percentComplete")
    return f"{percent}%" if isinstance(percent, int) else NONE


def format_table(jobs: Sequence[JSON], *, all_namespaces: bool, wide: bool, now: datetime) -> str:
    """``msop list``'s table: NAME STATE WORKERS PROGRESS AGE (NAMESPACE first with
    ``all_namespaces``; RESTARTS QUEUED REASON after with ``wide``)."""
    header = ["NAME", "STATE", "WORKERS", "PROGRESS", "AGE"]
    header = (["NAMESPACE"] if all_namespaces else []) + header
    header += ["RESTARTS", "QUEUED", "REASON"] if wide else []
    rows = [header]
    for job in jobs:
        s = JobStatus.of(job)
        row = [s.name, s.state or NONE, s.workers or NONE, _percent(s)]
        row.append(_age((job.get("metadata") or {}).get("creationTimestamp"), now))
        if all_namespaces:
            row.insert(0, s.namespace)
        if wide:
            restarts = sum(r.restarts for r in s.replicas.values())
            row += [str(restarts), s.queued.reason if s.queued else NONE, s.reason or NONE]
        rows.append(row)
    return _table(rows)


def _with_kind(job: JSON) -> JSON:
    return {"apiVersion": c.API_VERSION, "kind": c.KIND, **job}


def dump(obj: JSON, output: str) -> str:
    """``obj`` as ``-o json`` (kubectl's 4-space indent) or ``-o yaml`` prints it."""
    if output == "json":
        return json.dumps(obj, indent=4, ensure_ascii=False) + "\n"
    return str(yaml.safe_dump(obj, sort_keys=False, allow_unicode=True))


def format_list(jobs: Sequence[JSON], output: str) -> str:
    """``msop list -o json|yaml|name``: a kubectl ``List`` of the MSJobs, or their names."""
    if output == "name":
        return "".join(f"{(j.get('metadata') or {}).get('name')}\n" for j in jobs)
    items = [_with_kind(j) for j in jobs]
    return dump({"apiVersion": "v1", "kind": "List", "items": items}, output)


_KEY_WIDTH = 15


def _field(key: str, value: str) -> list[str]:
    """``Key:  value`` with the value's further lines aligned under its first."""
    first, *rest = value.split("\n") if value else [NONE]
    pad = " " * _KEY_WIDTH
    return [f"{key + ':':<{_KEY_WIDTH}}{first}".rstrip(), *(f"{pad}{x}".rstrip() for x in rest)]


def split_last_output(message: str) -> tuple[str, str, list[str]]:
    """A failure's message -> (what happened, the pod, the failed run's last lines);
    ("message", "", []) when it carries no output."""
    head, sep, tail = message.partition(LAST_OUTPUT)
    if not sep:
        return message, "", []
    pod, _, lines = tail.partition(":\n")
    return head, pod.removesuffix(":"), lines.split("\n") if lines else []


def _state_lines(s: JobStatus) -> list[str]:
    if s.state is None:
        return _field("State", "Pending (the operator has not reported on it yet)")
    state = f"{s.state} ({s.reason})" if s.reason else s.state
    lines = _field("State", state)
    if s.message:
        lines += _field("Message", split_last_output(s.message)[0])
    return lines


def _replica_lines(s: JobStatus) -> list[str]:
    lines = _field("Workers", f"{s.workers} active/desired" if s.workers else NONE)
    if not s.replicas:
        return lines + _field("Replicas", NONE)
    order = [*c.REPLICA_TYPES, *sorted(set(s.replicas) - set(c.REPLICA_TYPES))]
    rows = [["TYPE", "ACTIVE", "SUCCEEDED", "FAILED", "RESTARTS"]]
    for rtype in order:
        r = s.replicas.get(rtype)
        if r is not None:
            rows.append([rtype, str(r.active), str(r.succeeded), str(r.failed), str(r.restarts)])
    return lines + _field("Replicas", _table(rows).rstrip("\n"))


def _progress_text(s: JobStatus) -> str:
    text = summary(s.progress)
    if not text:
        return NONE
    reported = (s.progress or {}).get("lastReportTime")
    return f"{text} (reported {reported})" if reported else text


def _failure_lines(s: JobStatus) -> list[str]:
    failure = s.last_failure
    if failure is None:
        return _field("Last failure", NONE)
    head, pod, output = split_last_output(failure.message)
    what = f"{failure.type} ({failure.reason})" if failure.reason else failure.type
    when = f" at {failure.last_transition_time}" if failure.last_transition_time else ""
    text = f"{what}{when}\n{head}"
    if pod:
        text += f"\nThe last output of pod {pod}:" + "".join(f"\n  {x}" for x in output)
    return _field("Last failure", text)


def _time_lines(job: JSON, s: JobStatus, now: datetime) -> list[str]:
    def when(t: str | None) -> str:
        return f"{t} ({_age(t, now)} ago)" if t else NONE

    created = (job.get("metadata") or {}).get("creationTimestamp")
    return [
        *_field("Started", when(s.start_time)),
        *_field("Completed", when(s.completion_time)),
        *_field("Age", _age(created, now)),
    ]


def _event_time(event: JSON) -> Any:
    return (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )


def _event_lines(events: Sequence[JSON] | None, now: datetime) -> list[str]:
    if events is None:
        return ["Events:        <cannot be listed>"]
    if not events:
        return _field("Events", NONE)
    rows = [["TYPE", "REASON", "AGE", "MESSAGE"]]
    for event in events[-EVENTS_SHOWN:]:
        age = _age(_event_time(event), now)
        count = event.get("count")
        if isinstance(count, int) and count > 1:
            age += f" (x{count})"
        message = str(event.get("message") or "").split("\n")[0]
        rows.append([str(event.get("type", "")), str(event.get("reason", "")), age, message])
    table = _table(rows).rstrip("\n").split("\n")
    return ["Events:", *(f"  {line}" for line in table)]


def format_status(job: JSON, events: Sequence[JSON] | None, now: datetime) -> str:
    """``msop status``'s summary of an MSJob and its Events (oldest first; the last
    :data:`EVENTS_SHOWN` are shown; None: they could not be listed)."""
    s = JobStatus.of(job)
    queued = s.queued
    lines = [
        *_field("Name", s.name),
        *_field("Namespace", s.namespace),
        *_state_lines(s),
        *_replica_lines(s),
        *_field("Progress", _progress_text(s)),
        *_field("Checkpoint", str(s.last_checkpoint) if s.last_checkpoint else NONE),
        *(_field("Resumes from", str(s.resumes_from)) if s.resumes_from else []),
        *_field("Waiting", f"{queued.reason}: {queued.message}" if queued else NONE),
        *_failure_lines(s),
        *_time_lines(job, s, now),
        *_event_lines(events, now),
    ]
    return "\n".join(lines) + "\n"


def _print_changed(io: Console, args: argparse.Namespace, job: JSON, what: str) -> None:
    """kubectl's ``msjob.mindspore.gitee.com/<name> scaled``, or the object with ``-o``."""
    io.out.write(
        dump(_with_kind(job), args.output) if args.output else f"{RESOURCE}/{args.name} {what}\n"
    )


# --- the commands ------------------------------------------------------------------------------
Command = Callable[[Any, argparse.Namespace, Console], Awaitable[int]]


async def cmd_list(client: MSJobClient, args: argparse.Namespace, io: Console) -> int:
    namespace = "*" if args.all_namespaces else args.namespace
    try:
        jobs = await client.list(namespace, label_selector=args.selector)
    except ApiError as e:
        if is_not_found(e):
            raise CommandError(
                f"the MSJob CRD ({c.CRD_NAME}) is not installed in this cluster"
            ) from None
        raise
    if args.output in ("json", "yaml", "name"):
        io.out.write(format_list(jobs, args.output))
    elif not jobs:
        where = "" if args.all_namespaces else f" in namespace {args.namespace}"
        print(f"No MSJobs found{where}.", file=io.err)
    else:
        io.out.write(
            format_table(
                jobs, all_namespaces=args.all_namespaces, wide=args.output == "wide", now=io.now()
            )
        )
    return 0


async def cmd_status(client: MSJobClient, args: argparse.Namespace, io: Console) -> int:
    job = await client.get(args.name, args.namespace)
    if args.output:
        io.out.write(dump(_with_kind(job), args.output))
        return 0
    events: list[JSON] | None
    try:
        events = await client.get_events(args.name, args.namespace)
    except ApiError as e:
        if isinstance(e, ApiUnavailable):
            raise
        events = None  # not allowed to list Events: the rest still says a lot
    io.out.write(format_status(job, events, io.now()))
    return 0


async def cmd_logs(client: MSJobClient, args: argparse.Namespace, io: Console) -> int:
    rtype = args.replica_type or (c.WORKER if args.index is not None else None)
    lines = client.get_job_logs(
        args.name, args.namespace, replica_type=rtype, index=args.index,
        container=args.container, follow=args.follow, previous=args.previous,
        tail_lines=args.tail, notice=lambda text: print(text, file=io.err, flush=True),
    )  # fmt: skip
    async with contextlib.aclosing(lines):
        async for pod, line in lines:
            io.out.write(f"[{pod}] {line}\n" if args.prefix else f"{line}\n")
            if args.follow:
                io.out.flush()  # as the pods print, also into a pipe
    return 0


async def cmd_wait(client: MSJobClient, args: argparse.Namespace, io: Console) -> int:
    job = await client.wait_for_job(
        args.name, args.namespace, conditions=(args.condition,), timeout=args.timeout,
        progress=True, stream=io.err,
    )  # fmt: skip
    io.out.write(dump(_with_kind(job), args.output) if args.output else format_progress(job) + "\n")
    return 0


async def cmd_scale(client: MSJobClient, args: argparse.Namespace, io: Console) -> int:
    job = await client.scale(args.name, args.replicas, args.namespace)
    _print_changed(io, args, job, "scaled")
    return 0


async def cmd_suspend(client: MSJobClient, args: argparse.Namespace, io: Console) -> int:
    return await _set_suspend(client, args, io, True)


async def cmd_resume(client: MSJobClient, args: argparse.Namespace, io: Console) -> int:
    return await _set_suspend(client, args, io, False)


async def _set_suspend(
    client: MSJobClient, args: argparse.Namespace, io: Console, suspend: bool
) -> int:
    """Suspend or resume; a job already so is left as it is, and the command says so
    (as kubectl's ``patched (no change)``)."""
    job = await client.get(args.name, args.namespace)
    if bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend")) == suspend:
        state = "suspended" if suspend else "not suspended"
        if args.output:
            io.out.write(dump(_with_kind(job), args.output))
        else:
            io.out.write(f"{RESOURCE}/{args.name} is already {state} (no change)\n")
        return 0
    if suspend:
        job = await client.suspend(args.name, args.namespace)
    else:
        job = await client.resume(args.name, args.namespace)
    _print_changed(io, args, job, "suspended" if suspend else "resumed")
    return 0


async def cmd_delete(client: MSJobClient, args: argparse.Namespace, io: Console) -> int:
    # Foreground: the MSJob stays until the garbage collector has deleted its pods, so
    # once it is gone a job of the same name can start without meeting old pods.
    await client.delete(
        args.name, args.namespace, propagation_policy="Foreground" if args.wait else "Background"
    )
    io.out.write(f'{RESOURCE} "{args.name}" deleted\n')
    io.out.flush()
    if args.wait:
        await _wait_gone(client, args.name, args.namespace, args.timeout)
    return 0


async def _wait_gone(client: MSJobClient, name: str, namespace: str, timeout: float) -> None:  # noqa: ASYNC109
    """Return once ``get`` says the MSJob is gone; MSJobTimeoutError after ``timeout``."""
    job: JSON | None = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                job = await client.get(name, namespace)
                await asyncio.sleep(DELETE_POLL_SECONDS)
    except MSJobNotFoundError:
        return
    except TimeoutError:
        raise MSJobTimeoutError(
            f"MSJob {namespace}/{name} still exists after {timeout:g}s", job
        ) from None


COMMANDS: dict[str, Command] = {
    "list": cmd_list,
    "status": cmd_status,
    "logs": cmd_logs,
    "wait": cmd_wait,
    "scale": cmd_scale,
    "suspend": cmd_suspend,
    "resume": cmd_resume,
    "delete": cmd_delete,
}


# --- errors and exit codes ---------------------------------------------------------------------
def exit_code(e: BaseException) -> int:
    """The exit code of a command that raised ``e`` (:data:`msop.cli.flags.EXIT_CODES`)."""
    if isinstance(e, MSJobNotFoundError):
        return 3
    if isinstance(e, MSJobTimeoutError):
        return 4
    return 1


def error_line(e: BaseException, name: str | None, prog: str = "msop") -> str:
    """The one line an error prints after ``<prog>: error: ``: a message that goes on
    (a failure's, with the failed run's output) is cut to its first line, which says
    where the rest is."""
    if isinstance(e, ApiUnavailable):
        return f"cannot reach the API server: {e}"
    text = f"{e.status} {e.reason}: {e.message}" if isinstance(e, ApiError) else str(e)
    first, _, rest = text.partition("\n")
    if rest.strip() and name:
        first += f" (the whole message: {prog} status {name})"
    return first


async def run(
    args: argparse.Namespace, io: Console, *, prog: str = "msop", client: Any = None
) -> int:
    """Run the job command of ``args`` and return its exit code; errors are one line on
    ``io.err``. ``client``: an open client to use (tests); by default an MSJobClient is
    opened from the kubeconfig and namespace flags and closed at the end."""
    name = getattr(args, "name", None)
    try:
        if client is not None:
            return await COMMANDS[args.command](client, args, io)
        path = _resolve(args)
        opened = await _open(path, args)
        try:
            return await COMMANDS[args.command](opened, args, io)
        finally:
            await opened.close()
    except (MSJobError, ApiError, CommandError) as e:
        print(f"{prog}: error: {error_line(e, name, prog)}", file=io.err)
        return exit_code(e)


def _resolve(args: argparse.Namespace) -> str | None:
    """The kubeconfig to load (None: in a pod); fills in ``args.namespace`` as kubectl."""
    path = kubeconfig_path(args.kubeconfig)
    if path is not None and not Path(path).is_file():
        raise CommandError(f"the kubeconfig {path} does not exist")
    args.namespace = args.namespace or namespace_of_context(path, args.context)
    return path


async def _open(path: str | None, args: argparse.Namespace) -> MSJobClient:
    client = MSJobClient(path, namespace=args.namespace, context=args.context)
    try:
        await client.__aenter__()
    except Exception as e:
        if path is None:
            raise CommandError(
                f"no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod: {e}"
            ) from None
        raise CommandError(f"cannot load the kubeconfig {path}: {e}") from None
    return client


def run_job_command(args: argparse.Namespace, prog: str = "msop") -> int:
    """``msop <job command>``: the exit code (130 on Ctrl-C)."""
    io = Console()
    try:
        return asyncio.run(run(args, io, prog=prog))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (msop logs j | head): stop quietly, as kubectl does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
