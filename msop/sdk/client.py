"""The async SDK: :class:`MSJobClient`."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TextIO

from msop.api import FieldError, validate_admission
from msop.api import constants as c
from msop.api.conditions import get_condition
from msop.api.naming import object_name
from msop.api.resources import MSJOBS
from msop.api.validation import beyond_admission
from msop.integrations.wire import AGENT_CONTAINER
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError, is_conflict, is_not_found
from msop.kube.listwatch import list_then_watch
from msop.kube.objects import JSON
from msop.kube.resources import EVENTS, PODS
from msop.sdk.errors import (
    MSJobError,
    MSJobFailedError,
    MSJobLogsError,
    MSJobNotFoundError,
    MSJobTimeoutError,
    MSJobValidationError,
)
from msop.sdk.kubeconfig import kubeconfig_path, namespace_of_context
from msop.sdk.logs import iter_lines, keeps_runs, kept_run, log_path, stream_log
from msop.sdk.manifests import load_job
from msop.sdk.status import Condition, JobStatus
from msop.sdk.statusline import ProgressLine, format_progress

JSONList = list[JSON]
Lines = list[str]

#: The MSJob REST resource (``mindspore.gitee.com/v1``, ``msjobs``).

#: How long one watch request may stay open before the SDK re-opens it.
WATCH_SECONDS = 300

#: How often :meth:`MSJobClient.get_job_logs` with ``follow`` looks for new pods.
LOG_LOOK_SECONDS = 2.0

LogStream = Callable[[KubeClient, str, Mapping[str, str], str], AsyncIterator[bytes]]


def _condition_true(job: JSON, type_: str) -> JSON | None:
    cond = get_condition(job.get("status") or {}, type_)
    if cond is not None and cond.get("status") == c.CONDITION_TRUE:
        return dict(cond)
    return None


def _pod_order(pod: JSON) -> tuple[int, int, str]:
    """Scheduler, PS, Worker; then by index (a pod without the labels last)."""
    labels = pod["metadata"].get("labels") or {}
    rtype = c.canonical_replica_type(str(labels.get(c.LABEL_REPLICA_TYPE, "")))
    rank = c.REPLICA_TYPES.index(rtype) if rtype is not None else len(c.REPLICA_TYPES)
    try:
        index = int(labels.get(c.LABEL_REPLICA_INDEX, ""))
    except ValueError:
        index = -1
    return rank, index, str(pod["metadata"].get("name", ""))


#: How the job's conditions introduce a failed run's kept output (msop.msjob.plan).
_LAST_OUTPUT = "\nThe last output of pod "


KEPT_IN_CONDITION = "----- msop: the failed run's last output, kept in the job's condition -----"
"""The line before the lines of :func:`_kept_output` in ``get_job_logs(previous=True)``."""


def _kept_output(failure: Condition | None, ns: str) -> tuple[str, list[str]] | None:
    """(pod name, lines) of the failed run's output a condition message keeps."""
    if failure is None or _LAST_OUTPUT not in failure.message:
        return None
    head, _, tail = failure.message.partition(_LAST_OUTPUT)[2].partition(":\n")
    pod = head.removeprefix(f"{ns}/")
    return (pod, tail.split("\n")) if pod and tail else None


def _waiting_for(pod: JSON) -> str:
    """Why the pod's log cannot be read yet: its containers' waiting reason, else its
    phase."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])
    return str((pod.get("status") or {}).get("phase") or "not scheduled yet")


class _Waits:
    """What a followed job's logs wait for, told once per change (``get_job_logs``'
    ``notice``)."""

    def __init__(self, notice: Callable[[str], None] | None) -> None:
        self.notice = notice
        self.said: dict[str, str] = {}

    def tell(self, what: str, why: str) -> None:
        if self.notice is not None and self.said.get(what) != why:
            self.said[what] = why
            self.notice(f"waiting for {what}: {why}")

    def clear(self, what: str) -> None:
        self.said.pop(what, None)

    def look(self, job: str, pods: JSONList, finished: bool) -> None:
        """What the job's pods that have not started wait for (or that it has none)."""
        if not pods and not finished:
            self.tell(job, "it has no pod yet")
        for pod in pods:
            if not _started(pod):
                ns, pname = pod["metadata"]["namespace"], pod["metadata"]["name"]
                self.tell(f"pod {ns}/{pname}", _waiting_for(pod))


