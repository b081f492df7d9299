"""Validation of MSJob objects: the admission rules of the CRD, re-checked in Python.

The CRD schema and its CEL rules (hack/gen_crd.py) reject invalid MSJobs at admission. Objects can
still reach the operator without passing them (written to etcd directly, stored under an older
schema, CRD installed by hand), so the reconciler re-checks with `validate` and reports a Failed
condition instead of acting on nonsense. The patterns and messages below are shared with the CRD.

- `validate_admission(job)` is exactly what admission refuses, field by field: `msop validate`,
  `msop render` and the SDK use it, and the e2e tests hold it to the API server's verdicts.
- `validate(job)` is what the operator refuses to run: the same rules except the shape of the
  `spec.msReplicaSpecs` keys (any case, Worker optional), which older CRDs accepted and which
  the operator still runs (only the scale subresource needs the canonical `Worker` key);
  plus `beyond_admission(job)`, the rules a CEL rule would cost too much for (an msrun job
  that gives no way to count its workers), which `msop validate` reports too.

Besides the MSJob fields, the pod template is checked for what the API server would refuse when
the operator creates the pods and the Scheduler Service from it (names, ports, labels, images,
environment variable names, requests against limits), so such a job is refused at admission,
not failed later (or, under Kueue, left waiting for ever). The rest of the PodTemplateSpec is
the API server's business (docs/reference/validation.md says what a refused pod does to a job).

Paths name fields as the API server does (`spec.msReplicaSpecs.Worker.template.spec.
containers[0].name`; the API server itself writes map keys of CEL errors as `[Worker]`).
Neither function ever raises: any input, however malformed, yields a list of `FieldError`s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from msop.api import constants as c
from msop.api import quantity
from msop.api.types import ReplicaSpecs

if TYPE_CHECKING:
    from fractions import Fraction

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
MANAGED_BY_MAX_LENGTH: Final = 63
# Kubernetes resource.Quantity, as controller-gen writes it into CRDs.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# Patterns shared with the CRD schema (RE2 and Python `re` read them alike). Each encodes its
# length limit too: a `maxLength` error would make the API server skip every CEL rule and add a
# "some validation rules were not checked" line without a field.
DNS1123_LABEL_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
QUALIFIED_NAME_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
# IANA service name: lower case letters, digits and single '-' inside, at least one letter.
PORT_NAME_PATTERN: Final = r"^([0-9]+-)*[0-9]*[a-z][a-z0-9]*(-[a-z0-9]+)*$"
PORT_NAME_MAX_LENGTH: Final = 15
# Printable ASCII except '=' (the API server's relaxed environment variable names).
ENV_NAME_PATTERN: Final = r"^[ -<>-~]+$"
IMAGE_PATTERN: Final = r"^(\S(.*\S)?)?$"
PROTOCOL_PATTERN: Final = r"^(TCP|UDP|SCTP)$"
PORT_MAX: Final = 65535


def enum_pattern(values: tuple[str, ...]) -> str:
    """A pattern that matches exactly one of `values` (a schema `enum` would be a blocking
    error for the API server's CEL rules, see the patterns above)."""
    return "^(" + "|".join(re.escape(v) for v in values) + ")$"


# Messages shared with the CRD's CEL rules. They never repeat the path: the error names it.
MSG_NAME_DNS1035: Final = (
    "must be a DNS-1035 label (lower case letters, digits and '-', starting with a letter, "
    "ending with a letter or digit), because it names the Scheduler Service <name>-scheduler-0"
)
MSG_NAME_TOO_LONG: Final = (
    "is too long: every pod and Service name <name>-<replica type>-<index> must be at most "
    f"{c.DNS1035_LABEL_MAX_LENGTH} characters"
)
MSG_REPLICA_TYPE: Final = (
    "keys must be Scheduler, PS or Worker, spelled exactly so (the scale subresource reads "
    "spec.msReplicaSpecs.Worker.replicas)"
)
MSG_REPLICA_TYPE_LENIENT: Final = "keys must be Scheduler, PS or Worker (in any case)"
MSG_REPLICA_TYPE_DUPLICATE: Final = (
    "keys must be unique ignoring case (e.g. not both Worker and worker)"
)
MSG_WORKER_REQUIRED: Final = (
    "a Worker replica type is required (it may have replicas: 0): kubectl scale and the scale "
    "subresource act on spec.msReplicaSpecs.Worker.replicas"
)
MSG_ONE_SCHEDULER: Final = "must be 0 or 1: a job has at most one Scheduler"
MSG_ONE_MINDSPORE: Final = "must contain exactly one container named 'mindspore'"
MSG_IMAGE: Final = "required: every container of a pod needs an image"
MSG_REQUIRED: Final = "required"
MSG_TEMPLATE_SPEC: Final = "required: the pod template needs a spec with containers"
MSG_LABEL_KEY: Final = (
    "keys must be qualified names: an optional DNS subdomain prefix and '/', then at most 63 "
    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
)
MSG_PORT_NAME_LENGTH: Final = f"must be at most {PORT_NAME_MAX_LENGTH} characters"
MSG_INIT_CONTAINER_NAME: Final = "init container names must differ from the names of the containers"
MSG_MANAGED_BY_IMMUTABLE: Final = "is immutable (it cannot be added, changed or removed)"
MSG_MANAGED_BY_DIFFERS: Final = (
    "must equal spec.runPolicy.managedBy when both are set (set one of them)"
)
MSG_MULTIKUEUE_IN_RUN_POLICY: Final = (
    f"{c.MANAGED_BY_MULTIKUEUE} belongs in spec.managedBy, where MultiKueue reads it "
    "(and removes it from the worker cluster's copy)"
)
MSG_QUEUE_IMMUTABLE: Final = "is immutable (it cannot be added, changed or removed)"
MSG_MSRUN_WORKERS_ONLY: Final = (
    "not allowed with spec.msrun: msrun starts the Scheduler in Worker 0's pod, and runs no "
    "parameter servers"
)
MSG_MSRUN_NOT_ELASTIC: Final = (
    "must be false with spec.msrun: the workers of an msrun job form one cluster"
)
MSG_MSRUN_RESTART_SCOPE: Final = (
    "must be Job with spec.msrun: a pod restarted alone cannot rejoin its cluster"
)
MSG_MSRUN_LOCAL_WORKERS: Final = (
    "required unless the Worker template's mindspore container has an accelerator limit "
    "(huawei.com/Ascend*, nvidia.com/gpu, amd.com/gpu) to count workers by"
)
MSG_REQUEST_OVER_LIMIT: Final = (
    "a request must not exceed the limit of the same resource (the API server refuses such "
    "pods: they could never run)"
)
MSG_REQUEST_NOT_LIMIT: Final = (
    "an extended resource (a name with a domain other than kubernetes.io, e.g. "
    "huawei.com/Ascend910) or hugepages cannot be overcommitted: its request needs a limit, "
    "equal to it (or set only the limit)"
)
# The CEL rules' test of a resource name (`k`) that may be overcommitted: Kubernetes' native
# resources (no domain, or kubernetes.io) other than hugepages.
CEL_OVERCOMMIT: Final = (
    "((!k.contains('/') || k.contains('kubernetes.io/')) && !k.startsWith('hugepages-'))"
)
MSRUN_PORT_MIN: Final = 1024  # msrun's own range for --master_port

# Explanations of the patterns, for `validate`'s messages (the API server prints the pattern).
_PATTERN_MESSAGES: Final[dict[str, str]] = {
    DNS1123_LABEL_PATTERN: "must be a DNS-1123 label: at most 63 lower case letters, digits or "
    "'-', starting and ending with a letter or digit",
    LABEL_VALUE_PATTERN: "must be a label value: empty, or at most 63 letters, digits, '-', '_' "
    "or '.', starting and ending with a letter or digit",
    PORT_NAME_PATTERN: "must be an IANA service name: lower case letters, digits and single '-' "
    "inside, with at least one letter",
    ENV_NAME_PATTERN: "must be printable ASCII characters other than '='",
    IMAGE_PATTERN: "must not have leading or trailing whitespace",
    PROTOCOL_PATTERN: 'unsupported value; supported: "TCP", "UDP", "SCTP"',
}


def _re2(pattern: str) -> re.Pattern[str]:
    """Compile a schema pattern with RE2's meaning of a final `$` (the end of the text; in
    Python it also matches before a final newline)."""
    return re.compile(pattern.removesuffix("$") + r"\Z")


_DNS1035 = _re2(c.DNS1035_LABEL_PATTERN)
_QUANTITY = _re2(QUANTITY_PATTERN)
_QUALIFIED_NAME = _re2(QUALIFIED_NAME_PATTERN)
_PATTERNS: Final[dict[str, re.Pattern[str]]] = {p: _re2(p) for p in _PATTERN_MESSAGES}

_SPEC_FIELDS = frozenset(
    {
        "runPolicy",
        "successPolicy",
        "enableDynamicWorker",
        "restartScope",
        "restartInPlace",
        "restartInPlaceGracePeriodSeconds",
        "managedBy",
        "msReplicaSpecs",
        "msrun",
    }
)
_MSRUN_FIELDS = frozenset({"localWorkers", "masterPort"})
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
    """Check an MSJob (raw or defaulted) against what the operator needs; [] means it can run.

    The admission rules except the shape of the `spec.msReplicaSpecs` keys: any case is read
    (duplicates ignoring case are not) and a job without Workers runs (see the module
    docstring); plus what admission cannot afford to check (`beyond_admission`).
    """
    return _validate(job, strict=False) + beyond_admission(job)


def validate_admission(job: Any) -> list[FieldError]:
    """Check an MSJob as the CRD's admission does; [] means the API server accepts it.

    Keys of `spec.msReplicaSpecs` must be exactly Scheduler, PS or Worker, and Worker must be
    there (kubectl scale and the scale subresource act on `spec.msReplicaSpecs.Worker.replicas`).
    """
    return _validate(job, strict=True)


def _validate(job: Any, *, strict: bool) -> list[FieldError]:
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
        errors += _validate_spec(spec, strict)
        if isinstance(name, str) and name:
            errors += _validate_name(name, spec.get("msReplicaSpecs"))
    return errors


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


def _validate_spec(spec: Mapping[str, Any], strict: bool) -> list[FieldError]:
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
    _check_type(errors, spec, "restartInPlace", "spec", bool)
    _check_int(errors, spec, "restartInPlaceGracePeriodSeconds", "spec", 0,
               c.MAX_RESTART_IN_PLACE_GRACE)  # fmt: skip
    errors += _validate_managed_by(spec)
    errors += _validate_replica_specs(spec.get("msReplicaSpecs"), strict)
    if spec.get("msrun") is not None:
        errors += _validate_msrun(spec)
    return errors


def _validate_msrun(spec: Mapping[str, Any]) -> list[FieldError]:
    """`spec.msrun` and what it rules out elsewhere in the spec."""
    path = "spec.msrun"
    msrun = spec["msrun"]
    if not isinstance(msrun, Mapping):
        return [FieldError(path, "must be an object")]
    errors: list[FieldError] = []
    _check_unknown(errors, msrun, path, _MSRUN_FIELDS)
    _check_int(errors, msrun, "localWorkers", path, 1, INT32_MAX)
    _check_int(errors, msrun, "masterPort", path, MSRUN_PORT_MIN, PORT_MAX)
    specs = spec.get("msReplicaSpecs")
    if isinstance(specs, Mapping):
        for key in specs:
            if isinstance(key, str) and c.canonical_replica_type(key) in (c.SCHEDULER, c.PS):
                errors.append(FieldError(f"spec.msReplicaSpecs.{key}", MSG_MSRUN_WORKERS_ONLY))
    if spec.get("enableDynamicWorker") is True:
        errors.append(FieldError("spec.enableDynamicWorker", MSG_MSRUN_NOT_ELASTIC))
    if spec.get("restartScope") == c.RESTART_SCOPE_POD:
        errors.append(FieldError("spec.restartScope", MSG_MSRUN_RESTART_SCOPE))
    return errors


def beyond_admission(job: Any) -> list[FieldError]:
    """What the operator refuses although the CRD accepts it, because a CEL rule for it
    would cost more than the API server allows: an msrun job with no way to count its local
    workers (neither `localWorkers` nor an accelerator limit: the rule would have to look
    into every container's limits). The operator fails such a job (InvalidSpec) at once."""
    spec = job.get("spec") if isinstance(job, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(spec.get("msrun"), Mapping):
        return []
    if spec["msrun"].get("localWorkers") is None and not _has_accelerator(
        spec.get("msReplicaSpecs")
    ):
        return [FieldError("spec.msrun.localWorkers", MSG_MSRUN_LOCAL_WORKERS)]
    return []


def _has_accelerator(specs: Any) -> bool:
    """Whether the Worker template's mindspore container names an accelerator in its limits
    (the name, as the CRD's rule checks, not the count)."""
    if not isinstance(specs, Mapping):
        return False
    replica_specs = ReplicaSpecs(specs)
    if c.WORKER not in replica_specs:
        return False
    main = replica_specs[c.WORKER].main_container or {}
    resources = main.get("resources")
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    return isinstance(limits, Mapping) and any(
        isinstance(k, str)
        and (k in c.ACCELERATOR_RESOURCES or k.startswith(c.ACCELERATOR_RESOURCE_PREFIXES))
        for k in limits
    )


def _validate_managed_by(spec: Mapping[str, Any]) -> list[FieldError]:
    """``spec.managedBy``: a short string, the same as ``spec.runPolicy.managedBy`` when
    both are set; MultiKueue's value only in ``spec.managedBy``."""
    errors: list[FieldError] = []
    _check_type(errors, spec, "managedBy", "spec", str)
    top = spec.get("managedBy")
    if isinstance(top, str) and len(top) > MANAGED_BY_MAX_LENGTH:
        errors.append(
            FieldError("spec.managedBy", f"must be at most {MANAGED_BY_MAX_LENGTH} characters")
        )
    run_policy = spec.get("runPolicy")
    nested = run_policy.get("managedBy") if isinstance(run_policy, Mapping) else None
    if nested == c.MANAGED_BY_MULTIKUEUE:
        errors.append(FieldError("spec.runPolicy.managedBy", MSG_MULTIKUEUE_IN_RUN_POLICY))
    elif isinstance(top, str) and isinstance(nested, str) and top != nested:
        errors.append(FieldError("spec.managedBy", MSG_MANAGED_BY_DIFFERS))
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


def _validate_replica_specs(replica_specs: Any, strict: bool) -> list[FieldError]:
    path = "spec.msReplicaSpecs"
    if replica_specs is None:
        return [FieldError(path, "required")]
    if not isinstance(replica_specs, Mapping):
        return [FieldError(path, "must be an object")]
    errors: list[FieldError] = []
    if strict:
        if any(key not in c.REPLICA_TYPES for key in replica_specs):
            errors.append(FieldError(path, MSG_REPLICA_TYPE))
        if c.WORKER not in replica_specs:
            errors.append(FieldError(f"{path}.{c.WORKER}", MSG_WORKER_REQUIRED))
    elif not replica_specs:
        return [FieldError(path, "must have at least one replica type")]
    seen: dict[str, str] = {}
    for key, replica_spec in replica_specs.items():
        canonical = c.canonical_replica_type(key) if isinstance(key, str) else None
        key_path = f"{path}.{key}"
        if strict:
            canonical = key if key in c.REPLICA_TYPES else None
        elif canonical is None:
            errors.append(FieldError(key_path, MSG_REPLICA_TYPE_LENIENT))
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
        return [*errors, FieldError(f"{path}.template", MSG_REQUIRED)]
    if not isinstance(template, Mapping):
        return [*errors, FieldError(f"{path}.template", "must be an object")]
    errors += _validate_template_metadata(template.get("metadata"), f"{path}.template.metadata")
    pod_spec = template.get("spec")
    if pod_spec is None:
        return [*errors, FieldError(f"{path}.template.spec", MSG_TEMPLATE_SPEC)]
    if not isinstance(pod_spec, Mapping):
        return [*errors, FieldError(f"{path}.template.spec", "must be an object")]
    return errors + _validate_pod_spec(pod_spec, f"{path}.template.spec")


def _validate_template_metadata(meta: Any, path: str) -> list[FieldError]:
    if meta is None:
        return []
    if not isinstance(meta, Mapping):
        return [FieldError(path, "must be an object")]
    errors: list[FieldError] = []
    _check_string_map(errors, meta.get("labels"), f"{path}.labels", values=True)
    _check_string_map(errors, meta.get("annotations"), f"{path}.annotations", values=False)
    return errors


def _check_string_map(errors: list[FieldError], value: Any, path: str, *, values: bool) -> None:
    """Labels (values=True: values are label values too) or annotations: keys are qualified
    names."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        errors.append(FieldError(path, "must be an object"))
        return
    if any(not isinstance(k, str) or not _QUALIFIED_NAME.match(k) for k in value):
        errors.append(FieldError(path, MSG_LABEL_KEY))
    for key, item in value.items():
        if not isinstance(item, str):
            errors.append(FieldError(f"{path}.{key}", "must be a string"))
        elif values:
            _check_pattern(errors, item, f"{path}.{key}", LABEL_VALUE_PATTERN)


def _check_pattern(errors: list[FieldError], value: Any, path: str, pattern: str) -> None:
    if not isinstance(value, str):
        errors.append(FieldError(path, "must be a string"))
    elif not _PATTERNS[pattern].match(value):
        errors.append(FieldError(path, _PATTERN_MESSAGES[pattern]))


def _validate_pod_spec(pod_spec: Mapping[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    _check_string_map(errors, pod_spec.get("nodeSelector"), f"{path}.nodeSelector", values=True)
    containers = pod_spec.get("containers")
    containers_path = f"{path}.containers"
    names: set[str] = set()
    if not isinstance(containers, list):
        errors.append(FieldError(containers_path, "required, must be a list"))
    else:
        errors += _validate_containers(containers, containers_path)
        names = {
            ct["name"]
            for ct in containers
            if isinstance(ct, Mapping) and isinstance(ct.get("name"), str)
        }
        main = [
            (i, ct)
            for i, ct in enumerate(containers)
            if isinstance(ct, Mapping) and ct.get("name") == c.DEFAULT_CONTAINER_NAME
        ]
        if len(main) != 1:
            errors.append(FieldError(containers_path, MSG_ONE_MINDSPORE))
    init = pod_spec.get("initContainers")
    if init is not None:
        init_path = f"{path}.initContainers"
        if not isinstance(init, list):
            errors.append(FieldError(init_path, "must be a list"))
        else:
            errors += _validate_containers(init, init_path)
            if any(isinstance(ct, Mapping) and ct.get("name") in names for ct in init):
                errors.append(FieldError(init_path, MSG_INIT_CONTAINER_NAME))
    volumes = pod_spec.get("volumes")
    if isinstance(volumes, list):
        for i, volume in enumerate(volumes):
            if isinstance(volume, Mapping) and "name" in volume:
                _check_pattern(
                    errors, volume["name"], f"{path}.volumes[{i}].name", DNS1123_LABEL_PATTERN
                )
    return errors


def _validate_containers(containers: list[Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for i, ct in enumerate(containers):
        ct_path = f"{path}[{i}]"
        if not isinstance(ct, Mapping):
            errors.append(FieldError(ct_path, "must be an object"))
            continue
        if "name" in ct:
            _check_pattern(errors, ct["name"], f"{ct_path}.name", DNS1123_LABEL_PATTERN)
        image = ct.get("image")
        if not isinstance(image, str) or not image:
            errors.append(FieldError(f"{ct_path}.image", MSG_IMAGE))
        else:
            _check_pattern(errors, image, f"{ct_path}.image", IMAGE_PATTERN)
        ports = ct.get("ports")
        if isinstance(ports, list):
            for j, port in enumerate(ports):
                if isinstance(port, Mapping):
                    errors += _validate_port(port, f"{ct_path}.ports[{j}]")
        errors += _validate_resources(ct.get("resources"), f"{ct_path}.resources")
        env = ct.get("env")
        if isinstance(env, list):
            for j, var in enumerate(env):
                if isinstance(var, Mapping) and "name" in var:
                    _check_pattern(
                        errors, var["name"], f"{ct_path}.env[{j}].name", ENV_NAME_PATTERN
                    )
    return errors


def _quantity(value: Any) -> Fraction | None:
    if not _is_quantity(value):
        return None
    try:
        return quantity.parse(value)
    except ValueError:
        return None


def _overcommit_allowed(resource: str) -> bool:
    """Kubernetes lets a native resource's request be below its limit; an extended resource
    or hugepages must request exactly its limit."""
    native = "/" not in resource or "kubernetes.io/" in resource
    return native and not resource.startswith("hugepages-")


def _validate_resources(resources: Any, path: str) -> list[FieldError]:
    """Requests against limits, as the API server checks them when it creates the pod."""
    if not isinstance(resources, Mapping):
        return []
    requests = resources.get("requests")
    limits = resources.get("limits")
    if not isinstance(requests, Mapping):
        return []
    if not isinstance(limits, Mapping):
        limits = {}
    over = equal = False
    for name, request in requests.items():
        limit = limits.get(name)
        wanted = _quantity(request)
        bound = None if limit is None else _quantity(limit)
        if not isinstance(name, str) or wanted is None or (limit is not None and bound is None):
            continue  # a malformed quantity is the schema's error, not this rule's
        if not _overcommit_allowed(name):
            equal = equal or wanted != bound
        elif bound is not None and wanted > bound:
            over = True
    errors: list[FieldError] = []
    if over:
        errors.append(FieldError(f"{path}.requests", MSG_REQUEST_OVER_LIMIT))
    if equal:
        errors.append(FieldError(f"{path}.requests", MSG_REQUEST_NOT_LIMIT))
    return errors


def _validate_port(port: Mapping[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    _check_int(errors, port, "containerPort", path, 1, PORT_MAX)
    _check_int(errors, port, "hostPort", path, 0, PORT_MAX)
    name = port.get("name")
    if name is not None:
        _check_pattern(errors, name, f"{path}.name", PORT_NAME_PATTERN)
        if isinstance(name, str) and len(name) > PORT_NAME_MAX_LENGTH:
            errors.append(FieldError(f"{path}.name", MSG_PORT_NAME_LENGTH))
    if port.get("protocol") is not None:
        _check_pattern(errors, port["protocol"], f"{path}.protocol", PROTOCOL_PATTERN)
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
