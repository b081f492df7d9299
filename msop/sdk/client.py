"""The async SDK: :class:`MSJobClient`."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TextIO

from msop.api import FieldError, validate_admission
from msop.api import constants as c
from msop.api.conditions import get_condition
from msop.api.naming import object_name
from msop.api.resources import MSJOBS
from msop.api.validation import beyond_admission
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError, is_not_found
from msop.kube.listwatch import list_then_watch
from msop.kube.objects import JSON
from msop.kube.resources import EVENTS
from msop.sdk.errors import (
    MSJobError,
    MSJobFailedError,
    MSJobNotFoundError,
    MSJobTimeoutError,
    MSJobValidationError,
)
from msop.sdk.logs import iter_lines, log_path, stream_log
from msop.sdk.manifests import load_job
from msop.sdk.statusline import ProgressLine, format_progress

JSONList = list[JSON]

#: The MSJob REST resource (``mindspore.gitee.com/v1``, ``msjobs``).

#: How long one watch request may stay open before the SDK re-opens it.
WATCH_SECONDS = 300

LogStream = Callable[[KubeClient, str, Mapping[str, str], str], AsyncIterator[bytes]]


def _condition_true(job: JSON, type_: str) -> JSON | None:
    cond = get_condition(job.get("status") or {}, type_)
    if cond is not None and cond.get("status") == c.CONDITION_TRUE:
        return dict(cond)
    return None


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

    Give either a ``kubeconfig`` path (None: ``$KUBECONFIG``, else the in-cluster service
    account), loaded on entry, or a ready :class:`KubeClient` in ``kube`` (then the caller
    keeps ownership and closes it). ``namespace`` is the default of every method.

    Errors: :mod:`msop.sdk.errors` for what the SDK interprets (validation, failure,
    timeout, missing job, logs); :class:`msop.kube.errors.ApiError` for other refusals.
    """

    def __init__(
        self,
        kubeconfig: str | Path | None = None,
        *,
        namespace: str = "default",
        context: str | None = None,
        kube: KubeClient | None = None,
    ) -> None:
        self.namespace = namespace
        self._kubeconfig = str(kubeconfig) if kubeconfig is not None else None
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
    ) -> JSON:
        """Follow the MSJob with a watch until one of ``conditions`` is True; return it.

        A job that finished without reaching any of them ends the wait with an error:
        MSJobFailedError (reason and message of its Failed condition) when it Failed,
        MSJobError when it Succeeded. ``timeout`` (seconds, None: no limit) raises
        MSJobTimeoutError carrying the last state seen. MSJobNotFoundError when the job
        does not exist or is deleted meanwhile.

        With ``progress``, a line with the latest condition and the active/succeeded/failed
        counts per replica type is written to ``stream`` (default stderr) at every change:
        updated in place on a terminal, one line per change otherwise.
        """
        ns = self._ns(namespace)
        line = ProgressLine(stream or sys.stderr) if progress else None
        last: list[JSON] = []
        try:
            async with asyncio.timeout(timeout):
                return await self._follow(name, ns, tuple(conditions), line, last)
        except TimeoutError:
            job = last[-1] if last else None
            state = format_progress(job) if job else f"{ns}/{name} never seen"
            raise MSJobTimeoutError(
                f"MSJob {ns}/{name}: none of {', '.join(conditions)} within {timeout}s; "
                f"last state: {state}",
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
    ) -> JSON:
        selector = f"metadata.name={name}"

        def seen(job: JSON) -> bool:
            last.append(job)
            del last[:-1]
            if line is not None:
                line.update(format_progress(job))
            return self._decide(job, wanted)

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
