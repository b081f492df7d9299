"""The contract between msop and what runs in its pods: environment names, wire limits, and
the exact message the restart agents' requests are signed over (:func:`signed_message`).

One module, ``typing`` only, so that the operator's API layer (``msop.api.constants``,
``msop.api.report``) can read the contract without loading the pod-side code (the
progress reporter's sockets and threads, the msrun launcher's process handling, the restart
agent's HTTP server), and the pod-side code reads the same values. Values change only with
the wire version.
"""

from __future__ import annotations

from typing import Final

# --- progress reports (msop.integrations.reporter, read by the operator's poller) --------
WIRE_VERSION: Final = 1
"""Version of the report's JSON (field ``v``)."""
PROGRESS_PATH: Final = "/progress"
"""The reporter's HTTP path."""
ENV_PROGRESS_PORT: Final = "MSOP_PROGRESS_PORT"
"""TCP port to serve on (0: any free one). Unset: the reporter is disabled."""
ENV_POD_NAME: Final = "MSOP_POD_NAME"
"""The pod's name (downward API): a report names the pod it came from."""
ENV_POD_UID: Final = "MSOP_POD_UID"
"""The pod's uid (downward API)."""
ENV_PROGRESS_FILE: Final = "MSOP_PROGRESS_FILE"
"""Where the final snapshot is written (the termination message path)."""
MAX_METRICS: Final = 8
"""Most metrics a report carries."""
MAX_METRIC_NAME: Final = 63
"""Longest metric name (characters)."""
MAX_METRIC_VALUE: Final = 64
"""Longest metric value, as text."""
MAX_CHECKPOINT_PATH: Final = 256
"""Longest checkpoint path a report carries (characters); a longer one is cut."""
MAX_FINAL_BYTES: Final = 4096
"""The kubelet keeps at most 4096 bytes of a termination message; the file stays under it."""

# --- the msrun launcher (msop.integrations.msrun) ------------------------------------------
ENV_WORKER_NUM: Final = "MS_WORKER_NUM"
ENV_LOCAL_WORKER: Final = "MS_LOCAL_WORKER"
ENV_NODE_RANK: Final = "MS_NODE_RANK"
ENV_SCHED_HOST: Final = "MS_SCHED_HOST"
ENV_SCHED_PORT: Final = "MS_SCHED_PORT"
ENV_TERMINATION_FILE: Final = "MSOP_TERMINATION_FILE"
"""Where the launcher writes its one-line verdict (msop sets it to the container's
terminationMessagePath); the Kubernetes default when unset."""
ENV_MSRUN_GRACE: Final = "MSOP_MSRUN_GRACE"
"""Seconds the launcher gives msrun's processes between SIGTERM and SIGKILL."""
ENV_MSRUN: Final = "MSOP_MSRUN"
"""The msrun command, if not ``python -m mindspore.parallel.cluster.run`` (what the
``msrun`` console script runs), split like a shell would."""

