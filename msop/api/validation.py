"""Validation of MSJob objects: the admission rules of the CRD, re-checked in Python.

The CRD schema and its CEL rules (hack/gen_crd.py) reject invalid MSJobs at admission. Objects can
still reach the operator without passing them (written to etcd directly, stored under an older
schema, CRD installed by hand), so the reconciler re-checks with `validate` and reports a Failed
condition instead of acting on nonsense. The messages below are shared with the CRD's CEL rules.

Neither function ever raises: any input, however malformed, yields a list of `FieldError`s.
The pod template is only checked for what the operator relies on (the `mindspore` container and
its image); the rest of the PodTemplateSpec is the API server's business.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from msop.api import constants as c

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
MANAGED_BY_MAX_LENGTH: Final = 63
# Kubernetes resource.Quantity, as controller-gen writes it into CRDs.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# Messages shared with the CRD's CEL rules; each names the field it is about.
MSG_NAME_DNS1035: Final = (
    "metadata.name must be a DNS-1035 label (lower case letters, digits and '-', starting with a "
    "letter, ending with a letter or digit), because it names the Scheduler Service "
    "<name>-scheduler-0"
)
MSG_NAME_TOO_LONG: Final = (
    "metadata.name is too long: every pod and Service name <name>-<replica type>-<index> must "
    f"be at most {c.DNS1035_LABEL_MAX_LENGTH} characters"
)
MSG_REPLICA_TYPE: Final = "spec.msReplicaSpecs keys must be Scheduler, PS or Worker (in any case)"
MSG_REPLICA_TYPE_DUPLICATE: Final = (
    "spec.msReplicaSpecs keys must be unique ignoring case (e.g. not both Worker and worker)"
)
MSG_ONE_SCHEDULER: Final = "spec.msReplicaSpecs.Scheduler.replicas must be 0 or 1"
MSG_ONE_MINDSPORE: Final = (
    "template.spec.containers must contain exactly one container named 'mindspore'"
)
MSG_MINDSPORE_IMAGE: Final = "template.spec.containers: the 'mindspore' container needs an image"
MSG_MANAGED_BY_IMMUTABLE: Final = "spec.runPolicy.managedBy is immutable"
MSG_QUEUE_IMMUTABLE: Final = "spec.runPolicy.schedulingPolicy.queue is immutable"

_DNS1035 = re.compile(c.DNS1035_LABEL_PATTERN)
_QUANTITY = re.compile(QUANTITY_PATTERN)

_SPEC_FIELDS = frozenset(
    {"runPolicy", "successPolicy", "enableDynamicWorker", "restartScope", "msReplicaSpecs"}
)
_RUN_POLICY_FIELDS = frozenset(
    {
        "cleanPodPolicy",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "backoffLimit",
        "schedulingPolicy",
        "suspend",
        "managedBy",
    }
)
_SCHEDULING_POLICY_FIELDS = frozenset(
    {"minAvailable", "queue", "priorityClass", "minResources", "scheduleTimeoutSeconds"}
)
_REPLICA_SPEC_FIELDS = frozenset({"replicas", "restartPolicy", "template"})


@dataclass(frozen=True)
class FieldError:
    """One problem with one field. `path` is dotted from the object root, map keys as written
    (`spec.msReplicaSpecs.Worker.replicas`), list items indexed (`...containers[0].image`)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def validate(job: Any) -> list[FieldError]:
    """Check an MSJob (raw or defaulted) against the admission rules; [] means valid."""
    if not isinstance(job, Mapping):
        return [FieldError("", "an MSJob must be an object")]
    errors: list[FieldError] = []
    metadata = job.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    spec = job.get("spec")
    if not isinstance(name, str) or not name:
        errors.append(FieldError("metadata.name", "required"))
    if spec is None:
        errors.append(FieldError("spec", "required"))
    elif not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "must be an object"))
    else:
        errors += _validate_spec(spec)
        if isinstance(name, str) and name:
            errors += _validate_name(name, spec.get("msReplicaSpecs"))
    return errors


