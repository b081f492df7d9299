"""The scheduling seam: a system the planner has never heard of plugs in through it.

Kueue and Volcano are tested through the planner in test_kueue.py and test_gang.py; here
a made-up system shows what the seam itself promises: the hooks are called at their
points of the job's life, in the systems' order, a system that holds the job stops the
later ones, and what each adds to the pods is combined.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from msop.api import constants as c
from msop.kube.objects import JSON
from msop.msjob.plan import Observed, Plan, plan
from msop.msjob.scheduling import Admitted, Pass, Placement, Wait, Writer, decision
from tests.support.builders import NOW, cond, finished, job, pod, running_status, service
from tests.support.clients import NoApiServer
from tests.support.fakes import Recorder


@dataclass
class Gate(Admitted):
    """A system that records the hooks called and answers as told."""

    name: str
    admits: bool = True
    releases: bool = True
    label: str | None = None
    elsewhere: bool = False
    mirrors: bool = False
    calls: list[str] = field(default_factory=list)

    def admit(self, p: Pass, resuming: bool) -> bool:
        self.calls.append("admit")
        if not self.admits:
            p.wait(Wait("GateClosed", f"MSJob {p.ref} waits for {self.name}."))
        return self.admits

    def release_pods(self, p: Pass) -> bool:
        self.calls.append("release_pods")
        return self.releases

    def placement(self, p: Pass, replica_type: str) -> Placement | None:
        if self.label is None:
            return None
        return Placement(labels={self.label: replica_type}, node_selector={self.label: "yes"})

    def running(self, p: Pass) -> None:
        self.calls.append("running")

    def suspend(self, p: Pass) -> None:
        self.calls.append("suspend")

    def finish(self, p: Pass) -> None:
        self.calls.append("finish")

    def runs_elsewhere(self, p: Pass) -> bool:
        return self.elsewhere

    def mirrors_status(self, p: Pass) -> bool:
        return self.mirrors

    async def apply(self, w: Writer) -> bool:
        self.calls.append("apply")
        return True


@dataclass(frozen=True)
class SeenBy:
    gate: Gate

    def decide(self) -> Gate:
        return self.gate


def run(j: JSON, *gates: Gate, pods: Sequence[JSON] = (), services: Sequence[JSON] = ()) -> Plan:
    seen = [SeenBy(g) for g in gates]
    return plan(Observed(j, list(pods), list(services), NOW, scheduling=list(seen)))


def cluster() -> JSON:
    return job({"Scheduler": (1, "Never"), "Worker": (2, "Never")})


def test_a_system_that_holds_the_job_stops_the_later_ones_and_creates_nothing() -> None:
    first, second = Gate("first", admits=False), Gate("second")
    p = run(cluster(), first, second, services=[service()])
    assert p.create_pods == [] and p.create_services == []
    assert first.calls == ["admit"] and second.calls == []
    queued = cond(p, c.QUEUED)
    assert queued is not None and queued["reason"] == "GateClosed"
    assert [e.reason for e in p.events] == ["GateClosed"]
    assert p.scheduling == [first, second]  # both apply what they decided
    assert "startTime" not in (p.status or {})  # the clock has not started


def test_a_system_that_holds_the_pods_lets_the_service_go_first() -> None:
    gate = Gate("gang", releases=False)
    p = run(cluster(), gate)
    assert [s["metadata"]["name"] for s in p.create_services] == ["j-scheduler-0"]
    assert p.create_pods == []
    assert gate.calls == ["admit", "release_pods"]


def test_the_pods_carry_what_every_system_adds() -> None:
    p = run(cluster(), Gate("a", label="a.example/pool"), Gate("b", label="b.example/rack"),
            services=[service()])  # fmt: skip
    assert len(p.create_pods) == 3
    for created in p.create_pods:
        meta, spec = created["metadata"], created["spec"]
        rtype = meta["labels"][c.LABEL_REPLICA_TYPE]
        assert meta["labels"]["a.example/pool"] == meta["labels"]["b.example/rack"]
        assert meta["labels"]["a.example/pool"].lower() == rtype
        assert spec["nodeSelector"] == {"a.example/pool": "yes", "b.example/rack": "yes"}


def test_running_suspend_and_finish_reach_every_system() -> None:
    pods = [pod("Scheduler", 0, "Running"), pod("Worker", 0, "Running"), pod("Worker", 1)]
    gate = Gate("g")
    run(job({"Scheduler": (1, "Never"), "Worker": (2, "Never")}, status=running_status()),
        gate, pods=pods, services=[service()])  # fmt: skip
    assert gate.calls[-1] == "running"
    suspended = job({"Scheduler": (1, "Never"), "Worker": (2, "Never")}, {"suspend": True})
    gate = Gate("g")
    run(suspended, gate)
    assert gate.calls == ["suspend"]
    gate = Gate("g")
    run(job({"Worker": (1, "Never")}, status=finished()), gate)
    assert gate.calls == ["finish"]


def test_a_plan_is_made_from_fresh_decisions_and_names_them() -> None:
    seen = SeenBy(Gate("g"))
    p = plan(Observed(cluster(), [], [], NOW, scheduling=[seen]))
    assert decision(p.scheduling, Gate) is seen.gate
    assert decision(p.scheduling, str) is None
    assert asyncio.run(seen.gate.apply(Writer(NoApiServer(), Recorder(), cluster()))) is True


def test_placements_add_up_and_the_later_scheduler_name_wins() -> None:
    a = Placement(node_selector={"x": "1"}, tolerations=[{"key": "t"}], annotations={"a": "1"})
    b = Placement(node_selector={"y": "2"}, labels={"l": "v"}, scheduler_name="volcano")
    both = a + b
    assert both.node_selector == {"x": "1", "y": "2"}
    assert both.tolerations == [{"key": "t"}] and both.labels == {"l": "v"}
    assert both.annotations == {"a": "1"} and both.scheduler_name == "volcano"
    assert (b + Placement()).scheduler_name == "volcano"


def test_a_job_a_system_runs_elsewhere_is_only_queued_here() -> None:
    # The planner does not know MultiKueue: a system says the job runs on another cluster.
    gate = Gate("remote", elsewhere=True)
    p = run(cluster(), gate, services=[service()])
    assert p.create_pods == [] and p.create_services == []
    assert gate.calls == ["admit"]
    assert cond(p, c.CREATED) is not None  # its status is written here, for now
    gate = Gate("remote", elsewhere=True, mirrors=True)
    p = run(cluster(), gate, services=[service()])
    assert p.status is None and p.create_pods == [] and p.transitions == []


def test_a_job_managed_by_another_controller_is_left_alone_unless_a_system_runs_it() -> None:
    j = cluster()
    j["spec"]["managedBy"] = "example.com/remote"
    gate = Gate("here")
    p = run(j, gate, services=[service()])
    assert p.status is None and p.create_pods == [] and gate.calls == []
    gate = Gate("remote", elsewhere=True)
    p = run(j, gate, services=[service()])
    assert p.status is not None and p.create_pods == [] and gate.calls == ["admit"]