def _started(pod: JSON) -> bool:
    """Whether a container of the pod has run (its log can be read)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state:
            return True
    return False


def _event_time(event: JSON) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


class MSJobClient:
    """Submit and follow MSJobs (async). Use as ``async with MSJobClient(...) as client``.

    Give either a ``kubeconfig`` path, loaded on entry, or a ready :class:`KubeClient` in
    ``kube`` (then the caller keeps ownership and closes it). Without either, the
    configuration is found as kubectl finds it (:mod:`msop.sdk.kubeconfig`): the first
    file of ``$KUBECONFIG``, else ``~/.kube/config``, else the in-cluster service account.
    ``namespace`` is the default of every method; None: the namespace of the kubeconfig's
    context (``context``, else its current-context), in a pod the service account's,
    else ``default``.

    Errors: :mod:`msop.sdk.errors` for what the SDK interprets (validation, failure,
    timeout, missing job, logs); :class:`msop.kube.errors.ApiError` for other refusals.
    """

    def __init__(
        self,
        kubeconfig: str | Path | None = None,
        *,
        namespace: str | None = None,
        context: str | None = None,
        kube: KubeClient | None = None,
    ) -> None:
        path = kubeconfig_path(str(kubeconfig) if kubeconfig else None) if kube is None else None
        self.namespace = namespace or (
            namespace_of_context(path, context) if kube is None else "default"
        )
        self._kubeconfig = path
        self._context = context
        self._kube = kube
        self._owns_kube = kube is None
        self._log_stream: LogStream = stream_log
        """Where log bytes come from; a seam for tests."""

    async def __aenter__(self) -> Self:
        if self._kube is None:
            self._kube = await KubeClient.from_config(
                self._kubeconfig, context=self._context, user_agent="msop-sdk"
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool if this client opened it. Idempotent."""
        if self._owns_kube and self._kube is not None:
            await self._kube.close()
            self._kube = None

    @property
    def kube(self) -> KubeClient:
        if self._kube is None:
            raise RuntimeError("MSJobClient is not open: use 'async with MSJobClient(...)'")
        return self._kube

    def _ns(self, namespace: str | None) -> str:
        return namespace or self.namespace

    # --- CRUD ------------------------------------------------------------------------------
    async def create(
        self, job: Mapping[str, Any] | str | Path, namespace: str | None = None
    ) -> JSON:
        """Create an MSJob from a dict, YAML text or a YAML file; return the created object.

        The job is checked locally with admission's rules first: MSJobValidationError
        lists every field error and nothing is sent. ``apiVersion``/``kind`` are filled in
        when absent. The namespace is ``namespace``, else the job's, else the client's;
        ValueError if ``namespace`` contradicts the job's own.
        """
        body = load_job(job)
        body.setdefault("apiVersion", c.API_VERSION)
        body.setdefault("kind", c.KIND)
        meta = body.get("metadata")
        name = str(meta.get("name") or "") if isinstance(meta, dict) else ""
        errors = validate_admission(body) + beyond_admission(body)
        if body["apiVersion"] != c.API_VERSION or body["kind"] != c.KIND:
            errors.insert(0, FieldError("apiVersion", f"must be {c.API_VERSION} {c.KIND}"))
        if errors:
            raise MSJobValidationError(name, errors)
        assert isinstance(meta, dict)
        own = meta.get("namespace")
        if namespace and own and namespace != own:
            raise ValueError(f"namespace {namespace!r} does not match the job's {own!r}")
        ns = namespace or own or self.namespace
        meta["namespace"] = ns
        return await self.kube.create(MSJOBS, body, ns)

    async def get(self, name: str, namespace: str | None = None) -> JSON:
        """The MSJob as stored. Raises MSJobNotFoundError when it does not exist."""
        ns = self._ns(namespace)
        try:
            return await self.kube.get(MSJOBS, name, ns)
        except ApiError as e:
            if is_not_found(e):
                raise MSJobNotFoundError(f"MSJob {ns}/{name} not found") from None
            raise

    async def list(
        self, namespace: str | None = None, *, label_selector: str | None = None
    ) -> JSONList:
        """Every MSJob of the namespace (``"*"``: all namespaces) matching the selector."""
        ns = None if namespace == "*" else self._ns(namespace)
        result = await self.kube.list_all(MSJOBS, ns, label_selector=label_selector)
        items: JSONList = result["items"]
        return items

    async def delete(
        self,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] = "Background",
    ) -> None:
        """Delete the MSJob; its pods and Service go with it (garbage collection).

        Returns once the API server accepted the deletion. Raises MSJobNotFoundError when
        it does not exist.
        """
        ns = self._ns(namespace)
        try:
            await self.kube.delete(MSJOBS, name, ns, propagation_policy=propagation_policy)
        except ApiError as e:
            if is_not_found(e):
                raise MSJobNotFoundError(f"MSJob {ns}/{name} not found") from None
            raise

    async def get_status(self, name: str, namespace: str | None = None) -> JobStatus:
        """The job's status as a typed view (:class:`JobStatus`). Raises
        MSJobNotFoundError when it does not exist."""
        return JobStatus.of(await self.get(name, namespace))

    async def update(
        self, job: Mapping[str, Any] | str | Path, namespace: str | None = None
    ) -> JSON:
        """Replace the stored MSJob's ``spec``, labels and annotations with the given
        job's (a dict, YAML text or file, as for :meth:`create`), checked locally first
        (MSJobValidationError, nothing sent); returns the updated object.

        The write carries the resourceVersion just read, and is retried once it moved:
        what the operator wrote meanwhile (its status) is kept, never overwritten.
        MSJobNotFoundError when the job does not exist."""
        body = load_job(job)
        given = body.get("metadata")
        meta: JSON = given if isinstance(given, dict) else {}
        name = str(meta.get("name") or "")
        errors = validate_admission(body) + beyond_admission(body)
        if errors:
            raise MSJobValidationError(name, errors)
        ns = namespace or meta.get("namespace") or self.namespace
        for attempt in range(3):
            current = await self.get(name, ns)
            new = {**current, "spec": body["spec"]}
            new["metadata"] = {
                **current["metadata"],
                "labels": meta.get("labels") or {},
                "annotations": meta.get("annotations") or {},
            }
            try:
                return await self.kube.replace(MSJOBS, new)
            except ApiError as e:
                if not is_conflict(e) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _patch_spec(self, name: str, namespace: str | None, spec: JSON) -> JSON:
        ns = self._ns(namespace)
        try:
            return await self.kube.patch(MSJOBS, name, {"spec": spec}, ns)
        except ApiError as e:
            if is_not_found(e):
                raise MSJobNotFoundError(f"MSJob {ns}/{name} not found") from None
            raise

    async def scale(self, name: str, replicas: int, namespace: str | None = None) -> JSON:
        """Set the number of Workers (as ``kubectl scale msjob/<name> --replicas``); the
        operator restarts a running MindSpore cluster with the new size. Returns the
        updated MSJob; MSJobNotFoundError when it does not exist, ValueError below 0."""
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        return await self._patch_spec(
            name, namespace, {"msReplicaSpecs": {c.WORKER: {"replicas": replicas}}}
        )

    async def suspend(self, name: str, namespace: str | None = None) -> JSON:
        """Suspend the job (``runPolicy.suspend: true``): its pods are deleted, it keeps
        its restarts and progress; with Kueue its quota is released. Returns the MSJob."""
        return await self._patch_spec(name, namespace, {"runPolicy": {"suspend": True}})

    async def resume(self, name: str, namespace: str | None = None) -> JSON:
        """Resume a suspended job: its pods are created again (a MindSpore job resumes from
        its last checkpoint). Returns the MSJob."""
        return await self._patch_spec(name, namespace, {"runPolicy": {"suspend": False}})

    async def get_job_pods(
        self, name: str, namespace: str | None = None, *, replica_type: str | None = None
    ) -> JSONList:
        """The job's pods (those labelled with its name), Scheduler, PS, Worker, each by
        index; only one replica type's with ``replica_type`` (ValueError if unknown)."""
        ns = self._ns(namespace)
        selector = f"{c.LABEL_JOB_NAME}={name}"
        if replica_type is not None:
            rtype = c.canonical_replica_type(replica_type)
            if rtype is None:
                raise ValueError(f"replica_type must be one of {', '.join(c.REPLICA_TYPES)}")
            selector += f",{c.LABEL_REPLICA_TYPE}={c.replica_type_label(rtype)}"
        result = await self.kube.list_all(PODS, ns, label_selector=selector)
        pods: JSONList = result["items"]
        return sorted(pods, key=_pod_order)

    async def get_job_logs(
        self,
        name: str,
        namespace: str | None = None,
        *,
        replica_type: str | None = None,
        index: int | None = None,
        container: str = c.DEFAULT_CONTAINER_NAME,
        follow: bool = False,
        previous: bool = False,
        tail_lines: int | None = None,
        notice: Callable[[str], None] | None = None,
    ) -> AsyncGenerator[tuple[str, str], None]:
        """Yield ``(pod name, line)`` from every pod of the job (one replica type's with
        ``replica_type``, one pod's with ``index`` too), pod after pod.

        ``previous``: the run before the container's current one (after a restart in
        place). ``tail_lines``: the last lines of each. With ``follow`` the pods are read
        together as they print, a pod the operator re-creates (a restart) is followed
        again, a pod not started yet once it starts, until the job has finished and every
        stream ended. MSJobLogsError when a pod's log cannot be read (without ``follow``:
        after the lines of every pod that could be read, naming each one that could not),
        MSJobNotFoundError when the job does not exist (or, following, is deleted).
        ``notice`` (with ``follow``) is told, once per change, what a pod waits for before
        its log can be read ("waiting for pod ns/j-worker-0: ContainerCreating").
        """
        ns = self._ns(namespace)
        query = {"container": container}
        if previous:
            query["previous"] = "true"
        if tail_lines is not None:
            query["tailLines"] = str(tail_lines)

        async def pods() -> JSONList:
            found = await self.get_job_pods(name, ns, replica_type=replica_type)
            return [p for p in found if index is None or _pod_order(p)[1] == index]

        if follow:
            query["follow"] = "true"
            followed = self._follow_logs(name, ns, pods, query, notice)
            async with contextlib.aclosing(followed) as lines:
                async for item in lines:
                    yield item
            return
        status = await self.get_status(name, ns)  # MSJobNotFoundError before "no pod"
        if previous:
            types = [replica_type] if replica_type is not None else list(c.REPLICA_TYPES)
            canonical = [c.canonical_replica_type(t) or t for t in types]

            def wanted(pod_name: str) -> bool:
                rtype, _, number = pod_name.removeprefix(f"{name}-").rpartition("-")
                kinds = {c.replica_type_label(t) for t in canonical}
                return rtype in kinds and (index is None or number == str(index))

            previous_logs = self._previous_logs(status, await pods(), query, wanted)
            async with contextlib.aclosing(previous_logs) as it:
                async for item in it:
                    yield item
            return
        async with contextlib.aclosing(self._current_logs(ns, await pods(), query)) as current:
            async for item in current:
                yield item

    async def _current_logs(
        self, ns: str, pods: JSONList, query: Mapping[str, str]
    ) -> AsyncGenerator[tuple[str, str], None]:
        """Each pod's log in turn; MSJobLogsError at the end, naming every pod whose log
        could not be read (the others are shown all the same)."""
        unreadable: list[str] = []
        for pod in pods:
            pname = pod["metadata"]["name"]
            chunks = self._log_stream(self.kube, log_path(ns, pname), query, f"pod {ns}/{pname}")
            try:
                async for text in iter_lines(chunks):
                    yield pname, text
            except MSJobLogsError as e:
                unreadable.append(str(e))
        if unreadable:
            raise MSJobLogsError("; ".join(unreadable))

    async def _previous_logs(
        self,
        status: JobStatus,
        pods: JSONList,
        query: Mapping[str, str],
        wanted: Callable[[str], bool],
    ) -> AsyncGenerator[tuple[str, str], None]:
        """The previous run of each pod that has one:

        - in a pod that msop restarted in place, the stopped run that the pod's msop-agent
          kept (the kubelet removes the containers, and their logs, when it restarts them
          all), between a line that says so and one that ends it;
        - else the kubelet's previous run (it restarted the container);
        - where the operator re-created the pod instead (a restart of the whole job) or
          deleted it (the job failed), the failed run's last output that the job keeps in
          its condition (:attr:`JobStatus.last_failure`), after a line that says so.

        MSJobLogsError when there is none of these."""
        ns = status.namespace
        kept = _kept_output(status.last_failure, ns)
        found = False
        for pod in pods:
            pname = pod["metadata"]["name"]
            lines = await self._kept_run(pod, query) if keeps_runs(pod, query["container"]) else []
            for text in lines:
                found = True
                yield pname, text
            if lines:
                continue
            chunks = self._log_stream(self.kube, log_path(ns, pname), query, f"pod {ns}/{pname}")
            try:
                async for text in iter_lines(chunks):
                    found = True
                    yield pname, text
            except MSJobLogsError:
                continue  # no run before this one: the job may have kept what it said
        if kept is not None and wanted(kept[0]):
            found = True
            yield kept[0], KEPT_IN_CONDITION
            for text in kept[1]:
                yield kept[0], text
        if not found:
            raise MSJobLogsError(
                f"MSJob {ns}/{status.name}: no previous run to show: no pod has one (a "
                "container restarted by the kubelet, or a run kept by msop-agent before a "
                "restart in place), and the job keeps no failed run's output"
            )

    async def _kept_run(self, pod: JSON, query: Mapping[str, str]) -> Lines:
        """The stopped run that the pod's msop-agent printed into its log ([] if none, or
        if that log cannot be read); ``tailLines`` of it."""
        ns, pname = pod["metadata"]["namespace"], pod["metadata"]["name"]
        path, agent = log_path(ns, pname), {"container": AGENT_CONTAINER}
        try:
            chunks = self._log_stream(self.kube, path, agent, f"pod {ns}/{pname}")
            lines = kept_run([text async for text in iter_lines(chunks)])
        except MSJobLogsError:
            return []
        tail = query.get("tailLines")
        if len(lines) > 2 and tail is not None:
            body = lines[1:-1]
            lines = [lines[0], *body[max(0, len(body) - int(tail)) :], lines[-1]]
        return lines

    async def _follow_logs(
        self,
        name: str,
        ns: str,
        pods: Callable[[], Awaitable[JSONList]],
        query: Mapping[str, str],
        notice: Callable[[str], None] | None = None,
    ) -> AsyncGenerator[tuple[str, str], None]:
        """Every started pod's log, followed by a task of its own (owned and awaited
        here); the pods are looked at again every :data:`LOG_LOOK_SECONDS`. ``notice``
        hears, once per change, why a pod's log is not read yet."""
        lines: asyncio.Queue[tuple[str, str]] = asyncio.Queue(maxsize=1024)
        followed: set[str] = set()
        tasks: set[asyncio.Task[None]] = set()
        waits = _Waits(notice)

        async def follow(pod: JSON) -> None:
            pname, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
            chunks = self._log_stream(self.kube, log_path(ns, pname), query, f"pod {ns}/{pname}")
            try:
                async for text in iter_lines(chunks):
                    waits.clear(f"pod {ns}/{pname}")
                    await lines.put((pname, text))
            except MSJobLogsError as e:
                followed.discard(uid)  # not readable (yet): tried again at the next look
                waits.tell(f"pod {ns}/{pname}", str(e).split(": ", 1)[-1])

        def look(found: JSONList, finished: bool) -> None:
            """Follow every pod that has started and is not followed yet; say what the
            others wait for."""
            waits.look(f"MSJob {ns}/{name}", found, finished)
            for pod in found:
                uid = pod["metadata"]["uid"]
                if _started(pod) and uid not in followed:
                    followed.add(uid)
                    task = asyncio.create_task(follow(pod), name=f"logs {pod['metadata']['name']}")
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

        loop = asyncio.get_running_loop()
        try:
            while True:
                status = await self.get_status(name, ns)
                look(await pods(), status.finished)
                if status.finished and not tasks and lines.empty():
                    return
                deadline = loop.time() + LOG_LOOK_SECONDS
                while (left := deadline - loop.time()) > 0:
                    try:
                        item = await asyncio.wait_for(lines.get(), left)
                    except TimeoutError:
                        break
                    yield item
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- following a job -------------------------------------------------------------------
    async def wait_for_job(
        self,
        name: str,
        namespace: str | None = None,
        *,
        conditions: Sequence[str] = (c.SUCCEEDED, c.FAILED),
        timeout: float | None = 600,  # noqa: ASYNC109 (the API users expect)
        progress: bool = True,
        stream: TextIO | None = None,
        callback: Callable[[JobStatus], None] | None = None,
    ) -> JSON:
        """Follow the MSJob with a watch until one of ``conditions`` is True; return it.

        A job that finished without reaching any of them ends the wait with an error:
        MSJobFailedError (reason and message of its Failed condition) when it Failed,
        MSJobError when it Succeeded. ``timeout`` (seconds, None: no limit) raises
        MSJobTimeoutError carrying the last state seen. MSJobNotFoundError when the job
        does not exist or is deleted meanwhile.

        With ``progress``, a line with the latest condition and the active/succeeded/failed
        counts per replica type is written to ``stream`` (default stderr) at every change:
        updated in place on a terminal, one line per change otherwise. ``callback`` is
        called with the job's :class:`JobStatus` at every change, the first and the last
        included (an exception it raises ends the wait).
        """
        ns = self._ns(namespace)
        line = ProgressLine(stream or sys.stderr) if progress else None
        last: list[JSON] = []
        try:
            async with asyncio.timeout(timeout):
                return await self._follow(name, ns, tuple(conditions), line, last, callback)
        except TimeoutError:
            job = last[-1] if last else None
            state = format_progress(job) if job else f"{ns}/{name} never seen"
            raise MSJobTimeoutError(
                f"MSJob {ns}/{name}: timed out after {timeout:g}s waiting for "
                f"{' or '.join(conditions)}; last state: {state}",
                job,
            ) from None
        finally:
            if line is not None:
                line.close()

    def _decide(self, job: JSON, wanted: tuple[str, ...]) -> bool:
        """True when the wait is over with ``job``; raises when it is over badly."""
        if any(_condition_true(job, t) for t in wanted):
            return True
        failed = _condition_true(job, c.FAILED)
        if failed is not None:
            raise MSJobFailedError(
                job, str(failed.get("reason", "")), str(failed.get("message", ""))
            )
        if _condition_true(job, c.SUCCEEDED) is not None:
            meta = job["metadata"]
            raise MSJobError(
                f"MSJob {meta['namespace']}/{meta['name']} Succeeded without reaching "
                f"{', '.join(wanted)}"
            )
        return False

    async def _follow(
        self,
        name: str,
        ns: str,
        wanted: tuple[str, ...],
        line: ProgressLine | None,
        last: JSONList,
        callback: Callable[[JobStatus], None] | None = None,
    ) -> JSON:
        selector = f"metadata.name={name}"

        def seen(job: JSON) -> bool:
            first = not last
            last.append(job)
            del last[:-1]
            if callback is not None:
                callback(JobStatus.of(job))
            try:
                done = self._decide(job, wanted)
            except MSJobError:
                if line is not None:
                    line.update(format_progress(job))
                raise
            # A job that holds the condition when the wait starts is not waited for: no
            # status line (the caller prints the result; it would be said twice).
            if line is not None and not (first and done):
                line.update(format_progress(job))
            return done

        updates = list_then_watch(
            self.kube, MSJOBS, ns, field_selector=selector, timeout_seconds=WATCH_SECONDS
        )
        async with contextlib.aclosing(updates):
            async for type_, obj in updates:
                if type_ == "LIST":
                    if not obj["items"]:
                        raise MSJobNotFoundError(f"MSJob {ns}/{name} not found")
                    obj = obj["items"][0]
                elif type_ == "DELETED":
                    raise MSJobNotFoundError(f"MSJob {ns}/{name} was deleted")
                if seen(obj):
                    return obj
        raise AssertionError("list_then_watch ended")  # it never does

    # --- logs and events -------------------------------------------------------------------
    async def get_logs(
        self,
        name: str,
        namespace: str | None = None,
        *,
        replica_type: str = c.WORKER,
        index: int = 0,
        container: str = c.DEFAULT_CONTAINER_NAME,
        follow: bool = False,
    ) -> AsyncGenerator[str, None]:
        """Yield the log lines of one replica's pod (``<job>-<type>-<index>``).

        With ``follow`` the iterator continues until the container stops. Raises
        MSJobLogsError with the API server's status and message when it cannot serve the
        log (the pod does not exist yet, the node's kubelet is unreachable, ...),
        ValueError for an unknown replica type.
        """
        rtype = c.canonical_replica_type(replica_type)
        if rtype is None:
            raise ValueError(f"replica_type must be one of {', '.join(c.REPLICA_TYPES)}")
        ns = self._ns(namespace)
        pod = object_name(name, rtype, index)
        query = {"container": container, "follow": "true" if follow else "false"}
        chunks = self._log_stream(self.kube, log_path(ns, pod), query, f"pod {ns}/{pod}")
        async for text in iter_lines(chunks):
            yield text

    async def get_events(self, name: str, namespace: str | None = None) -> JSONList:
        """The Events about the MSJob, oldest first (by last occurrence)."""
        ns = self._ns(namespace)
        selector = f"involvedObject.kind={c.KIND},involvedObject.name={name}"
        result = await self.kube.list_all(EVENTS, ns, field_selector=selector)
        events: JSONList = result["items"]
        return sorted(events, key=_event_time)
