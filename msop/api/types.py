"""Typed, read-only views over MSJob objects as plain dicts.

A view wraps the dict the API server sent (normally after `apply_defaults`) and answers questions
with the API defaults already applied, so callers never write `.get()` chains:

    job = MSJob(obj)
    job.replica_specs[WORKER].replicas
    job.run_policy.clean_pod_policy
    job.status.replica_statuses[WORKER].active

Views never copy or mutate the dict. Accessors are tolerant: a value of the wrong type reads as
the default (an object that skipped admission must not crash the reconciler; `validate` reports
it). `raw` exposes the underlying dict for the rare field without an accessor.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from msop.api import constants as c

_EMPTY: Mapping[str, Any] = {}


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any, default: str) -> str:
    return value if isinstance(value, str) else default


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else False


def _list_of_maps(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, Mapping)]


class _View:
    __slots__ = ("raw",)

    def __init__(self, raw: Any) -> None:
        self.raw: Mapping[str, Any] = _map(raw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.raw)!r})"


class SchedulingPolicy(_View):
    """`spec.runPolicy.schedulingPolicy`: gang-scheduling hints (Volcano/scheduler-plugins)."""

    __slots__ = ()

    @property
    def min_available(self) -> int | None:
        return _opt_int(self.raw.get("minAvailable"))

    @property
    def queue(self) -> str | None:
        return _opt_str(self.raw.get("queue"))

    @property
    def priority_class(self) -> str | None:
        return _opt_str(self.raw.get("priorityClass"))

    @property
    def min_resources(self) -> Mapping[str, int | float | str]:
        """Resource name -> quantity, as written (int, float or string like "4Gi")."""
        return {
            k: v
            for k, v in _map(self.raw.get("minResources")).items()
            if isinstance(v, int | float | str) and not isinstance(v, bool)
        }

    @property
    def schedule_timeout_seconds(self) -> int | None:
        return _opt_int(self.raw.get("scheduleTimeoutSeconds"))


class RunPolicy(_View):
    """`spec.runPolicy`: cleanup, deadlines, retries, scheduling, suspension."""

    __slots__ = ()

    @property
    def clean_pod_policy(self) -> str:
        return _str(self.raw.get("cleanPodPolicy"), c.DEFAULT_CLEAN_POD_POLICY) or (
            c.DEFAULT_CLEAN_POD_POLICY
        )

    @property
    def ttl_seconds_after_finished(self) -> int | None:
        return _opt_int(self.raw.get("ttlSecondsAfterFinished"))

    @property
    def active_deadline_seconds(self) -> int | None:
        return _opt_int(self.raw.get("activeDeadlineSeconds"))

    @property
    def backoff_limit(self) -> int | None:
        return _opt_int(self.raw.get("backoffLimit"))

    @property
    def scheduling_policy(self) -> SchedulingPolicy | None:
        raw = self.raw.get("schedulingPolicy")
        return SchedulingPolicy(raw) if isinstance(raw, Mapping) else None

    @property
    def suspend(self) -> bool:
        return _bool(self.raw.get("suspend"))

    @property
    def managed_by(self) -> str | None:
        return _opt_str(self.raw.get("managedBy"))


class ReplicaSpec(_View):
    """One entry of `spec.msReplicaSpecs`, with its canonical replica type."""

    __slots__ = ("replica_type",)

    def __init__(self, replica_type: str, raw: Any) -> None:
        super().__init__(raw)
        self.replica_type = replica_type

    def __repr__(self) -> str:
        return f"ReplicaSpec({self.replica_type!r}, {dict(self.raw)!r})"

    @property
    def replicas(self) -> int:
        return _int(self.raw.get("replicas"), c.DEFAULT_REPLICAS)

    @property
    def restart_policy(self) -> str:
        return _str(self.raw.get("restartPolicy"), "") or c.DEFAULT_RESTART_POLICY

    @property
    def template(self) -> Mapping[str, Any]:
        """The PodTemplateSpec dict (empty mapping if absent)."""
        return _map(self.raw.get("template"))

    @property
    def pod_spec(self) -> Mapping[str, Any]:
        return _map(self.template.get("spec"))

    @property
    def containers(self) -> list[Mapping[str, Any]]:
        return _list_of_maps(self.pod_spec.get("containers"))

    @property
    def main_container(self) -> Mapping[str, Any] | None:
        """The container named `mindspore` that receives the MS_* environment, if any."""
        for container in self.containers:
            if container.get("name") == c.DEFAULT_CONTAINER_NAME:
                return container
        return None

    @property
    def port(self) -> int:
        """The `msjob-port` containerPort of the `mindspore` container, default 2222."""
        main = self.main_container
        if main is not None:
            for port in _list_of_maps(main.get("ports")):
                if port.get("name") == c.DEFAULT_PORT_NAME:
                    return _int(port.get("containerPort"), c.DEFAULT_PORT)
        return c.DEFAULT_PORT


class ReplicaSpecs(Mapping[str, ReplicaSpec]):
    """`spec.msReplicaSpecs` keyed by canonical replica type.

    Keys of any case are accepted (`worker` reads as `Worker`); unknown keys are skipped (they are
    a validation error). Indexing an absent type raises KeyError; use `replicas(type)` for a count
    that is 0 when the type is absent.
    """

    __slots__ = ("_specs",)

    def __init__(self, raw: Any) -> None:
        specs: dict[str, ReplicaSpec] = {}
        for key, value in _map(raw).items():
            canonical = c.canonical_replica_type(key) if isinstance(key, str) else None
            # An exact canonical key wins over a differently-cased duplicate.
            if canonical is not None and (canonical not in specs or key == canonical):
                specs[canonical] = ReplicaSpec(canonical, value)
        self._specs = {t: specs[t] for t in c.REPLICA_TYPES if t in specs}

    def __getitem__(self, replica_type: str) -> ReplicaSpec:
        return self._specs[replica_type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def replicas(self, replica_type: str) -> int:
        spec = self._specs.get(replica_type)
        return spec.replicas if spec is not None else 0

    def __repr__(self) -> str:
        return f"ReplicaSpecs({list(self._specs.values())!r})"


class Msrun(_View):
    """`spec.msrun`: the Workers run msrun, with several MindSpore workers per pod."""

    __slots__ = ()

    @property
    def local_workers(self) -> int | None:
        """As written; None means one per accelerator (`MSJob.local_workers`)."""
        return _opt_int(self.raw.get("localWorkers"))

    @property
    def master_port(self) -> int:
        return _int(self.raw.get("masterPort"), c.DEFAULT_MSRUN_MASTER_PORT)


def accelerators(container: Mapping[str, Any] | None) -> int | None:
    """The devices a container's limits ask for (Ascend NPUs, GPUs), None if it asks for none."""
    limits = _map(_map((container or _EMPTY).get("resources")).get("limits"))
    total: int | None = None
    for name, value in limits.items():
        if not isinstance(name, str) or not (
            name in c.ACCELERATOR_RESOURCES or name.startswith(c.ACCELERATOR_RESOURCE_PREFIXES)
        ):
            continue
        count = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and value.isdigit():
            count = int(value)
        if count is not None and count > 0:
            total = (total or 0) + count
    return total


