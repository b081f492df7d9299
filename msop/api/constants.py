"""Names and values of the MSJob API: group/version/kind, labels, pod environment, enums.

Everything here is part of a compatibility contract (with the Go ms-operator and with Kubeflow's
training-operator labels), so values only change with a new API version.
"""

from __future__ import annotations

from typing import Final

from msop.integrations import wire as _wire

# --- resource identity -------------------------------------------------------------------------
GROUP: Final = "mindspore.gitee.com"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "MSJob"
PLURAL: Final = "msjobs"
#: ``spec.managedBy`` (or ``spec.runPolicy.managedBy``) values: msop itself ("" or absent
#: means msop too), and Kueue's MultiKueue, which dispatches the job to a worker cluster
#: and mirrors its status back (msop on this cluster only queues its Workload).
MANAGED_BY_MSOP: Final = "mindspore.gitee.com/msop"
MANAGED_BY_MULTIKUEUE: Final = "kueue.x-k8s.io/multikueue"
SINGULAR: Final = "msjob"
SHORT_NAME: Final = "msj"
CATEGORIES: Final[tuple[str, ...]] = ("kubeflow", "mindspore")
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# --- replica types (canonical spelling; input keys may use any case) ---------------------------
SCHEDULER: Final = "Scheduler"
PS: Final = "PS"
WORKER: Final = "Worker"
REPLICA_TYPES: Final[tuple[str, ...]] = (SCHEDULER, PS, WORKER)
MAX_SCHEDULER_REPLICAS: Final = 1

# --- the container and port the environment contract is about ----------------------------------
DEFAULT_CONTAINER_NAME: Final = "mindspore"
DEFAULT_PORT_NAME: Final = "msjob-port"
DEFAULT_PORT: Final = 2222

# --- labels on pods and services -----------------------------------------------------------------
LABEL_JOB_NAME: Final = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"
LABEL_OPERATOR_NAME: Final = "training.kubeflow.org/operator-name"
OPERATOR_NAME: Final = "msjob-controller"
#: The shard of the job a pod or Service belongs to (``msop run --shards N``, N > 1): set at
#: creation, so that each replica watches only the children of its shards. Absent without
#: shards (``--shards 1`` writes the same objects as before shards existed).
LABEL_SHARD: Final = "msop.mindspore.gitee.com/shard"
# ms-operator's own labels, kept so that existing selectors keep matching: its pods and
# Services carry all four, it lists a job's pods and Services by group-name, job-name and
# the two training.kubeflow.org ones above, and its Scheduler Service selects all eight.
LEGACY_LABEL_REPLICA_TYPE: Final = "replica-type"
LEGACY_LABEL_REPLICA_INDEX: Final = "replica-index"
LEGACY_LABEL_GROUP_NAME: Final = "group-name"
LEGACY_LABEL_JOB_NAME: Final = "job-name"

# --- pod environment (ms-operator contract) ------------------------------------------------------
ENV_ROLE: Final = "MS_ROLE"
ENV_SCHED_HOST: Final = "MS_SCHED_HOST"
ENV_SCHED_PORT: Final = "MS_SCHED_PORT"
ENV_WORKER_NUM: Final = "MS_WORKER_NUM"
ENV_SERVER_NUM: Final = "MS_SERVER_NUM"
ENV_NODE_ID: Final = "MS_NODE_ID"

# msrun jobs (spec.msrun): what msrun needs besides MS_SCHED_HOST/PORT and MS_WORKER_NUM (all
# workers of the job), with the names of Huawei's Ascend operator; the launcher reads them.
ENV_NODE_RANK: Final = _wire.ENV_NODE_RANK
ENV_LOCAL_WORKER: Final = _wire.ENV_LOCAL_WORKER
ENV_TERMINATION_FILE: Final = _wire.ENV_TERMINATION_FILE
DEFAULT_MSRUN_MASTER_PORT: Final = 8118
DEFAULT_RESTART_IN_PLACE_GRACE: Final = 1
"""``spec.restartInPlaceGracePeriodSeconds`` when unset."""
MAX_RESTART_IN_PLACE_GRACE: Final = 3600
"""The most ``spec.restartInPlaceGracePeriodSeconds`` may say."""
# Device resources that count the local workers of an msrun pod when spec.msrun.localWorkers
# is unset: one worker per device of the mindspore container's limits.
ACCELERATOR_RESOURCE_PREFIXES: Final[tuple[str, ...]] = ("huawei.com/Ascend",)
ACCELERATOR_RESOURCES: Final[tuple[str, ...]] = ("nvidia.com/gpu", "amd.com/gpu")

