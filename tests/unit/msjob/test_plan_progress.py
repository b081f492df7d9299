"""Training progress in the planner and the pods: what Worker 0 is given, and how
``status.progress`` follows the live reports and the final one."""

from __future__ import annotations

import json
from typing import Any

from msop.api import constants as c
from msop.msjob import desired
from msop.msjob.plan import Observed, Options, Plan, plan
from msop.msjob.podstate import final_progress
from msop.msjob.projection import pod_projection
from tests.support.builders import NOW, finished, job, pod, running_status

JSON = dict[str, Any]
PROGRESS_ENV = {c.ENV_PROGRESS_PORT, c.ENV_POD_NAME, c.ENV_POD_UID, c.ENV_PROGRESS_FILE}


def env(p: JSON, container: str = "mindspore") -> dict[str, Any]:
    for ct in p["spec"]["containers"]:
        if ct["name"] == container:
            return {e["name"]: e.get("value", e.get("valueFrom")) for e in ct.get("env", [])}
    raise AssertionError(container)


def cluster() -> JSON:
    return job({"Scheduler": (1, "Never"), "Worker": (2, "Never")})


def test_only_worker_0s_mindspore_container_gets_the_progress_env() -> None:
    j = cluster()
    j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "x"}
    )
    w0 = desired.pod(j, "Worker", 0, sched_host="10.0.0.1", progress_port=28080)
    assert env(w0)[c.ENV_PROGRESS_PORT] == "28080"
    assert env(w0)[c.ENV_POD_UID] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert env(w0)[c.ENV_POD_NAME] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env(w0)[c.ENV_PROGRESS_FILE] == "/dev/termination-log"
    assert not PROGRESS_ENV & set(env(w0, "sidecar"))
    for rtype, index in (("Worker", 1), ("Scheduler", 0)):
        other = desired.pod(j, rtype, index, sched_host="10.0.0.1", progress_port=28080)
        assert not PROGRESS_ENV & set(env(other))
    off = desired.pod(j, "Worker", 0, sched_host="10.0.0.1", progress_port=0)
    assert not PROGRESS_ENV & set(env(off))


def test_progress_env_wins_over_the_template_and_follows_its_termination_path() -> None:
    j = job({"Worker": (1, "Never")})  # standalone: no MS_* variables, progress all the same
    container = j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["terminationMessagePath"] = "/tmp/done"
    container["env"] = [{"name": c.ENV_PROGRESS_PORT, "value": "1"}, {"name": "A", "value": "b"}]
    w0 = desired.pod(j, "Worker", 0, sched_host=None, progress_port=28080)
    assert env(w0)["A"] == "b"
    assert env(w0)[c.ENV_PROGRESS_PORT] == "28080"
    assert env(w0)[c.ENV_PROGRESS_FILE] == "/tmp/done"
    assert "MS_ROLE" not in env(w0)
    assert desired.progress_port(w0) == 28080
    assert desired.progress_port(pod_projection(w0)) == 28080


def test_the_planner_creates_worker_0_with_the_configured_port() -> None:
    j = job({"Worker": (2, "Never")})
    created = {p["metadata"]["name"]: p for p in plan(Observed(j, [], [], NOW)).create_pods}
    assert env(created["j-worker-0"])[c.ENV_PROGRESS_PORT] == str(c.DEFAULT_PROGRESS_PORT)
    created = {
        p["metadata"]["name"]: p
        for p in plan(Observed(j, [], [], NOW), Options(progress_port=0)).create_pods
    }
    assert c.ENV_PROGRESS_PORT not in env(created["j-worker-0"])


LIVE = {"percentComplete": 40, "step": 8, "totalSteps": 20,
        "lastReportTime": "2026-01-01T11:59:50Z"}  # fmt: skip


def run(j: JSON, pods: list[JSON], live: JSON | None = None) -> Plan:
    return plan(Observed(j, pods, [], NOW, progress=live))


def workers(*w0: JSON) -> list[JSON]:
    return [*(w0 or (pod("Worker", 0),)), pod("Worker", 1)]


def steady(pods: list[JSON], **status: Any) -> JSON:
    """A running job whose stored status is what the planner makes of ``pods``."""
    j = job(status=running_status(**status))
    planned = run(j, pods).status
    if planned is not None:
        j["status"] = planned
    assert run(j, pods).status is None
    return j


