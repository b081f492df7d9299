"""The operator's side of restarts in place (msop.msjob.inplace): its signed requests to a
real agent process, the signing key's Secret, and what it detects of the cluster (from
an API server played by a small fake: these are units; the kwok and real tiers use the
real one)."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from msop.integrations import signature, wire
from msop.kube.errors import ApiError, ApiUnavailable
from msop.msjob.inplace import startup
from msop.msjob.inplace.client import AgentClient
from msop.msjob.inplace.pods import InPlace
from msop.msjob.plan import AgentRequest
from testbed.paths import REPO
from testbed.ports import free_port

JOB = {"metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"}}


def pod(port: int, generation: int = 0) -> dict[str, Any]:
    env = [
        {"name": wire.ENV_AGENT_PORT, "value": str(port)},
        {"name": wire.ENV_AGENT_GENERATION, "value": str(generation)},
    ]
    return {
        "metadata": {"name": "j-worker-0"},
        "spec": {"initContainers": [{"name": "msop-agent", "env": env}]},
        "status": {"podIP": "127.0.0.1"},
    }


@pytest.fixture
def running_agent(tmp_path: Path) -> Any:
    """A real agent serving on loopback for the job, and the operator's key."""
    key = signature.generate_private_key()
    port = free_port()
    env = {
        **os.environ, "PYTHONPATH": str(REPO), wire.ENV_AGENT_PORT: str(port),
        wire.ENV_AGENT_JOB: "job-uid", wire.ENV_AGENT_KEY: signature.public_key(key).hex(),
        wire.ENV_AGENT_GENERATION: "0", wire.ENV_AGENT_DIR: str(tmp_path),
    }  # fmt: skip
    run = [sys.executable, "-m", "msop.integrations.agent"]
    subprocess.run([*run, "barrier"], env=env, check=True, timeout=30)  # the first start
    proc = subprocess.Popen([*run, "serve", "--host", "127.0.0.1"], env=env)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    yield key, port, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_signed_restart_makes_the_agent_restart_its_pod(running_agent: Any) -> None:
    key, port, proc = running_agent
    client = AgentClient(key)

    async def go() -> bool:
        try:
            return await client.send(JOB, [AgentRequest(pod(port), "restart", 1)])
        finally:
            await client.close()

    assert asyncio.run(go())
    assert proc.wait(timeout=20) == wire.AGENT_RESTART_EXIT_CODE


def test_a_release_and_an_old_generation_are_answered(running_agent: Any) -> None:
    key, port, proc = running_agent
    client = AgentClient(key)

    async def go() -> list[bool]:
        try:
            return [
                await client.send(JOB, [AgentRequest(pod(port), "release", 0)]),
                await client.send(JOB, [AgentRequest(pod(port), "restart", 0)]),  # has it
            ]
        finally:
            await client.close()

    assert asyncio.run(go()) == [True, True]
    assert proc.poll() is None  # nothing restarted


def test_an_accepted_request_is_not_sent_again_to_the_same_pod(running_agent: Any) -> None:
    # What the agent did is in the pod's emptyDir: a pass that runs before the pod's
    # status shows it does not ask again (at 1,000 pods every pass asked every pod).
    key, port, proc = running_agent
    client = AgentClient(key)
    first = {**pod(port), "metadata": {"name": "j-worker-0", "uid": "pod-uid"}}
    again = {**pod(port), "metadata": {"name": "j-worker-0", "uid": "new-uid"}}

    async def go() -> list[bool]:
        try:
            accepted = await client.send(JOB, [AgentRequest(first, "release", 0)])
            proc.kill()
            proc.wait()
            return [
                accepted,
                await client.send(JOB, [AgentRequest(first, "release", 0)]),  # not sent
                await client.send(JOB, [AgentRequest(first, "release", 1)]),  # another
                await client.send(JOB, [AgentRequest(again, "release", 0)]),  # another pod
            ]
        finally:
            await client.close()

    assert asyncio.run(go()) == [True, True, False, False]