class MSJobSpec(_View):
    """`spec` of an MSJob."""

    __slots__ = ()

    @property
    def run_policy(self) -> RunPolicy:
        return RunPolicy(self.raw.get("runPolicy"))

    @property
    def success_policy(self) -> str:
        return _str(self.raw.get("successPolicy"), c.SUCCESS_DEFAULT)

    @property
    def enable_dynamic_worker(self) -> bool:
        return _bool(self.raw.get("enableDynamicWorker"))

    @property
    def restart_scope(self) -> str:
        """``Job`` or ``Pod``; unset means the default for the job's shape, which
        ``msop.api.defaults`` fills in (a raw, undefaulted job reads as ``Pod``)."""
        return _str(self.raw.get("restartScope"), c.RESTART_SCOPE_POD)

    @property
    def restart_in_place(self) -> bool:
        """With ``restartScope: Job``: restart the pods' containers in place where the
        cluster can (default), rather than recreate every pod."""
        return self.raw.get("restartInPlace") is not False

    @property
    def restart_in_place_grace(self) -> int:
        """Seconds between the SIGTERM and the SIGKILL of a restart in place
        (``restartInPlaceGracePeriodSeconds``, default 1)."""
        value = self.raw.get("restartInPlaceGracePeriodSeconds")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return c.DEFAULT_RESTART_IN_PLACE_GRACE

    @property
    def managed_by(self) -> str | None:
        """The controller that reconciles the job: ``spec.managedBy`` (where Kueue's
        MultiKueue and batch/v1 Jobs put it), else ``spec.runPolicy.managedBy`` (where
        Kubeflow's training-operator v1 puts it); validation keeps the two equal when both
        are set. None or "": msop."""
        return _opt_str(self.raw.get("managedBy")) or self.run_policy.managed_by

    @property
    def replica_specs(self) -> ReplicaSpecs:
        return ReplicaSpecs(self.raw.get("msReplicaSpecs"))

    @property
    def msrun(self) -> Msrun | None:
        raw = self.raw.get("msrun")
        return Msrun(raw) if isinstance(raw, Mapping) else None


