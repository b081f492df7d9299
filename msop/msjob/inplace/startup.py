"""Start-up of restarts in place: the operator's key, the agent's image, and what the
cluster supports (:func:`start`, called by ``msop run --restart-in-place``).

- **The key.** Agents accept only requests signed by the operator's P-256 key
  (ECDSA with ``cryptography``: :mod:`msop.integrations.signature`); each pod carries
  the public key. Every replica of the operator signs with the same key, so a new leader
  (an upgrade, a lost lease) can restart the jobs the old one started: it is kept in the
  Secret ``msop-agent-key`` of the operator's namespace, made by the first replica that
  needs it. Only the operator reads that Secret (its Role in its own namespace); a pod
  can read none.
- **The image.** The agent runs from the operator's own image (``--agent-image``
  overrides it).
- **Detection, not a guess from the version.** :func:`detect` asks the API server to
  dry-run a pod with a ``RestartAllContainers`` rule (an API server without the feature
  drops or refuses it), and lists the nodes: every schedulable node must declare
  ``RestartAllContainersOnContainerExits`` (``status.declaredFeatures``), since the
  scheduler places such a pod only on a node that does; where one does not, jobs are
  restarted by recreation and their conditions say why. It runs at start and every few
  minutes (a node joins, a kubelet is downgraded).
"""

from __future__ import annotations

import base64
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from msop.integrations import signature
from msop.kube.errors import ApiError, is_already_exists, is_not_found
from msop.kube.objects import JSON
from msop.kube.resources import PODS, Resource
from msop.msjob.inplace.client import AgentClient
from msop.msjob.inplace.pods import DEFAULT_PORT, SECURITY_CONTEXT, InPlace

log = structlog.get_logger("msop.msjob.inplace")

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


@dataclass(frozen=True)
class Started:
    """What restarting jobs in place needs, once started."""

    in_place: InPlace
    """The settings new pods are built with (``unavailable`` says why not, if not)."""
    client: AgentClient | None
    """The signed client of the agents; None without a key."""
    check: Callable[[], Awaitable[str]]
    """Detects again whether the cluster can restart in place ("" if it can)."""


async def start(
    client: Any,
    *,
    namespace: str,
    probe_namespace: str,
    image: str = "",
    port: int = DEFAULT_PORT,
    restart_timeout: float = 120.0,
) -> Started:
    """Load (or make) the signing key in ``namespace``, find the agent's image (``image``,
    else the operator's own), and detect whether the cluster can restart in place by
    dry-running a pod in ``probe_namespace``. ``port`` and ``restart_timeout`` go to
    :class:`~.pods.InPlace` as they are.

    Raises nothing for what the cluster refuses: the operator runs all the same, and its
    jobs' pods are recreated, the reason in ``in_place.unavailable``.
    """
    why = ""
    key: signature.PrivateKey | None = None
    try:
        key = await load_key(client, namespace)
    except (ApiError, RuntimeError, ValueError) as e:  # ValueError: not a key in the Secret
        why = f"msop cannot read or make its signing key Secret {namespace}/{KEY_SECRET}: {e}"
    agents = AgentClient(key) if key is not None else None
    if not image and not why:
        try:
            image = await own_image(client, namespace)
        except (ApiError, KeyError, IndexError) as e:
            why = f"the agent's image is unknown (set --agent-image): {e}"

    async def check() -> str:
        if why:
            return why
        try:
            return await detect(client, probe_namespace, image)
        except ApiError as e:  # e.g. no right to list nodes: pods are recreated
            return f"cannot tell whether the cluster restarts pods in place: {e}"

    unavailable = await check()
    log.info(
        "restarts in place", available=not unavailable, why_not=unavailable or None,
        agent_image=image or None,
    )  # fmt: skip
    in_place = InPlace(
        image=image, public_key=agents.public_key if agents else "", port=port,
        timeout=restart_timeout, unavailable=unavailable,
    )  # fmt: skip
    return Started(in_place, agents, check)
