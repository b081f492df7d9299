"""Fakes of the MSJob reconciler's seams: one in-memory cluster behind its client
(create, patch, delete, live get: the ``msop.kube.writer.Client`` protocol) and its cache
readers, an event recorder, and a :class:`Harness` that wires them to a reconciler.

The fake is an in-memory cluster: the readers serve what it holds, a create adds the
object (a Service gets a ClusterIP, as the API server gives one) and tells the
expectations, as the informers would. Errors are injected per verb and kind
(:meth:`Cluster.fail`), also after the write was carried out (:meth:`Cluster.lose_answer`).
"""

from __future__ import annotations

import asyncio
import builtins
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from msop.api import constants as c
from msop.controller.expectations import Expectations
from msop.controller.reconcile import Request, Result
from msop.informers.store import BY_CONTROLLER_UID
from msop.kube.errors import ApiError
from msop.kube.resources import Resource
from msop.kube.writer import Client
from msop.msjob.plan import Options
from msop.msjob.reconciler import ChildKey, MSJobReconciler

JSON = dict[str, Any]
#: When the reconciler's clock starts.
START = datetime(2026, 1, 1, tzinfo=UTC)
#: The job of :func:`tests.support.builders.job` (``ns/j``), as the reconciler's key.
JOB = Request("ns", "j")
#: What a live get of the job raises once it is deleted (``Cluster.live = None``).
GONE_JOB = ApiError(404, "NotFound", 'msjobs.mindspore.gitee.com "j" not found')
#: What a status patch raises when its ``test`` op saw a stale status.
TEST_FAILED = ApiError(422, "Invalid", "the server rejected our request", body={"details": {}})


class Cluster:
    """The fake client seam and the caches behind the readers, in one."""

    def __init__(self, job: JSON, expectations: Expectations[ChildKey]) -> None:
        self.job = job
        self.objects: dict[tuple[str, str], JSON] = {}
        self.expectations = expectations
        self.errors: dict[tuple[str, str], list[ApiError | None]] = {}
        self.lost: dict[tuple[str, str], list[ApiError]] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.patches: list[list[JSON]] = []
        self.deletes: list[JSON] = []
        self._rv = 1
        self.gets = 0
        self.live: JSON | None = job
        """The job as the API server has it (None: deleted); the cache keeps ``job``."""
        self.cached: JSON | None = None
        """A job the cache shows instead of ``job`` (a cache that lags behind)."""
        self.watched: set[str] | None = None
        """With shards: the shard labels the cache shows children of (unlabelled ones
        always); None: every child."""
        self.lists: list[tuple[str, str]] = []
        """The live lists made: (kind, label selector)."""

    def fail(self, verb: str, kind: str, *errors: ApiError | None) -> None:
        """The next calls of ``verb`` on ``kind`` raise ``errors``, one each, in order
        (``None``: that call succeeds)."""
        self.errors.setdefault((verb, kind), []).extend(errors)

    def lose_answer(self, verb: str, kind: str, *errors: ApiError) -> None:
        """The next calls of ``verb`` on ``kind`` are carried out, then raise ``errors``
        (the API server stored the write; its answer was lost)."""
        self.lost.setdefault((verb, kind), []).extend(errors)

    def _raise_lost(self, verb: str, kind: str) -> None:
        queued = self.lost.get((verb, kind))
        if queued:
            raise queued.pop(0)

    def _raise(self, verb: str, kind: str) -> None:
        queued = self.errors.get((verb, kind))
        if queued:
            error = queued.pop(0)
            if error is not None:
                raise error

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    # the client seam
    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        """A live read (of the job only): what the API server holds, not the cache."""
        assert res.kind == c.KIND and name == "j"
        self.gets += 1
        if self.live is None:
            raise GONE_JOB
        return self.live

    async def list(
        self, res: Resource, namespace: str | None = None, *, label_selector: str | None = None,
        **kw: Any,
    ) -> JSON:  # fmt: skip
        """A live list of children by label selector (``k=v`` terms only), seen or not."""
        self.lists.append((res.kind, label_selector or ""))
        terms = dict(t.split("=", 1) for t in (label_selector or "").split(",") if t)
        items = [
            o for o in self.of_kind(res.kind, every=True)
            if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in terms.items())
        ]  # fmt: skip
        return {"items": json.loads(json.dumps(items))}

    def visible(self, obj: JSON) -> bool:
        """Whether the cache shows ``obj`` (see ``watched``)."""
        label = (obj["metadata"].get("labels") or {}).get(c.LABEL_SHARD)
        return self.watched is None or label is None or label in self.watched

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> JSON:
        name = body["metadata"]["name"]
        self.calls.append(("create", res.kind, name))
        self._raise("create", res.kind)
        made: JSON = json.loads(json.dumps(body))
        made["metadata"].update(uid=f"uid-{name}", resourceVersion=self._next_rv())
        made["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{len(self.objects):02d}Z"
        if res.kind == "Service":
            made["spec"]["clusterIP"] = "10.0.0.7"
        if res.kind == "Pod":
            made["status"] = {"phase": "Pending"}
        if (res.kind, name) in self.objects:
            raise ApiError(409, "AlreadyExists", f"{res.kind} {name!r} already exists")
        self.objects[(res.kind, name)] = made
        key = (JOB, res)
        self.expectations.creation_observed(key, name)
        self._raise_lost("create", res.kind)
        return made

    async def delete(
        self, res: Resource, name: str, namespace: str | None = None, **kw: Any
    ) -> JSON | None:
        self.calls.append(("delete", res.kind, name))
        self.deletes.append({"kind": res.kind, "name": name, **kw})
        self._raise("delete", res.kind)
        self.objects.pop((res.kind, name), None)
        key = (JOB, res)
        self.expectations.deletion_observed(key, name)
        return None

    async def patch(
        self, res: Resource, name: str, patch: Any, namespace: str | None = None, **kw: Any
    ) -> JSON:
        self.calls.append(("patch", res.kind, name))
        self._raise("patch", res.kind)
        if isinstance(patch, dict) and "metadata" in patch:  # a merge patch of labels
            obj = self.objects.get((res.kind, name))
            if obj is None:
                raise ApiError(404, "NotFound", f"{res.kind} {name!r} not found")
            if patch["metadata"].get("uid") not in (None, obj["metadata"]["uid"]):
                raise ApiError(422, "Invalid", "metadata.uid: field is immutable")
            shown = self.visible(obj)
            obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}),
                                         **patch["metadata"]["labels"]}  # fmt: skip
            if self.visible(obj) and not shown:  # as the informer of its new label adds it
                self.expectations.creation_observed((JOB, res), name)
            return obj
        if res.kind == "Service":  # a merge patch of the spec's selector, in place
            svc = self.objects[(res.kind, name)]
            selector = {**svc["spec"].get("selector", {}), **patch["spec"]["selector"]}
            svc["spec"]["selector"] = {k: v for k, v in selector.items() if v is not None}
            return svc
        ops = json.loads(patch)
        assert kw == {"patch_type": "json", "subresource": "status"}
        if self.cached is not None and ops[0]["value"] != self.job.get("status"):
            raise TEST_FAILED  # written from a stale cache
        assert ops[0] == {"op": "test", "path": "/status", "value": self.job.get("status")}
        self.patches.append(ops)
        self.job = {**self.job, "status": ops[1]["value"]}
        self.job["metadata"] = {**self.job["metadata"], "resourceVersion": self._next_rv()}
        self._raise_lost("patch", res.kind)
        return self.job

    # the caches
    def of_kind(self, kind: str, *, every: bool = False) -> builtins.list[JSON]:
        """The objects of ``kind`` the cache shows (``every``: also those it does not)."""
        return [
            o for (k, _), o in sorted(self.objects.items())
            if k == kind and (every or self.visible(o))
        ]  # fmt: skip

    def set_phase(self, kind: str, name: str, phase: str) -> None:
        self.objects[(kind, name)]["status"] = {"phase": phase}