# --- the restart agent (msop.integrations.agent: the msop-agent sidecar and msop-barrier) ---
ENV_AGENT_PORT: Final = "MSOP_AGENT_PORT"
"""TCP port the agent serves on, at the pod's IP."""
ENV_AGENT_JOB: Final = "MSOP_AGENT_JOB"
"""The job's UID: every signed request names it, so a request for one job is refused by
the pods of every other."""
ENV_AGENT_KEY: Final = "MSOP_AGENT_KEY"
"""The operator's public key: hex of the 65-byte uncompressed P-256 point (130 characters)."""
ENV_AGENT_GENERATION: Final = "MSOP_AGENT_GENERATION"
"""The job's restart generation when the pod was created: a non-negative integer."""
ENV_AGENT_HOLD: Final = "MSOP_AGENT_HOLD"
"""``1``: the pod was made to replace a lost member during a restart under way (a hybrid
restart), so its barrier waits for the release of ``MSOP_AGENT_GENERATION`` on the pod's
first start too, with the restarted pods; unset or anything else: the first start passes."""
ENV_AGENT_STOP_GRACE: Final = "MSOP_AGENT_STOP_GRACE"
"""Seconds the training's run has, after its SIGTERM, to end when msop restarts the pod
in place (the keeper then SIGKILLs it): the job's ``spec.restartInPlaceGracePeriodSeconds``.
Unset (a pod made by an older msop): :data:`DEFAULT_STOP_GRACE`."""
DEFAULT_STOP_GRACE: Final = 1.0
"""The stop grace of a restart in place where the job sets none. The other members of a
job restarting in place are usually stuck on a lost peer and cannot save; one second lets
a script flush what it holds."""
KUBELET_RESTART_GRACE: Final = 2.0
"""The grace the kubelet gives each container when a rule restarts every container of a
pod (the least it gives any kill): the agent waits for the run to end before it exits only
for a longer stop grace."""
ENV_AGENT_DIR: Final = "MSOP_AGENT_DIR"
"""The emptyDir both agent containers mount: ``state.json`` and ``released`` live there."""
AGENT_RESTART_EXIT_CODE: Final = 75
"""The sidecar's exit code that its ``RestartAllContainers`` rule matches: it asks the
kubelet to restart every container of the pod in place. Nothing else in the agent uses it
(a bad configuration exits 2)."""
AGENT_VERSION: Final = 1
"""Version of the agent's protocol: field ``v`` of ``GET /state``, and the ``/1`` of the
signed message.

A request is signed (ECDSA P-256, SHA-256, by the operator's key) over exactly the bytes
``b"msop-agent/1 " + action + b" " + job_uid + b" " + str(generation)``, ASCII, where
``action`` is ``restart`` or ``release``, ``job_uid`` the value of ``MSOP_AGENT_JOB`` and
``generation`` the request's decimal generation; e.g.
``msop-agent/1 restart 0f4c7b1e-8d2a-4c55-9d1e-3b6a2f0c9e11 3``. The body of a ``POST`` is
``{"generation": 3, "signature": "<r || s, 64 bytes as 128 hex digits>"}``.
:func:`signed_message` builds the message."""
AGENT_STATE_PATH: Final = "/state"
"""``GET``: ``{"v", "job", "generation", "released", "waiting"}``."""
AGENT_RESTART_PATH: Final = "/restart"
"""``POST``: move the pod to a newer generation by restarting all its containers."""
AGENT_RELEASE_PATH: Final = "/release"
"""``POST``: let the pod's barrier pass for every generation up to the one given."""
AGENT_RESTART: Final = "restart"
"""The action of ``POST /restart`` in the signed message."""
AGENT_RELEASE: Final = "release"
"""The action of ``POST /release`` in the signed message."""
AGENT_MAX_BODY: Final = 4096
"""Bytes of a request body the agent reads; more is refused with 413."""
AGENT_SIGNATURE_HEX: Final = 128
"""The ``signature`` of a request body: ``r || s``, 64 bytes as hex digits."""
MAX_GENERATION: Final = 2**63 - 1
"""The highest restart generation."""
MAX_JOB_UID: Final = 128
"""The longest job UID the signed message takes."""


def valid_job_uid(job_uid: object) -> bool:
    """A job UID the signed message can carry: 1 to 128 printable ASCII characters, no
    space."""
    return (
        isinstance(job_uid, str)
        and 0 < len(job_uid) <= MAX_JOB_UID
        and job_uid.isascii()
        and job_uid.isprintable()
        and " " not in job_uid
    )


def valid_generation(generation: object) -> bool:
    """An integer (not a bool) in [0, :data:`MAX_GENERATION`]."""
    return (
        isinstance(generation, int)
        and not isinstance(generation, bool)
        and 0 <= generation <= MAX_GENERATION
    )


def signed_message(action: str, job_uid: str, generation: int) -> bytes:
    """The exact bytes msop signs for a request: see :data:`AGENT_VERSION`.

    ValueError for an unknown action, a job UID that is empty, not printable ASCII or holds
    a space, or a generation that is not an integer in [0, 2**63-1].
    """
    if action not in (AGENT_RESTART, AGENT_RELEASE):
        raise ValueError(f"unknown action {action!r}")
    if not valid_job_uid(job_uid):
        raise ValueError(f"not a job UID: {job_uid!r}")
    if not valid_generation(generation):
        raise ValueError(f"not a generation: {generation!r}")
    return f"msop-agent/{AGENT_VERSION} {action} {job_uid} {generation}".encode("ascii")


# --- the kept run (msop.integrations.keeper, printed by the agent, read by msop logs) ------
AGENT_CONTAINER: Final = "msop-agent"
"""The sidecar's container name: its log holds the kept run."""
KEEPER_DIR: Final = "runs"
"""The directory of the agent's emptyDir where the keeper keeps the training container's
run (mounted there with this ``subPath``)."""
KEPT_RUN_BEGIN: Final = "----- msop: the stopped run of container "
"""How the agent's log line that opens a kept run begins; the rest of the line names the
container, when the run started and how much of it was kept."""
KEPT_RUN_END: Final = "----- msop: end of the stopped run of container "
"""How the line that closes it begins."""