def test_another_operators_key_is_refused_and_an_unreachable_agent_is_false(
    running_agent: Any,
) -> None:
    _, port, proc = running_agent
    stranger = AgentClient(signature.generate_private_key())

    async def go() -> list[bool]:
        try:
            return [
                await stranger.send(JOB, [AgentRequest(pod(port), "restart", 5)]),
                await stranger.send(JOB, [AgentRequest(pod(free_port()), "restart", 5)]),
                await stranger.send(JOB, [AgentRequest({**pod(port), "status": {}}, "restart", 5)]),
            ]
        finally:
            await stranger.close()

    assert asyncio.run(go()) == [False, False, False]
    assert proc.poll() is None


def test_one_signature_per_job_action_and_generation() -> None:
    client = AgentClient(signature.generate_private_key())
    first = client.signature("u", "restart", 1)
    assert client.signature("u", "restart", 1) == first
    message = b"msop-agent/1 restart u 1"
    assert signature.verify(bytes.fromhex(client.public_key), message, bytes.fromhex(first))


# --- the key and the detection, against a fake API server -----------------------------------


class FakeAPI:
    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.calls: list[tuple[Any, ...]] = []

    async def get(self, res: Any, name: str, namespace: str | None = None) -> Any:
        self.calls.append(("get", name))
        answer = self.answers["get"].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def create(self, res: Any, body: Any, namespace: str | None = None) -> Any:
        self.calls.append(("create", body["metadata"]["name"]))
        answer = self.answers["create"].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        self.calls.append((method, path, kw.get("query")))
        answer = self.answers["request"]
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def list_all(self, res: Any, *, transform: Any = None) -> dict[str, Any]:
        nodes: list[Any] | Exception = self.answers["nodes"]  # as KubeClient.list_all: a List
        if isinstance(nodes, Exception):
            raise nodes
        return {"kind": "NodeList", "items": [transform(n) if transform else n for n in nodes]}


NOT_FOUND = ApiError(404, "NotFound", "not found")
TAKEN = ApiError(409, "AlreadyExists", "exists")


def test_the_key_is_made_once_and_then_read() -> None:
    api = FakeAPI(get=[NOT_FOUND], create=[{}])
    made = asyncio.run(startup.load_key(api, "msop-system"))
    assert api.calls == [("get", "msop-agent-key"), ("create", "msop-agent-key")]
    d = signature.private_scalar(made)
    stored = {"data": {"key": base64.b64encode(f"{d:064x}".encode()).decode()}}
    again = FakeAPI(get=[stored])
    assert signature.private_scalar(asyncio.run(startup.load_key(again, "msop-system"))) == d


def test_two_replicas_making_the_key_agree_on_the_first() -> None:
    first = signature.generate_private_key()
    d = signature.private_scalar(first)
    stored = {"data": {"key": base64.b64encode(f"{d:064x}".encode()).decode()}}
    api = FakeAPI(get=[NOT_FOUND, stored], create=[TAKEN])
    assert signature.private_scalar(asyncio.run(startup.load_key(api, "msop-system"))) == d


RULE = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [75]}}
KEPT = {"spec": {"containers": [{"name": "probe", "restartPolicyRules": [RULE]}]}}


def node(name: str, *features: str, unschedulable: bool = False) -> Any:
    return {"metadata": {"name": name}, "spec": {"unschedulable": unschedulable},
            "status": {"declaredFeatures": list(features)}}  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "nodes", "why"),
    [
        (KEPT, [node("a", startup.FEATURE), node("old", unschedulable=True)], ""),
        ({"spec": {"containers": [{"name": "probe"}]}}, [],
         "the API server does not keep RestartAllContainers rules"),
        (ApiError(422, "Invalid", "Unsupported value: RestartAllContainers"), [],
         "the API server refused a pod with a RestartAllContainers rule"),
        (KEPT, [node("a", startup.FEATURE), *(node(f"n{i}") for i in range(5))],
         "node(s) n0, n1, n2 and 2 more do not declare RestartAllContainersOnContainerExits"),
    ],
    ids=["supported", "dropped", "refused", "old-kubelets"],
)  # fmt: skip
def test_detection(answer: Any, nodes: list[Any], why: str) -> None:
    api = FakeAPI(request=answer, nodes=nodes)
    found = asyncio.run(startup.detect(api, "ns", "msop:1"))
    assert found.startswith(why) if why else found == "", found
    method, path, query = api.calls[0]
    assert (method, path, query) == ("POST", "/api/v1/namespaces/ns/pods", {"dryRun": "All"})


