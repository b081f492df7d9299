"""Restarts in place, on kwok nodes (docs/concepts/restart-scope.md#restart-in-place).

kwok runs no containers, so the kubelet's part (restarting every container of a pod when
a rule matches) is played by ``testbed.inplace.InPlaceKubelet``; the pods' agents
are the real ones (``msop.integrations.agent``), on the pods' (loopback) IPs, reached by
the operator over HTTP with its signed requests. The API server is real: it accepts the
pods' restart rules with its default feature gates. The real node's tier restarts real
MindSpore this way (tests/e2e/real/test_mindspore.py).

- a killed Worker: the operator asks the other pods' agents to restart theirs, releases
  the barrier once all have, and the job runs again: the same pods (UIDs), no pod created
  or deleted by the operator (audit log), one restart counted, the Restarting condition
  and Events saying "in place";
- a Worker deleted from the running job (a hybrid restart): only it is recreated (a new
  UID, made for the new generation and held at its barrier), the other pods are restarted
  in place by their agents and released with it, and the job runs again with one
  restart counted;
- a Worker whose node goes NotReady (kwok frozen, the node's Ready False): within
  ``--node-lost-after``, not the 300 s of its default toleration, the operator deletes
  it, the Restarting condition names the pod, the node and the sign, and it is recreated
  alone while the others restart in place, as for a deleted one;
- a pod deleted while the job restarts in place (before the release): it is recreated
  alone, within the same restart;
- a restart that does not complete within --restart-in-place-timeout: the same;
- nodes that do not declare the feature: no agent in the pods, and a restart recreates
  them, saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from testbed import LocalCluster
from testbed.inplace import InPlaceKubelet
from tests.e2e.inplace import (
    EVERY_POD,
    FEATURE,
    NAME,
    job,
    recreated_alone,
    restarts,
    start,
    uids,
    when,
)
from tests.e2e.msjobs import (
    apply,
    condition,
    events,
    get,
    job_pods,
    must_condition,
    wait_condition,
    wait_for,
)
from tests.e2e.reliability import operator_calls
from tests.e2e.sessions import OperatorFactory

JSON = dict[str, Any]


def test_a_killed_worker_restarts_every_pod_in_place(
    cluster: LocalCluster, namespace: str, declared: None, start_operator: OperatorFactory,
    kubelet_in_place: InPlaceKubelet,
) -> None:  # fmt: skip
    # The namespace enforces the "restricted" Pod Security Standard: the agent meets it.
    enforce = "pod-security.kubernetes.io/enforce=restricted"
    cluster.kubectl("label", "namespace", namespace, enforce)
    op = start_operator("--agent-image=msop:kwok")
    before = start(cluster, namespace, kubelet_in_place)
    pod = job_pods(cluster, namespace, NAME)[f"{NAME}-worker-0"]
    agent = pod["spec"]["initContainers"][0]
    assert agent["name"] == "msop-agent" and agent["image"] == "msop:kwok"
    # The API server kept the rules (its default feature gates).
    main = pod["spec"]["containers"][0]
    assert main["restartPolicyRules"][0]["action"] == "RestartAllContainers"

    failed_at = time.time()
    kubelet_in_place.fail(f"{NAME}-worker-1", 137)
    job = wait_condition(cluster, namespace, NAME, "Restarting", timeout=30)
    restarting = condition(job, "Restarting")
    assert restarting is not None and restarting["reason"] == "MSJobRestartingInPlace"
    assert f"pod {namespace}/{NAME}-worker-1 exited with code 137" in restarting["message"]

    def again() -> bool:
        now = get(cluster, namespace, "msjob", NAME)
        done = condition(now, "Restarting")
        return bool(
            done
            and done["status"] == "False"
            and must_condition(now, "Running")["status"] == "True"
        )

    wait_for("the job Running again", again, timeout=60,
             details=lambda: op.log_tail() + kubelet_in_place.logs())  # fmt: skip
    # The two healthy pods were restarted by their agents, at the operator's request.
    assert sorted(kubelet_in_place.restarted_by_agent) == [
        f"{NAME}-scheduler-0",
        f"{NAME}-worker-0",
    ]
    assert uids(cluster, namespace) == before
    for verb in ("create", "delete"):
        calls = operator_calls(cluster.audit_log, namespace, verb, "pods")
        late = [(c["objectRef"].get("name"), c["requestReceivedTimestamp"], c["requestURI"])
                for c in calls if when(c) >= failed_at]  # fmt: skip
        assert not late, (verb, failed_at, late)
    stored = get(cluster, namespace, "msjob", NAME)
    assert stored is not None
    assert sum(e.get("restarts", 0) for e in stored["status"]["replicaStatuses"].values()) == 1
    reasons = {(e["type"], e["reason"]) for e in events(cluster, namespace, NAME)}
    assert ("Warning", "MSJobRestartingInPlace") in reasons

    # A second failure is a second restart, in place again.
    kubelet_in_place.fail(f"{NAME}-worker-0", 143)
    wait_for("a second restart counted", lambda: sum(
        e.get("restarts", 0) for e in (get(cluster, namespace, "msjob", NAME) or {})
        .get("status", {}).get("replicaStatuses", {}).values()) == 2, timeout=30)  # fmt: skip
    wait_for("the job Running again", again, timeout=60)
    assert uids(cluster, namespace) == before


def test_a_deleted_worker_is_recreated_alone_and_the_others_restart_in_place(
    cluster: LocalCluster, namespace: str, declared: None, start_operator: OperatorFactory,
    kubelet_in_place: InPlaceKubelet,
) -> None:  # fmt: skip
    op = start_operator("--agent-image=msop:kwok")
    before = start(cluster, namespace, kubelet_in_place)
    lost = f"{NAME}-worker-1"
    deleted_at = time.time()
    cluster.kubectl("delete", "pod", "-n", namespace, lost, "--wait=false")
    restarting = recreated_alone(cluster, namespace, kubelet_in_place, op, before, lost,
                                 deleted_at)  # fmt: skip
    assert f"pod(s) {lost} of the running cluster are gone" in restarting["message"]
    deletes = [c["objectRef"].get("name") for c in operator_calls(
        cluster.audit_log, namespace, "delete", "pods") if when(c) >= deleted_at]  # fmt: skip
    assert deletes == []


def test_a_pod_on_a_node_gone_not_ready_is_recreated_alone_at_once(
    cluster: LocalCluster, namespace: str, declared: None, start_operator: OperatorFactory,
    kubelet_in_place: InPlaceKubelet, node_lost: Callable[[str], Callable[[], None]],
) -> None:  # fmt: skip
    # Not 300 s later (the pods' default toleration of node.kubernetes.io/not-ready).
    op = start_operator("--agent-image=msop:kwok", "--node-lost-after=3s")
    before = start(cluster, namespace, kubelet_in_place)
    lost = f"{NAME}-worker-1"
    node = job_pods(cluster, namespace, NAME)[lost]["spec"]["nodeName"]
    down_at = time.time()
    back = node_lost(node)
    job = wait_condition(cluster, namespace, NAME, "Restarting", timeout=30)
    said = f"pod {namespace}/{lost} on node {node} is lost: node NotReady for "
    assert said in must_condition(job, "Restarting")["message"], job["status"]
    assert time.time() - down_at < 20
    # Its kubelet would confirm the deletion: kwok plays it again (and the node is Ready).
    back()
    recreated_alone(cluster, namespace, kubelet_in_place, op, before, lost, down_at)
    deletes = [c["objectRef"].get("name") for c in operator_calls(
        cluster.audit_log, namespace, "delete", "pods") if when(c) >= down_at]  # fmt: skip
    assert deletes == [lost]


def test_a_pod_deleted_during_the_restart_is_replaced_alone(
    cluster: LocalCluster, namespace: str, declared: None, start_operator: OperatorFactory,
    kubelet_in_place: InPlaceKubelet,
) -> None:  # fmt: skip
    start_operator("--agent-image=msop:kwok", "--restart-in-place-timeout=600s")
    before = start(cluster, namespace, kubelet_in_place)
    # The agents cannot be reached: stop them, so that the restart stays under way.
    kubelet_in_place.stop()
    kubelet_in_place.fail(f"{NAME}-worker-1", 137, restart=False)  # the status alone
    wait_condition(cluster, namespace, NAME, "Restarting", timeout=30)
    cluster.kubectl("delete", "pod", "-n", namespace, f"{NAME}-worker-0", "--wait=false")
    wait_for("worker-0 recreated", lambda: (now := uids(cluster, namespace)).keys() == EVERY_POD
             and now[f"{NAME}-worker-0"] != before[f"{NAME}-worker-0"], timeout=60)  # fmt: skip
    now = uids(cluster, namespace)
    assert {n for n in now if now[n] != before[n]} == {f"{NAME}-worker-0"}
    job = get(cluster, namespace, "msjob", NAME) or {}
    assert must_condition(job, "Restarting")["reason"] == "MSJobRestartingInPlace"
    assert restarts(cluster, namespace) == 1  # nothing ran at the new generation: one restart
    assert "MSJobRestarting" not in {e["reason"] for e in events(cluster, namespace, NAME)}


def test_a_restart_past_its_timeout_recreates_every_pod(
    cluster: LocalCluster, namespace: str, declared: None, start_operator: OperatorFactory,
    kubelet_in_place: InPlaceKubelet,
) -> None:  # fmt: skip
    start_operator("--agent-image=msop:kwok", "--restart-in-place-timeout=3s")
    start(cluster, namespace, kubelet_in_place)
    kubelet_in_place.stop()  # nobody restarts the healthy pods
    kubelet_in_place.fail(f"{NAME}-worker-1", 137, restart=False)

    def recreating() -> str | None:
        # The Event: on kwok the new pods run at once, and Restarting turns False within a
        # poll (its message then keeps the same words).
        said = [e["message"] for e in events(cluster, namespace, NAME)
                if e["reason"] == "MSJobRestarting"]  # fmt: skip
        return said[0] if said else None

    message = wait_for("a recreation", recreating, timeout=30)
    # The flag's 3 s, and the members' grace (spec.restartInPlaceGracePeriodSeconds, 1 s).
    assert "did not complete within 3s and the members' 1s grace (not restarted: " in message
    assert f"{NAME}-scheduler-0" in message and f"{NAME}-worker-0" in message


def test_nodes_without_the_feature_get_pods_without_the_agent(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory,
) -> None:  # fmt: skip
    op = start_operator("--agent-image=msop:kwok")
    apply(cluster, namespace, job())
    pods = wait_for("the job's pods", lambda: len(p := job_pods(cluster, namespace, NAME)) == 3
                    and p, timeout=60)  # fmt: skip
    for pod in pods.values():
        assert "initContainers" not in pod["spec"]
    assert f"do not declare {FEATURE}" in op.log_tail()