def test_status_is_empty_until_the_job_reports_then_takes_the_live_report() -> None:
    j = steady(workers())
    assert "progress" not in j["status"]
    p = run(j, workers(), LIVE)
    assert p.status is not None and p.status["progress"] == LIVE


def test_the_same_report_is_not_written_twice_and_an_older_one_never_wins() -> None:
    j = steady(workers(), progress=LIVE)
    assert run(j, workers(), dict(LIVE)).status is None
    older = {**LIVE, "percentComplete": 10, "lastReportTime": "2026-01-01T11:58:00Z"}
    assert run(j, workers(), older).status is None


def final_message(uid: str = "pod-Worker-0", **fields: Any) -> str:
    report = {"version": 1, "pod": {"name": "j-worker-0", "uid": uid}, "seq": 9,
              "step": 20, "totalSteps": 20, "final": True, **fields}  # fmt: skip
    return json.dumps(report)


def succeeded_worker_0(message: str, state: str = "state") -> JSON:
    w0 = pod("Worker", 0, "Succeeded", exit_code=0)
    cs = w0["status"]["containerStatuses"][0]
    term = {"exitCode": 0, "finishedAt": "2026-01-01T11:59:59Z", "message": message}
    if state == "state":
        cs["state"] = {"terminated": term}
    else:  # an earlier run of the container (restarted in place by the kubelet)
        cs["lastState"] = {"terminated": term}
    return w0


def test_the_final_report_in_the_termination_message_lands_with_success() -> None:
    j = job(status=running_status(progress=LIVE), successPolicy="")
    p = run(j, [succeeded_worker_0(final_message()), pod("Worker", 1)])
    assert p.status is not None
    assert p.status["progress"] == {
        "percentComplete": 100, "step": 20, "totalSteps": 20,
        "lastReportTime": "2026-01-01T11:59:59Z",
    }  # fmt: skip
    assert p.status["conditions"][-1]["type"] == "Succeeded"


def test_a_final_report_still_lands_after_the_job_finished() -> None:
    j = job(status=finished(progress=LIVE))
    p = run(j, [succeeded_worker_0(final_message(), state="lastState"), pod("Worker", 1)])
    assert p.status is not None and p.status["progress"]["percentComplete"] == 100


def test_a_termination_message_naming_another_pod_or_not_final_is_ignored() -> None:
    assert final_progress(succeeded_worker_0(final_message(uid="someone-else"))) is None
    assert final_progress(succeeded_worker_0(final_message(final=False))) is None
    assert final_progress(succeeded_worker_0("plain text the user wrote")) is None
    assert final_progress(succeeded_worker_0('{"not": "a report"}')) is None
    assert final_progress(pod("Worker", 0)) is None


def test_the_projection_keeps_what_progress_needs() -> None:
    w0 = succeeded_worker_0(final_message())
    w0["spec"]["hostNetwork"] = True
    w0["status"]["podIP"] = "10.1.2.3"
    projected = pod_projection(w0)
    assert projected["spec"]["hostNetwork"] is True
    assert projected["status"]["podIP"] == "10.1.2.3"
    assert final_progress(projected) == final_progress(w0) is not None


def test_a_restarted_run_that_has_not_saved_yet_keeps_the_last_checkpoint() -> None:
    saved = {"step": 8, "epoch": 1, "time": "2026-01-01T11:59:40Z"}
    j = steady(workers(), progress={**LIVE, "lastCheckpoint": saved})
    resumed = {"step": 9, "totalSteps": 20, "lastReportTime": "2026-01-01T11:59:58Z"}
    p = run(j, workers(), resumed)
    assert p.status is not None
    assert p.status["progress"] == {**resumed, "lastCheckpoint": saved}
    # Its own first checkpoint replaces it.
    own = {"step": 10, "time": "2026-01-01T11:59:59Z"}
    p = run(j, workers(), {**resumed, "lastCheckpoint": own})
    assert p.status is not None and p.status["progress"]["lastCheckpoint"] == own


def test_a_checkpoint_saved_on_sigterm_lands_from_the_final_report() -> None:
    j = job(status=running_status(progress=LIVE), successPolicy="")
    message = final_message(step=13, checkpoint={"step": 13, "epoch": 1, "age": 0.5})
    p = run(j, [succeeded_worker_0(message), pod("Worker", 1)])
    assert p.status is not None
    assert p.status["progress"]["lastCheckpoint"] == {
        "step": 13, "epoch": 1, "time": "2026-01-01T11:59:58Z",
    }  # fmt: skip