async def _answer(check: Awaitable[str]) -> str:
    return await check


def test_start_with_a_key_an_image_and_a_cluster_that_restarts_in_place() -> None:
    key = signature.generate_private_key()
    d = signature.private_scalar(key)
    stored = {"data": {"key": base64.b64encode(f"{d:064x}".encode()).decode()}}
    api = FakeAPI(get=[stored], request=KEPT, nodes=[node("a", startup.FEATURE)])
    started = asyncio.run(
        startup.start(api, namespace="msop-system", probe_namespace="ns", image="msop:1",
                      port=1234, restart_timeout=9.0)
    )  # fmt: skip
    assert started.client is not None
    assert started.in_place == InPlace(
        image="msop:1", public_key=signature.public_key(key).hex(), port=1234, timeout=9.0,
        unavailable="",
    )  # fmt: skip
    assert api.calls[0] == ("get", "msop-agent-key")
    assert api.calls[1] == ("POST", "/api/v1/namespaces/ns/pods", {"dryRun": "All"})
    assert asyncio.run(_answer(started.check())) == ""


def test_start_without_a_key_says_why_and_has_no_client() -> None:
    forbidden = ApiError(403, "Forbidden", "secrets is forbidden")
    api = FakeAPI(get=[forbidden], request=KEPT, nodes=[])
    started = asyncio.run(
        startup.start(api, namespace="msop-system", probe_namespace="ns", in_pod=True)
    )
    assert started.client is None
    assert started.in_place.public_key == ""
    assert started.problem.text.startswith(
        "msop cannot read or make its signing key Secret msop-system/msop-agent-key"
    )
    assert started.in_place.unavailable == startup.SETUP_FAILED  # the jobs: where to look
    assert asyncio.run(_answer(started.check())) == started.in_place.unavailable
    assert api.calls == [("get", "msop-agent-key")]  # no image lookup, no detection


def test_start_with_a_secret_that_holds_no_key_says_why_and_goes_on() -> None:
    # A Secret edited by hand: the operator starts, without restarts in place.
    broken = {"data": {"key": base64.b64encode(b"not a key").decode()}}
    api = FakeAPI(get=[broken], request=KEPT, nodes=[])
    started = asyncio.run(
        startup.start(api, namespace="msop-system", probe_namespace="ns", in_pod=True)
    )
    assert started.client is None
    assert started.problem.text.startswith(
        "msop cannot read or make its signing key Secret msop-system/msop-agent-key"
    )
    assert started.in_place.unavailable == startup.SETUP_FAILED


def _stored_key() -> dict[str, Any]:
    d = signature.private_scalar(signature.generate_private_key())
    return {"data": {"key": base64.b64encode(f"{d:064x}".encode()).decode()}}


OWN_POD = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "msop-7d9-x", "namespace": "msop-system", "uid": "u"},
           "spec": {"containers": [{"name": "manager", "image": "msop:2"}]}}  # fmt: skip


def test_a_set_up_problem_is_the_admins_not_in_every_jobs_condition() -> None:
    # The operator's pod cannot be read as its hostname: no image for the agent.
    missing = ApiError(404, "NotFound", 'pods "vm" not found')
    events: list[tuple[Any, ...]] = []
    api = FakeAPI(get=[_stored_key(), missing], request=KEPT, nodes=[])
    started = asyncio.run(
        startup.start(api, namespace="msop-system", probe_namespace="ns", in_pod=True,
                      record=lambda *e: events.append(e))
    )  # fmt: skip
    why = started.in_place.unavailable
    assert why == startup.SETUP_FAILED
    assert "vm" not in why and "404" not in why and "--agent-image" not in why
    assert "the operator's log" in why and "/readyz" in why
    assert started.problem.text == f"the agent's image is unknown (set --agent-image): {missing}"
    assert not started.problem.ready()
    assert events == []  # no pod of its own to put the Event on: the log and /readyz say it