class Condition(_View):
    """One entry of `status.conditions`."""

    __slots__ = ()

    @property
    def type(self) -> str:
        return _str(self.raw.get("type"), "")

    @property
    def status(self) -> str:
        return _str(self.raw.get("status"), c.CONDITION_UNKNOWN)

    @property
    def is_true(self) -> bool:
        return self.status == c.CONDITION_TRUE

    @property
    def reason(self) -> str:
        return _str(self.raw.get("reason"), "")

    @property
    def message(self) -> str:
        return _str(self.raw.get("message"), "")

    @property
    def last_update_time(self) -> str | None:
        return _opt_str(self.raw.get("lastUpdateTime"))

    @property
    def last_transition_time(self) -> str | None:
        return _opt_str(self.raw.get("lastTransitionTime"))


class ReplicaStatus(_View):
    """One entry of `status.replicaStatuses`: pod counts of one replica type."""

    __slots__ = ()

    @property
    def active(self) -> int:
        return _int(self.raw.get("active"), 0)

    @property
    def succeeded(self) -> int:
        return _int(self.raw.get("succeeded"), 0)

    @property
    def failed(self) -> int:
        return _int(self.raw.get("failed"), 0)

    @property
    def selector(self) -> str:
        return _str(self.raw.get("selector"), "")


class ReplicaStatuses(Mapping[str, ReplicaStatus]):
    """`status.replicaStatuses`; an absent replica type reads as all-zero counts."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        self._raw = _map(raw)

    def __getitem__(self, replica_type: str) -> ReplicaStatus:
        return ReplicaStatus(self._raw.get(replica_type))

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw


class JobStatus(_View):
    """`status` of an MSJob (Kubeflow JobStatus shape plus the `workers` printer string)."""

    __slots__ = ()

    @property
    def conditions(self) -> list[Condition]:
        return [Condition(x) for x in _list_of_maps(self.raw.get("conditions"))]

    @property
    def replica_statuses(self) -> ReplicaStatuses:
        return ReplicaStatuses(self.raw.get("replicaStatuses"))

    @property
    def start_time(self) -> str | None:
        return _opt_str(self.raw.get("startTime"))

    @property
    def completion_time(self) -> str | None:
        return _opt_str(self.raw.get("completionTime"))

    @property
    def last_reconcile_time(self) -> str | None:
        return _opt_str(self.raw.get("lastReconcileTime"))

    @property
    def observed_generation(self) -> int | None:
        return _opt_int(self.raw.get("observedGeneration"))

    @property
    def workers(self) -> str:
        return _str(self.raw.get("workers"), "")


class MSJob(_View):
    """A whole MSJob object, with shortcuts to the parts a reconciler reads most."""

    __slots__ = ()

    @property
    def metadata(self) -> Mapping[str, Any]:
        return _map(self.raw.get("metadata"))

    @property
    def name(self) -> str:
        return _str(self.metadata.get("name"), "")

    @property
    def namespace(self) -> str:
        return _str(self.metadata.get("namespace"), "")

    @property
    def uid(self) -> str:
        return _str(self.metadata.get("uid"), "")

    @property
    def generation(self) -> int:
        return _int(self.metadata.get("generation"), 0)

    @property
    def deletion_timestamp(self) -> str | None:
        return _opt_str(self.metadata.get("deletionTimestamp"))

    @property
    def spec(self) -> MSJobSpec:
        return MSJobSpec(self.raw.get("spec"))

    @property
    def status(self) -> JobStatus:
        return JobStatus(self.raw.get("status"))

    @property
    def replica_specs(self) -> ReplicaSpecs:
        return self.spec.replica_specs

    @property
    def run_policy(self) -> RunPolicy:
        return self.spec.run_policy

    @property
    def local_workers(self) -> int | None:
        """MindSpore workers per Worker pod of an msrun job: `spec.msrun.localWorkers`, else
        one per accelerator of the Worker template's mindspore container; None for a job
        without `spec.msrun`, or when neither says (a validation error)."""
        msrun = self.spec.msrun
        if msrun is None:
            return None
        if msrun.local_workers is not None:
            return msrun.local_workers
        specs = self.replica_specs
        return accelerators(specs[c.WORKER].main_container) if c.WORKER in specs else None
