"""The contract between msop and what runs in its pods: environment names and wire limits.

One module, ``typing`` only, so that the operator's API layer (``msop.api.constants``,
``msop.api.report``) can read the contract without loading the pod-side code (the
progress reporter's sockets and threads, the msrun launcher's process handling), and the
pod-side code reads the same values. Values change only with the wire version.
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