class Reader:
    def __init__(self, cluster: Cluster, kind: str) -> None:
        self.cluster, self.kind = cluster, kind

    def get(self, name: str, namespace: str) -> Any:
        if self.kind != c.KIND:
            return None
        return self.cluster.cached or self.cluster.job or None

    def by_index(self, index_name: str, value: str) -> builtins.list[Any]:
        assert index_name == BY_CONTROLLER_UID and value == "u-1"
        return self.cluster.of_kind(self.kind)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        /,
        *,
        deferrable: bool = False,
    ) -> None:
        self.events.append((type_, reason, message))


class Harness:
    """A reconciler wired to a :class:`Cluster` holding ``job``, its readers and a
    :class:`Recorder`; ``now`` is the reconciler's wall clock (a test moves it)."""

    def __init__(self, job: JSON, now: datetime = START, options: Options | None = None) -> None:
        self.now = now
        self.expectations: Expectations[ChildKey] = Expectations()
        self.cluster = Cluster(job, self.expectations)
        self.recorder = Recorder()
        client: Client = self.cluster  # the fake keeps to the protocol
        self.reconciler = MSJobReconciler(
            client,
            jobs=Reader(self.cluster, c.KIND),
            pods=Reader(self.cluster, "Pod"),
            services=Reader(self.cluster, "Service"),
            recorder=self.recorder,
            expectations=self.expectations,
            options=options or Options(progress_port=0),
            now=lambda: self.now,
        )

    def reconcile(self) -> Result:
        return asyncio.run(self.reconciler.reconcile(Request("ns", "j")))

    def conditions(self) -> dict[str, JSON]:
        return {x["type"]: x for x in self.cluster.job["status"]["conditions"]}

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.recorder.events]