def validate_update(old: Any, new: Any) -> list[FieldError]:
    """Check the immutability rules of an update from `old` to `new` (both raw or defaulted).

    Only the transition rules: `spec.runPolicy.managedBy` and `spec.runPolicy.schedulingPolicy.
    queue` may not be added, changed or removed. Call `validate(new)` for everything else.
    """
    errors: list[FieldError] = []
    if _lookup(old, "spec", "runPolicy", "managedBy") != _lookup(
        new, "spec", "runPolicy", "managedBy"
    ):
        errors.append(FieldError("spec.runPolicy.managedBy", MSG_MANAGED_BY_IMMUTABLE))
    if _lookup(old, "spec", "runPolicy", "schedulingPolicy", "queue") != _lookup(
        new, "spec", "runPolicy", "schedulingPolicy", "queue"
    ):
        errors.append(FieldError("spec.runPolicy.schedulingPolicy.queue", MSG_QUEUE_IMMUTABLE))
    return errors


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _lookup(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _check_int(
    errors: list[FieldError],
    obj: Mapping[str, Any],
    key: str,
    path: str,
    minimum: int,
    maximum: int,
) -> None:
    if key not in obj or obj[key] is None:
        return
    value = obj[key]
    if not _is_int(value):
        errors.append(FieldError(f"{path}.{key}", "must be an integer"))
    elif value < minimum:
        errors.append(FieldError(f"{path}.{key}", f"must be greater than or equal to {minimum}"))
    elif value > maximum:
        errors.append(FieldError(f"{path}.{key}", f"must be less than or equal to {maximum}"))


def _check_enum(
    errors: list[FieldError],
    obj: Mapping[str, Any],
    key: str,
    path: str,
    allowed: tuple[str, ...],
) -> None:
    if key not in obj or obj[key] is None:
        return
    if obj[key] not in allowed:
        shown = ", ".join(f'"{a}"' for a in allowed)
        errors.append(FieldError(f"{path}.{key}", f"unsupported value; supported: {shown}"))


def _check_type(
    errors: list[FieldError], obj: Mapping[str, Any], key: str, path: str, kind: type
) -> None:
    if key in obj and obj[key] is not None and not isinstance(obj[key], kind):
        errors.append(FieldError(f"{path}.{key}", f"must be a {_TYPE_NAMES[kind]}"))


_TYPE_NAMES: dict[type, str] = {str: "string", bool: "boolean", dict: "object", list: "list"}


def _check_unknown(
    errors: list[FieldError], obj: Mapping[str, Any], path: str, known: frozenset[str]
) -> None:
    for key in obj:
        if key not in known:
            errors.append(FieldError(f"{path}.{key}", "unknown field"))


def _validate_spec(spec: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    _check_unknown(errors, spec, "spec", _SPEC_FIELDS)
    run_policy = spec.get("runPolicy")
    if run_policy is not None:
        if isinstance(run_policy, Mapping):
            errors += _validate_run_policy(run_policy)
        else:
            errors.append(FieldError("spec.runPolicy", "must be an object"))
    _check_enum(errors, spec, "successPolicy", "spec", c.SUCCESS_POLICIES)
    _check_type(errors, spec, "enableDynamicWorker", "spec", bool)
    _check_enum(errors, spec, "restartScope", "spec", c.RESTART_SCOPES)
    errors += _validate_replica_specs(spec.get("msReplicaSpecs"))
    return errors


def _validate_run_policy(run_policy: Mapping[str, Any]) -> list[FieldError]:
    path = "spec.runPolicy"
    errors: list[FieldError] = []
    _check_unknown(errors, run_policy, path, _RUN_POLICY_FIELDS)
    _check_enum(errors, run_policy, "cleanPodPolicy", path, c.CLEAN_POD_POLICIES)
    _check_int(errors, run_policy, "ttlSecondsAfterFinished", path, 0, INT32_MAX)
    _check_int(errors, run_policy, "activeDeadlineSeconds", path, 1, INT64_MAX)
    _check_int(errors, run_policy, "backoffLimit", path, 0, INT32_MAX)
    _check_type(errors, run_policy, "suspend", path, bool)
    _check_type(errors, run_policy, "managedBy", path, str)
    managed_by = run_policy.get("managedBy")
    if isinstance(managed_by, str) and len(managed_by) > MANAGED_BY_MAX_LENGTH:
        errors.append(
            FieldError(f"{path}.managedBy", f"must be at most {MANAGED_BY_MAX_LENGTH} characters")
        )
    scheduling = run_policy.get("schedulingPolicy")
    if scheduling is None:
        return errors
    path = f"{path}.schedulingPolicy"
    if not isinstance(scheduling, Mapping):
        return [*errors, FieldError(path, "must be an object")]
    _check_unknown(errors, scheduling, path, _SCHEDULING_POLICY_FIELDS)
    _check_int(errors, scheduling, "minAvailable", path, 0, INT32_MAX)
    _check_type(errors, scheduling, "queue", path, str)
    _check_type(errors, scheduling, "priorityClass", path, str)
    _check_int(errors, scheduling, "scheduleTimeoutSeconds", path, 0, INT32_MAX)
    resources = scheduling.get("minResources")
    if resources is not None and not isinstance(resources, Mapping):
        errors.append(FieldError(f"{path}.minResources", "must be an object"))
    elif resources is not None:
        for key, value in resources.items():
            if not _is_quantity(value):
                errors.append(
                    FieldError(f"{path}.minResources.{key}", "must be a quantity like 4 or 16Gi")
                )
    return errors


def _is_quantity(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and _QUANTITY.match(value) is not None


def _validate_replica_specs(replica_specs: Any) -> list[FieldError]:
    path = "spec.msReplicaSpecs"
    if replica_specs is None:
        return [FieldError(path, "required")]
    if not isinstance(replica_specs, Mapping):
        return [FieldError(path, "must be an object")]
    if not replica_specs:
        return [FieldError(path, "must have at least one replica type")]
    errors: list[FieldError] = []
    seen: dict[str, str] = {}
    for key, replica_spec in replica_specs.items():
        canonical = c.canonical_replica_type(key) if isinstance(key, str) else None
        key_path = f"{path}.{key}"
        if canonical is None:
            errors.append(FieldError(key_path, MSG_REPLICA_TYPE))
        elif canonical in seen:
            errors.append(FieldError(key_path, MSG_REPLICA_TYPE_DUPLICATE))
        else:
            seen[canonical] = key
        if not isinstance(replica_spec, Mapping):
            errors.append(FieldError(key_path, "must be an object"))
            continue
        errors += _validate_replica_spec(replica_spec, key_path, canonical)
    return errors


def _validate_replica_spec(
    replica_spec: Mapping[str, Any], path: str, replica_type: str | None
) -> list[FieldError]:
    errors: list[FieldError] = []
    _check_unknown(errors, replica_spec, path, _REPLICA_SPEC_FIELDS)
    _check_int(errors, replica_spec, "replicas", path, 0, INT32_MAX)
    replicas = _as_int(replica_spec.get("replicas"))
    if replica_type == c.SCHEDULER and replicas is not None and replicas > c.MAX_SCHEDULER_REPLICAS:
        errors.append(FieldError(f"{path}.replicas", MSG_ONE_SCHEDULER))
    _check_enum(errors, replica_spec, "restartPolicy", path, c.RESTART_POLICIES)
    template = replica_spec.get("template")
    if template is None:
        return [*errors, FieldError(f"{path}.template", "required")]
    if not isinstance(template, Mapping):
        return [*errors, FieldError(f"{path}.template", "must be an object")]
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, Mapping):
        return [*errors, FieldError(f"{path}.template.spec", "required, must be an object")]
    containers = pod_spec.get("containers")
    containers_path = f"{path}.template.spec.containers"
    if not isinstance(containers, list):
        return [*errors, FieldError(containers_path, "required, must be a list")]
    main = [
        (i, ct)
        for i, ct in enumerate(containers)
        if isinstance(ct, Mapping) and ct.get("name") == c.DEFAULT_CONTAINER_NAME
    ]
    if len(main) != 1:
        return [*errors, FieldError(containers_path, MSG_ONE_MINDSPORE)]
    index, container = main[0]
    image = container.get("image")
    if not isinstance(image, str) or not image:
        errors.append(FieldError(f"{containers_path}[{index}].image", MSG_MINDSPORE_IMAGE))
    return errors


def _validate_name(name: str, replica_specs: Any) -> list[FieldError]:
    if not _DNS1035.match(name):
        return [FieldError("metadata.name", MSG_NAME_DNS1035)]
    if not isinstance(replica_specs, Mapping):
        return []
    for key, replica_spec in replica_specs.items():
        if not isinstance(key, str) or not isinstance(replica_spec, Mapping):
            continue
        replicas = _as_int(replica_spec.get("replicas"))
        max_index = replicas - 1 if replicas is not None and replicas > 1 else 0
        if len(f"{name}-{key}-{max_index}") > c.DNS1035_LABEL_MAX_LENGTH:
            return [FieldError("metadata.name", MSG_NAME_TOO_LONG)]
    return []
