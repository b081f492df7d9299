"""testbed.agents' pure parts: the request head, which pods it serves, and the kubelet's
statuses it shares with testbed.inplace."""

from __future__ import annotations

import pytest

from msop.integrations import wire
from msop.kube.objects import JSON
from msop.msjob.inplace import pods
from testbed.agents import BadRequest, agent_env, parse_head, runs
from testbed.inplace import held_status, restarted_main, restarted_status, started_status


def test_parse_head() -> None:
    head = b"POST /restart?x=1 HTTP/1.1\r\nHost: 127.100.0.5:28090\r\nContent-Length: 12"
    method, path, headers = parse_head(head)
    assert (method, path) == ("POST", "/restart")
    assert headers == {"host": "127.100.0.5:28090", "content-length": "12"}


@pytest.mark.parametrize("head", [b"GET /state", b"GET /state SPDY/3", b"GET / HTTP/1.1\r\nbad"])
def test_parse_head_refuses(head: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_head(head)


def _pod(phase: str = "Running", ip: str = "127.100.0.5", agent: bool = True) -> JSON:
    env = [{"name": wire.ENV_AGENT_PORT, "value": "28090"},
           {"name": wire.ENV_AGENT_GENERATION, "value": "0"}]  # fmt: skip
    init = [{"name": wire.AGENT_CONTAINER, "env": env}] if agent else []
    return {"metadata": {"name": "p", "uid": "u"}, "spec": {"initContainers": init},
            "status": {"phase": phase, "podIP": ip}}  # fmt: skip


def test_which_pods_it_serves() -> None:
    assert agent_env(_pod()) == {wire.ENV_AGENT_PORT: "28090", wire.ENV_AGENT_GENERATION: "0"}
    assert agent_env(_pod(agent=False)) is None
    assert runs(_pod()) and not runs(_pod(phase="Pending")) and not runs(_pod(ip=""))


def test_the_statuses_read_as_the_operator_reads_them() -> None:
    pod = {**_pod(), "status": held_status()}
    assert pods.at_barrier(pod) and pods.restarts_in_place(pod) == 0
    pod["status"] = restarted_status(1, 137, "RestartingAllContainers")
    assert pods.at_barrier(pod) and pods.restarted_for(pod, 1)
    assert (
        pods.failed_in_place(pod, 0)
        == pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    )
    pod["status"] = started_status(1, restarted_main(1, 137, "RestartingAllContainers"))
    assert pods.started_again(pod, 1) and not pods.at_barrier(pod)
    assert pods.main_status(pod)["lastState"]["terminated"]["exitCode"] == 137
