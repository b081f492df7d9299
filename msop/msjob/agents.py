"""The operator's side of restarts in place (:mod:`.inplace`): its key, what the cluster
supports, and the requests to the pods' agents.

- **The key.** Agents accept only requests signed by the operator's P-256 key
  (ECDSA with ``cryptography``: :mod:`msop.integrations.signature`); each pod carries
  the public key. Every replica of the operator signs with the same key, so a new leader
  (an upgrade, a lost lease) can restart the jobs the old one started: it is kept in the
  Secret ``msop-agent-key`` of the operator's namespace, made by the first replica that
  needs it. Only the operator reads that Secret (its Role in its own namespace); a pod
  can read none.
- **Detection, not a guess from the version.** :func:`detect` asks the API server to
  dry-run a pod with a ``RestartAllContainers`` rule (an API server without the feature
  drops or refuses it), and lists the nodes: every schedulable node must declare
  ``RestartAllContainersOnContainerExits`` (``status.declaredFeatures``), since the
  scheduler places such a pod only on a node that does; where one does not, jobs are
  restarted by recreation and their conditions say why. It runs at start and every few
  minutes (a node joins, a kubelet is downgraded).
- **Requests** go to each pod's IP and agent port, a few at a time, each with a short
  timeout; one that fails is asked again by the next pass (the plan requeues in 1 s).
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import Sequence
from typing import Any

import aiohttp
import structlog
from cachetools import LRUCache

from msop.integrations import signature, wire
from msop.integrations.agent import signed_message
from msop.kube.errors import ApiError, is_already_exists, is_not_found
from msop.kube.objects import JSON
from msop.kube.resources import PODS, Resource
from msop.msjob.inplace import SECURITY_CONTEXT, agent_of
from msop.msjob.plan import AgentRequest

log = structlog.get_logger("msop.msjob.agents")

SECRETS = Resource("", "v1", "secrets", "Secret")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
KEY_SECRET = "msop-agent-key"
FEATURE = "RestartAllContainersOnContainerExits"
TIMEOUT_SECONDS = 3.0
CONCURRENCY = 32


async def load_key(client: Any, namespace: str) -> signature.PrivateKey:
    """The operator's signing key, from its Secret (made if missing). The Secret keeps
    the key's scalar as 64 hex digits."""
    for _ in range(3):
        try:
            secret = await client.get(SECRETS, KEY_SECRET, namespace)
            d = int(base64.b64decode(secret["data"]["key"]).decode(), 16)
            return signature.load_private_key(d)
        except ApiError as e:
            if not is_not_found(e):
                raise
        key = signature.generate_private_key()
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": KEY_SECRET,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/name": "msop", "app.kubernetes.io/part-of": "msop"},
            },
            "data": {"key": _encode(signature.private_scalar(key))},
        }
        try:
            await client.create(SECRETS, body, namespace)
            return key
        except ApiError as e:
            if not is_already_exists(e):
                raise
    raise RuntimeError(f"cannot read or create Secret {namespace}/{KEY_SECRET}")


def _encode(d: int) -> str:
    return base64.b64encode(f"{d:064x}".encode()).decode()


async def own_image(client: Any, namespace: str) -> str:
    """The image of the operator's own container (its pod is named by its hostname)."""
    pod = await client.get(PODS, socket.gethostname(), namespace)
    containers = pod["spec"]["containers"]
    for container in containers:
        if container.get("name") == "manager":
            return str(container["image"])
    return str(containers[0]["image"])


def _probe_pod(image: str) -> JSON:
    rule = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [75]}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "msop-restart-in-place-probe"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "restartPolicy": "Never",
                    "restartPolicyRules": [rule],
                    # Admitted where the "restricted" Pod Security Standard is enforced
                    # (msop's own namespace).
                    "securityContext": SECURITY_CONTEXT,
                }
            ],
        },
    }


async def detect(client: Any, namespace: str, image: str) -> str:
    """Why this cluster cannot restart pods in place ("" if it can)."""
    try:
        made = await client.request(
            "POST", PODS.path(namespace), query={"dryRun": "All"}, body=_probe_pod(image)
        )
    except ApiError as e:
        return f"the API server refused a pod with a RestartAllContainers rule ({e})"
    rules = (made.get("spec") or {}).get("containers", [{}])[0].get("restartPolicyRules") or []
    if not any(r.get("action") == "RestartAllContainers" for r in rules):
        return f"the API server does not keep RestartAllContainers rules (feature {FEATURE} off)"
    nodes = await client.list_all(NODES, transform=_node_features)
    lacking = [
        str(node["metadata"]["name"])
        for node in nodes["items"]
        if not node["spec"].get("unschedulable") and FEATURE not in node["features"]
    ]
    if lacking:
        more = f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""
        return f"node(s) {', '.join(lacking[:3])}{more} do not declare {FEATURE}"
    return ""


def _node_features(node: JSON) -> JSON:
    """What the detection keeps of a node while it lists them (a 1,000-node list is not
    held whole)."""
    return {
        "metadata": {"name": node["metadata"]["name"]},
        "spec": {"unschedulable": bool((node.get("spec") or {}).get("unschedulable"))},
        "features": list((node.get("status") or {}).get("declaredFeatures") or []),
    }


class AgentClient:
    """Sends a plan's :class:`~msop.msjob.plan.AgentRequest` s, signed."""

    def __init__(self, key: signature.PrivateKey) -> None:
        self.key = key
        self.public_key = signature.public_key(key).hex()
        self._signatures: LRUCache[tuple[str, str, int], str] = LRUCache(maxsize=1024)
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(CONCURRENCY)

    def signature(self, job_uid: str, action: str, generation: int) -> str:
        key = (job_uid, action, generation)
        sig = self._signatures.get(key)
        if sig is None:
            message = signed_message(action, job_uid, generation)
            sig = self._signatures[key] = signature.sign(self.key, message).hex()
        return sig

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, job: JSON, requests: Sequence[AgentRequest]) -> bool:
        """Ask every pod; True if every agent answered as asked."""
        if not requests:
            return True
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECONDS),
                connector=aiohttp.TCPConnector(limit=CONCURRENCY, force_close=True),
            )
        uid = str(job["metadata"]["uid"])
        results = await asyncio.gather(*(self._one(uid, r) for r in requests))
        return all(results)

    async def _one(self, uid: str, request: AgentRequest) -> bool:
        pod = request.pod
        name = pod["metadata"]["name"]
        agent = agent_of(pod)
        ip = (pod.get("status") or {}).get("podIP")
        if agent is None or not ip:
            return False
        body = {
            "generation": request.generation,
            "signature": self.signature(uid, request.action, request.generation),
        }
        path = wire.AGENT_RESTART_PATH if request.action == "restart" else wire.AGENT_RELEASE_PATH
        host = f"[{ip}]" if ":" in ip else ip
        assert self._session is not None
        try:
            async with (
                self._slots,
                self._session.post(f"http://{host}:{agent.port}{path}", json=body) as resp,
            ):
                answer = await resp.read()
                if resp.status in (200, 202):
                    log.info(
                        "agent answered", pod=name, action=request.action,
                        generation=request.generation, answer=_short(answer),
                    )  # fmt: skip
                    return True
                log.warning(
                    "agent refused", pod=name, action=request.action, status=resp.status,
                    answer=_short(answer),
                )  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.info("agent unreachable", pod=name, action=request.action, error=str(e))
        return False


def _short(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data[:200].decode(errors="replace")
