"""The seam between an MSJob and the systems that queue or gang-schedule it.

A scheduling system (Kueue in :mod:`.kueue`, Volcano in :mod:`.gang`, Kubernetes' Workload
API in :mod:`.workloadapi`) does the same few
things for every job it manages, and nothing else in the MSJob controller knows about its
objects:

- **observe** (:meth:`System.observe`, the reconciler's side): read what it needs for one
  job from its caches (and, rarely, the API server) into a :class:`Seen`; None for a job it
  does not manage. The planner gets every ``Seen`` in ``Observed.scheduling``.
- **decide** (:meth:`Seen.decide`, pure, inside the planner's pass): a fresh
  :class:`Decision` per pass, whose hooks the planner calls at fixed points of the job's
  life, through the narrow view of the pass it is given (:class:`Pass`):

  ============================  =========================================================
  hook                          called
  ============================  =========================================================
  :meth:`Decision.admit`        before a job's clock starts (``startTime``, the deadline);
                                False: the job waits (no pod) and the pass stops there
  :meth:`Decision.release_pods`  once the Scheduler Service is in hand, before pods are
                                created; False: the pods wait
  :meth:`Decision.placement`    for each replica type whose pods are created: what they
                                carry (node labels, tolerations, scheduler, annotations,
                                scheduling gates)
  :meth:`Decision.running`      once every pod runs
  :meth:`Decision.suspend`      while the job is suspended
  :meth:`Decision.finish`       in every pass of a finished job
  :meth:`Decision.runs_elsewhere`  first: True when the system runs the job on another
                                cluster and only queues it here (Kueue's MultiKueue); the
                                planner then makes no pod or Service
  :meth:`Decision.mirrors_status`  at the end of a pass of a job that runs elsewhere: True
                                while that system copies the job's status from where it
                                runs; the planner then writes no status
  ============================  =========================================================

  The Decision keeps the writes it decided on; the Plan carries the Decisions
  (``Plan.scheduling``).
- **apply** (:meth:`Decision.apply`, the reconciler's side): write them, after the job's
  own children. False when a write conflicted: the job is planned again from a fresher
  cache.
- **forget** (:meth:`System.forget`): the job is gone; let go of whatever of its objects
  only msop would release.

Each system declares the caches it reads (:class:`Caches`, given by ``setup.py``) when
it starts (:attr:`Integration.start`), and says what ``msop render`` shows of it, offline
(:attr:`Integration.unseen`, :meth:`Decision.granted`). :mod:`.systems` lists them in
the order they decide (Kueue, then Volcano: a job queued by Kueue and placed as a gang by
Volcano waits for Kueue first). A new scheduling feature is a new implementation of these
protocols and one more entry there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

from msop.kube.objects import JSON, EventType

if TYPE_CHECKING:
    from msop.controller.events import Recorder
    from msop.controller.reconcile import Request
    from msop.kube.resources import Resource
    from msop.kube.writer import Client


@dataclass(frozen=True)
class Wait:
    """Why a job waits for a scheduling system: the ``Queued`` condition's reason and
    message, and the type of the Event that announces it (Warning where the user must
    act)."""

    reason: str
    message: str
    event_type: EventType = "Normal"


@dataclass(frozen=True)
class Placement:
    """What scheduling systems add to a replica's pods: node labels and tolerations
    (Kueue's admitted flavors), the scheduler that places them (Volcano), labels,
    annotations, scheduling gates (Kueue's topology gate) and the scheduling group
    (the Workload API's PodGroup). The template's own node
    labels and scheduler win; the operator's labels win over these."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[JSON] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None
    scheduling_gates: list[str] = field(default_factory=list)
    """Names of ``spec.schedulingGates`` the pods are created with (each once): the pod
    is not scheduled until whoever owns a gate removes it."""
    scheduling_group: str | None = None
    """The ``PodGroup`` (Kubernetes' Workload API) the pods are placed with, whole or not
    at all (``spec.schedulingGroup.podGroupName``)."""

    def __add__(self, other: Placement) -> Placement:
        return Placement(
            node_selector={**self.node_selector, **other.node_selector},
            tolerations=[*self.tolerations, *other.tolerations],
            labels={**self.labels, **other.labels},
            annotations={**self.annotations, **other.annotations},
            scheduler_name=other.scheduler_name or self.scheduler_name,
            scheduling_gates=list(dict.fromkeys([*self.scheduling_gates, *other.scheduling_gates])),
            scheduling_group=other.scheduling_group or self.scheduling_group,
        )


class Pass(Protocol):
    """One planning pass, as a scheduling system sees it (the planner is one)."""

    @property
    def stored(self) -> JSON:
        """The job as stored (labels, metadata)."""

    @property
    def job(self) -> JSON:
        """The job with its defaults applied."""

    @property
    def ref(self) -> str:
        """``namespace/name``, for messages."""

    @property
    def now(self) -> datetime: ...

    @property
    def now_s(self) -> str:
        """``now`` as the API writes times."""

    @property
    def status(self) -> JSON:
        """The status this pass plans (read it; change it through ``set_condition``, except
        for ``startTime``, which a system may clear)."""

    @property
    def old_status(self) -> JSON:
        """The status as stored."""

    @property
    def pods(self) -> Sequence[JSON]:
        """The job's pods in the cache."""

    def set_condition(
        self, type_: str, status: str, reason: str, message: str, *, in_place: bool = False
    ) -> bool:
        """Set a condition of the job; whether it changed."""

    def event(self, type_: EventType, reason: str, message: str) -> None:
        """An Event about the job, written after its status."""

    def requeue_at(self, seconds: float) -> None:
        """Look at the job again within ``seconds``."""

    def all_running(self) -> bool:
        """Whether every wanted pod exists and runs (or has succeeded)."""

    def stop_pods(self) -> bool:
        """Delete every pod of the job (Services stay); True once none is left."""

    def wait(self, wait: Wait) -> None:
        """``Queued`` True with the wait's reason and message; its Event when the reason
        changes."""

    def placed(self, reason: str, message: str) -> None:
        """``Queued`` False (out of the State column) with ``reason``, and its Event, once:
        the wait is over."""


@dataclass
class Writer:
    """What a Decision writes with: the API client, the Event recorder, the job."""

    client: Client
    recorder: Recorder
    job: JSON

    @property
    def namespace(self) -> str:
        return str(self.job["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.job["metadata"]["name"])


class Decision(Protocol):
    """One system's decisions for one job in one pass, and the writes they make."""

    def admit(self, p: Pass, resuming: bool) -> bool:
        """Before the job's clock starts; False: it waits (``resuming``: the job is
        resumed in this pass)."""

    def release_pods(self, p: Pass) -> bool:
        """Before the job's pods are created; False: they wait."""

    def placement(self, p: Pass, replica_type: str) -> Placement | None:
        """What the replica type's pods carry."""

    def running(self, p: Pass) -> None:
        """Every pod of the job runs."""

    def suspend(self, p: Pass) -> None:
        """The job is suspended (its pods are being deleted)."""

    def finish(self, p: Pass) -> None:
        """The job has finished (this pass or earlier)."""

    def runs_elsewhere(self, p: Pass) -> bool:
        """The system runs the job on another cluster: here it is only queued."""

    def mirrors_status(self, p: Pass) -> bool:
        """The job runs on another cluster and this system copies its status from there."""

    def granted(self) -> Granted | None:
        """Offline (``msop render``): what this pass creates of the system's objects, and
        what the system would see once it lets the job go ahead; None: it creates
        nothing."""

    async def apply(self, w: Writer) -> bool:
        """Write what was decided; False when a write conflicted (plan again)."""


@dataclass(frozen=True)
class Granted:
    """A system's part of ``msop render``: the objects a pass creates, the system's view
    of them once it lets the job go ahead (admitted, in queue), and a note for the
    reader about what a cluster would add."""

    objects: list[JSON]
    seen: Seen
    note: str = ""


class Seen(Protocol):
    """What one system observed for one job (immutable; the planner may plan twice)."""

    def decide(self) -> Decision:
        """A fresh Decision for one planning pass."""


class System(Protocol):
    """A scheduling system in the operator process: reads its caches, cleans up."""

    async def observe(self, job: JSON) -> Seen | None:
        """What it sees of ``job``; None if it does not manage the job."""

    async def forget(self, request: Request) -> None:
        """``request``'s job is gone from the cache."""


class Children(Protocol):
    """A cache of the operator's own objects of one resource (labelled as its children)."""

    def get(self, name: str, namespace: str) -> JSON | None:
        """The object ``namespace/name``, or None."""

    def owned_by(self, uid: str) -> list[JSON]:
        """The objects whose controller has this uid."""

    def in_namespace(self, namespace: str) -> list[JSON]:
        """The objects in ``namespace``."""


class Caches(Protocol):
    """The caches a system asks for when it starts (``setup.py`` makes them)."""

    def children(self, resource: Resource) -> Children:
        """The operator's own objects of ``resource`` in the watched namespaces; an event
        of one enqueues the MSJob that controls it."""

    def cluster(self, resource: Resource) -> Callable[[str], JSON | None]:
        """Every object of the cluster-scoped ``resource``, by name; its events wake no
        job."""

    def nodes(self) -> Callable[[str], JSON | None] | None:
        """The operator's own node cache (what :mod:`.nodehealth` keeps of a node), by
        name; None when nodes are not watched (``--node-lost-after=off``). Its events
        wake only the jobs with a pod on the node."""


@dataclass(frozen=True)
class Integration:
    """A scheduling system msop integrates with (:mod:`.systems` lists them)."""

    name: str
    start: Callable[[Client, Caches], System]
    """The system in the operator: it asks for the caches it reads (its watches)."""
    unseen: Callable[[], Seen]
    """What it sees of a job before anything of it exists (``msop render``)."""


class Admitted:
    """A Decision's defaults: admits, releases, places nothing, writes nothing."""

    def admit(self, p: Pass, resuming: bool) -> bool:
        return True

    def release_pods(self, p: Pass) -> bool:
        return True

    def placement(self, p: Pass, replica_type: str) -> Placement | None:
        return None

    def running(self, p: Pass) -> None:
        return None

    def suspend(self, p: Pass) -> None:
        return None

    def finish(self, p: Pass) -> None:
        return None

    def runs_elsewhere(self, p: Pass) -> bool:
        return False

    def mirrors_status(self, p: Pass) -> bool:
        return False

    def granted(self) -> Granted | None:
        return None


D = TypeVar("D")


def decision(decisions: Sequence[Decision], kind: type[D]) -> D | None:
    """The Decision of one kind among a Plan's (None: that system does not manage the
    job): for callers that read what one system decided, such as ``msop render``."""
    return next((d for d in decisions if isinstance(d, kind)), None)
