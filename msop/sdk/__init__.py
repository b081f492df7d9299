"""The msop SDK: submit MSJobs and follow them from Python.

- :class:`MSJobClient` (async) and :class:`MSJobClientSync` (blocking, notebook-safe):
  ``create`` (validated locally first), ``get``, ``get_status`` (a typed
  :class:`JobStatus`), ``list``, ``update``, ``scale``, ``suspend``, ``resume``,
  ``delete``, ``wait_for_job`` (a watch, with a progress line and a callback),
  ``get_job_pods``, ``get_job_logs`` (every pod, followed across restarts, or the
  previous run), ``get_logs`` (one pod), ``get_events``;
- :func:`dataparallel_job`: a complete MSJob from an image, a command and counts;
  :func:`msrun_job`: one whose pods each run msrun with several workers;
- :func:`render`: the pods and Services the operator would create, offline;
- errors under :class:`MSJobError`.
"""

from msop.api.resources import MSJOBS
from msop.sdk.builder import dataparallel_job, msrun_job
from msop.sdk.client import MSJobClient
from msop.sdk.errors import (
    MSJobError,
    MSJobFailedError,
    MSJobLogsError,
    MSJobNotFoundError,
    MSJobTimeoutError,
    MSJobValidationError,
)
from msop.sdk.render import CLUSTER_IP_PLACEHOLDER, UID_PLACEHOLDER, Rendered, render
from msop.sdk.status import Checkpoint, Condition, JobStatus, ReplicaStatus
from msop.sdk.statusline import format_progress
from msop.sdk.sync import MSJobClientSync

__all__ = [
    "CLUSTER_IP_PLACEHOLDER",
    "MSJOBS",
    "UID_PLACEHOLDER",
    "Checkpoint",
    "Condition",
    "JobStatus",
    "MSJobClient",
    "MSJobClientSync",
    "MSJobError",
    "MSJobFailedError",
    "MSJobLogsError",
    "MSJobNotFoundError",
    "MSJobTimeoutError",
    "MSJobValidationError",
    "Rendered",
    "ReplicaStatus",
    "dataparallel_job",
    "format_progress",
    "msrun_job",
    "render",
]
