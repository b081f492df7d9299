"""The MSJob API as data: constants, typed views, defaulting, validation, condition rules.

Pure functions over plain dicts (objects exactly as the API server sends them); no I/O.
"""

from msop.api.conditions import (
    get_condition,
    is_finished,
    is_true,
    latest_condition_type,
    set_condition,
)
from msop.api.defaults import apply_defaults
from msop.api.types import (
    Condition,
    JobStatus,
    MSJob,
    MSJobSpec,
    ReplicaSpec,
    ReplicaSpecs,
    ReplicaStatus,
    ReplicaStatuses,
    RunPolicy,
    SchedulingPolicy,
)
from msop.api.validation import FieldError, validate, validate_admission

__all__ = [
    "Condition",
    "FieldError",
    "JobStatus",
    "MSJob",
    "MSJobSpec",
    "ReplicaSpec",
    "ReplicaSpecs",
    "ReplicaStatus",
    "ReplicaStatuses",
    "RunPolicy",
    "SchedulingPolicy",
    "apply_defaults",
    "get_condition",
    "is_finished",
    "is_true",
    "latest_condition_type",
    "set_condition",
    "validate",
    "validate_admission",
]
