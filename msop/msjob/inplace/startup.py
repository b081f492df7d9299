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
  overrides it); outside a pod, only ``--agent-image`` names it.
- **Set-up problems are the admins'.** What keeps restarts in place off because of the
  operator's own set-up (its key Secret, its pod, its rights) is told to whoever runs
  the operator, once per change: a log line, a Warning Event on the operator's pod, and
  the ``restart-in-place`` check of ``/readyz`` (:class:`SetupProblem`). A job's
  condition says only that restarts in place are off for this operator, and where to
  look (:data:`SETUP_FAILED`), never the operator's internal error.
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
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from msop.integrations import signature
from msop.kube.errors import (
    ApiError,
    is_already_exists,
    is_not_found,
    is_too_many_requests,
    is_unavailable,
)
from msop.kube.objects import JSON, EventType
from msop.kube.resources import NODES, PODS, Resource
from msop.msjob.inplace.client import AgentClient
from msop.msjob.inplace.pods import DEFAULT_PORT, SECURITY_CONTEXT, InPlace

log = structlog.get_logger("msop.msjob.inplace")

SECRETS = Resource("", "v1", "secrets", "Secret")
KEY_SECRET = "msop-agent-key"
FEATURE = "RestartAllContainersOnContainerExits"
TIMEOUT_SECONDS = 3.0
CONCURRENCY = 32

#: What a job's condition says while the operator's own set-up keeps restarts in place
#: off; the reason itself is for the operator's admins (:class:`SetupProblem`).
SETUP_FAILED = (
    "restarts in place are off for this operator: its set-up failed (the operator's log, "
    "its /readyz and the Events of its pod say why)"
)
#: What a job's condition says when the operator runs outside a pod without
#: ``--agent-image`` (a developer's ``msop run``): no image for the agent, no problem.
OUTSIDE_A_POD = (
    "restarts in place are off for this operator: it runs outside a pod and no --agent-image is set"
)
#: The ``/readyz`` check that fails while a set-up problem stands.
READY_CHECK = "restart-in-place"

Record = Callable[[Mapping[str, Any], EventType, str, str], None]
"""Queues an Event about an object: :meth:`msop.controller.events.EventRecorder.event`."""


class SetupProblem:
    """The operator's own set-up problem with restarts in place ("" while there is none),
    told to its admins once per change: an error log line, a Warning Event
    (``RestartInPlaceSetupFailed``) on the operator's pod when it runs in one (a Normal
    ``RestartInPlaceSetUp`` once it is solved), and :meth:`ready`, the ``/readyz`` check
    :data:`READY_CHECK`, False while it stands."""

    def __init__(self, pod: JSON | None = None, record: Record | None = None) -> None:
        self.pod = pod
        """The operator's own pod, which the Events are about (None: outside a pod)."""
        self.record = record
        self.text = ""
        """The problem, in full ("" while there is none)."""

    def update(self, text: str) -> None:
        """The problem now ("" when solved); says so only when it changed."""
        if text == self.text:
            return
        self.text = text
        if text:
            log.error("restarts in place cannot be set up; every job's pods are recreated "
                      "instead", problem=text)  # fmt: skip
            self._event("Warning", "RestartInPlaceSetupFailed",
                        f"Restarts in place are off for every MSJob: {text}")  # fmt: skip
        else:
            log.info("restarts in place are set up")
            self._event("Normal", "RestartInPlaceSetUp", "Restarts in place are set up again")

    def _event(self, type_: EventType, reason: str, message: str) -> None:
        if self.pod is not None and self.record is not None:
            self.record(self.pod, type_, reason, message)

    def ready(self) -> bool:
        """The ``/readyz`` check: no set-up problem stands."""
        return not self.text


def in_a_pod() -> bool:
    """Whether this process runs in a Kubernetes pod (the kubelet sets the variable)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


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


async def own_pod(client: Any, namespace: str) -> JSON:
    """The operator's own pod (named by its hostname). Raises ApiError."""
    pod: JSON = await client.get(PODS, socket.gethostname(), namespace)
    return pod


def image_of(pod: JSON) -> str:
    """The image of the operator's container in its pod. Raises KeyError, IndexError."""
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
    """Detects again whether the cluster can restart in place ("" if it can; else what a
    job's condition says); updates :attr:`problem`. Raises ApiError when the API server
    did not answer (the last answer stands)."""
    problem: SetupProblem
    """The operator's own set-up problem, for its admins."""


def _passes(e: ApiError) -> bool:
    """An API error that says nothing of the set-up: no answer, 5xx, 429."""
    return is_unavailable(e) or e.status >= 500 or is_too_many_requests(e)


async def start(
    client: Any,
    *,
    namespace: str,
    probe_namespace: str,
    image: str = "",
    port: int = DEFAULT_PORT,
    restart_timeout: float = 120.0,
    record: Record | None = None,
    in_pod: bool | None = None,
) -> Started:
    """Load (or make) the signing key in ``namespace``, find the agent's image (``image``,
    else the operator's own), and detect whether the cluster can restart in place by
    dry-running a pod in ``probe_namespace``. ``port`` and ``restart_timeout`` go to
    :class:`~.pods.InPlace` as they are. ``record`` queues the admins' Events (about the
    operator's pod); ``in_pod``: whether the operator runs in a pod (None: :func:`in_a_pod`).

    Raises nothing for what the cluster refuses: the operator runs all the same, and its
    jobs' pods are recreated, the reason in ``in_place.unavailable`` (the set-up's own
    in ``problem``).
    """
    in_pod = in_a_pod() if in_pod is None else in_pod
    setup_error = ""
    key: signature.PrivateKey | None = None
    # Outside a pod with no --agent-image there is nothing to set up: restarts in place
    # are off (OUTSIDE_A_POD), and a key this operator has no right to read is no problem.
    if in_pod or image:
        try:
            key = await load_key(client, namespace)
        except (ApiError, RuntimeError, ValueError) as e:  # ValueError: no key in the Secret
            setup_error = (
                f"msop cannot read or make its signing key Secret {namespace}/{KEY_SECRET}: {e}"
            )
    agents = AgentClient(key) if key is not None else None
    pod: JSON | None = None
    if in_pod and not setup_error:
        try:
            pod = await own_pod(client, namespace)
            image = image or image_of(pod)
        except (ApiError, KeyError, IndexError) as e:
            if not image:
                setup_error = f"the agent's image is unknown (set --agent-image): {e}"
    problem = SetupProblem(pod, record)
    off = SETUP_FAILED if setup_error else "" if image else OUTSIDE_A_POD

    async def check() -> str:
        if off:
            problem.update(setup_error)
            return off
        try:
            why = await detect(client, probe_namespace, image)
        except ApiError as e:  # e.g. no right to list nodes: pods are recreated
            if _passes(e):
                raise
            problem.update(f"cannot tell whether the cluster restarts pods in place: {e}")
            return SETUP_FAILED
        problem.update("")
        return why

    try:
        unavailable = await check()
    except ApiError as e:  # no answer at start: pods are recreated until the next look
        problem.update(f"cannot tell whether the cluster restarts pods in place: {e}")
        unavailable = SETUP_FAILED
    log.info(
        "restarts in place", available=not unavailable, why_not=unavailable or None,
        agent_image=image or None,
    )  # fmt: skip
    in_place = InPlace(
        image=image, public_key=agents.public_key if agents else "", port=port,
        timeout=restart_timeout, unavailable=unavailable,
    )  # fmt: skip
    return Started(in_place, agents, check, problem)