# Training progress (docs/concepts/progress.md): what the operator injects into the
# ``mindspore`` container of Worker 0 so that msop.integrations reporters serve progress.
# The names are the pods' contract (msop.integrations.wire, typing only).
ENV_PROGRESS_PORT: Final = _wire.ENV_PROGRESS_PORT
ENV_POD_NAME: Final = _wire.ENV_POD_NAME
ENV_POD_UID: Final = _wire.ENV_POD_UID
ENV_PROGRESS_FILE: Final = _wire.ENV_PROGRESS_FILE
DEFAULT_PROGRESS_PORT: Final = 28080
DEFAULT_TERMINATION_MESSAGE_PATH: Final = "/dev/termination-log"
ROLE_BY_TYPE: Final[dict[str, str]] = {
    SCHEDULER: "MS_SCHED",
    PS: "MS_PSERVER",
    WORKER: "MS_WORKER",
}

# --- status conditions (Kubeflow JobConditionType) -----------------------------------------------
CREATED: Final = "Created"
RUNNING: Final = "Running"
RESTARTING: Final = "Restarting"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
SUSPENDED: Final = "Suspended"
# The API server refused to create a pod or Service (quota, admission, ...): reason and
# message are the API's. Removed again once creates succeed (like a Deployment's).
REPLICA_FAILURE: Final = "ReplicaFailure"
# With gang scheduling: the job's gang waits for its batch scheduler (Volcano) to admit
# and place it; False once placed (msop.msjob.gang).
QUEUED: Final = "Queued"
CONDITION_TYPES: Final[tuple[str, ...]] = (
    CREATED,
    RUNNING,
    RESTARTING,
    SUCCEEDED,
    FAILED,
    SUSPENDED,
    REPLICA_FAILURE,
    QUEUED,
)
# Condition status values (core/v1 ConditionStatus).
CONDITION_TRUE: Final = "True"
CONDITION_FALSE: Final = "False"
CONDITION_UNKNOWN: Final = "Unknown"
#: ``Restarting``'s reason while a running cluster restarts with its new size (a scale),
#: and once that restart is over (status False): neither is a failure.
REASON_RESIZING: Final = "MSJobResizing"
REASON_RESIZED: Final = "MSJobResized"

# --- replica restart policies --------------------------------------------------------------------
ALWAYS: Final = "Always"
ON_FAILURE: Final = "OnFailure"
NEVER: Final = "Never"
# Restart on retryable exit codes (128-255, i.e. killed by a signal); 1-127 are permanent.
EXIT_CODE: Final = "ExitCode"
RESTART_POLICIES: Final[tuple[str, ...]] = (ALWAYS, ON_FAILURE, NEVER, EXIT_CODE)
DEFAULT_RESTART_POLICY: Final = NEVER

# --- spec.restartScope ---------------------------------------------------------------------------
# What a retryable failure restarts: the failed pod alone (ms-operator), or every pod of the job
# (a MindSpore cluster cannot take back one restarted member). The default depends on the job's
# shape: see msop.api.defaults.default_restart_scope.
RESTART_SCOPE_POD: Final = "Pod"
RESTART_SCOPE_JOB: Final = "Job"
RESTART_SCOPES: Final[tuple[str, ...]] = (RESTART_SCOPE_POD, RESTART_SCOPE_JOB)

# --- runPolicy.cleanPodPolicy --------------------------------------------------------------------
CLEAN_ALL: Final = "All"
CLEAN_RUNNING: Final = "Running"
CLEAN_NONE: Final = "None"
CLEAN_POD_POLICIES: Final[tuple[str, ...]] = (CLEAN_ALL, CLEAN_RUNNING, CLEAN_NONE)
DEFAULT_CLEAN_POD_POLICY: Final = CLEAN_RUNNING

# --- spec.successPolicy --------------------------------------------------------------------------
SUCCESS_DEFAULT: Final = ""  # worker 0 exited 0 => Succeeded
SUCCESS_ALL_WORKERS: Final = "AllWorkers"  # every worker exited 0 => Succeeded
SUCCESS_POLICIES: Final[tuple[str, ...]] = (SUCCESS_DEFAULT, SUCCESS_ALL_WORKERS)

DEFAULT_REPLICAS: Final = 1

# Kubernetes limits that MSJob names must respect (pod and Service names are derived from them).
DNS1035_LABEL_MAX_LENGTH: Final = 63
DNS1035_LABEL_PATTERN: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

_CANONICAL_BY_LOWER: Final[dict[str, str]] = {t.lower(): t for t in REPLICA_TYPES}


def canonical_replica_type(key: str) -> str | None:
    """Return the canonical spelling of a replica-type key given in any case, else None."""
    return _CANONICAL_BY_LOWER.get(key.lower())


def replica_type_label(replica_type: str) -> str:
    """The value of the replica-type labels and the type part of pod names: lower case."""
    return replica_type.lower()