def test_a_set_up_problem_is_one_event_on_the_operators_pod_until_it_is_solved() -> None:
    forbidden = ApiError(403, "Forbidden", "nodes is forbidden")
    events: list[tuple[Any, ...]] = []
    api = FakeAPI(get=[_stored_key(), OWN_POD], request=KEPT, nodes=forbidden)
    started = asyncio.run(
        startup.start(api, namespace="msop-system", probe_namespace="ns", in_pod=True,
                      record=lambda *e: events.append(e))
    )  # fmt: skip
    assert started.in_place.image == "msop:2"
    assert started.in_place.unavailable == startup.SETUP_FAILED
    problem = f"cannot tell whether the cluster restarts pods in place: {forbidden}"
    assert events == [(OWN_POD, "Warning", "RestartInPlaceSetupFailed",
                       f"Restarts in place are off for every MSJob: {problem}")]  # fmt: skip
    assert asyncio.run(_answer(started.check())) == startup.SETUP_FAILED
    assert len(events) == 1 and not started.problem.ready()  # the same problem: said once
    # No answer at a later look says nothing of the set-up: the last verdict stands.
    api.answers["nodes"] = ApiUnavailable("connection refused")
    with pytest.raises(ApiUnavailable):
        asyncio.run(_answer(started.check()))
    assert len(events) == 1 and started.problem.text == problem
    # The admin grants the right: solved, said once.
    api.answers["nodes"] = [node("a", startup.FEATURE)]
    assert asyncio.run(_answer(started.check())) == ""
    assert events[1:] == [(OWN_POD, "Normal", "RestartInPlaceSetUp",
                           "Restarts in place are set up again")]  # fmt: skip
    assert started.problem.ready()


def test_outside_a_pod_without_an_agent_image_restarts_in_place_are_off_not_broken() -> None:
    # Its credentials may not read Secrets at all (a developer's or a test's msop run):
    # with nothing to set up, it does not ask, and it stays ready.
    refused = ApiError(403, "Forbidden", 'secrets "msop-agent-key" is forbidden')
    api = FakeAPI(get=[refused], request=KEPT, nodes=[node("a", startup.FEATURE)])
    started = asyncio.run(
        startup.start(api, namespace="msop-system", probe_namespace="ns", in_pod=False)
    )
    assert started.in_place.unavailable == startup.OUTSIDE_A_POD
    assert started.problem.ready() and started.problem.text == ""
    assert api.calls == []  # neither the key nor its own pod is looked for


def test_the_operator_serves_the_set_up_problem_on_readyz_and_its_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from msop.cli.flags import parse_args
    from msop.cli.run import OPERATOR_EVENT_COMPONENT, _restart_in_place
    from msop.controller.manager import Manager

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # as in a pod
    forbidden = ApiError(403, "Forbidden", "nodes is forbidden")
    api = FakeAPI(get=[_stored_key(), OWN_POD], request=KEPT, nodes=forbidden)
    manager = Manager(api, metrics_bind_address="0", health_probe_bind_address="0")  # type: ignore[arg-type]
    args = parse_args(["run", "--leader-election-namespace", "msop-system"])
    in_place, _, recheck = asyncio.run(_restart_in_place(api, args, manager))
    assert in_place is not None and in_place.unavailable == startup.SETUP_FAILED
    assert manager.readyz.run()[startup.READY_CHECK] is False
    recorder = manager.event_recorder(OPERATOR_EVENT_COMPONENT)
    assert recorder.pending() == 1  # the Warning on its pod, written once the manager runs
    api.answers["nodes"] = [node("a", startup.FEATURE)]
    assert recheck is not None and asyncio.run(_answer(recheck())) == ""
    assert manager.readyz.run()[startup.READY_CHECK] is True
