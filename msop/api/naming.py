"""How MSJob objects are named and labelled: object names, label selectors, owner refs.

Pure functions of a job's name (or the job). The operator, ``msop render`` and the SDK
(which finds a job's pods by these names and labels) share them.
"""

from __future__ import annotations

from msop.api import constants as c
from msop.kube.objects import JSON


def object_name(job_name: str, replica_type: str, index: int) -> str:
    """``<job>-<type>-<index>``, the name of a replica's pod (and Service)."""
    return f"{job_name}-{c.replica_type_label(replica_type)}-{index}"


def job_selector(job_name: str) -> dict[str, str]:
    """Labels every object of the job carries; the informer/selector key."""
    return {c.LABEL_JOB_NAME: job_name, c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME}


def replica_selector(job_name: str, replica_type: str, index: int) -> dict[str, str]:
    """What selects one replica's pod: the Scheduler Service's selector. Every msop
    version's pods carry these, and so do ms-operator's."""
    rt = c.replica_type_label(replica_type)
    return {
        **job_selector(job_name),
        c.LABEL_REPLICA_TYPE: rt,
        c.LABEL_REPLICA_INDEX: str(index),
        c.LEGACY_LABEL_REPLICA_TYPE: rt,
        c.LEGACY_LABEL_REPLICA_INDEX: str(index),
    }


def replica_labels(job_name: str, replica_type: str, index: int) -> dict[str, str]:
    """The labels of one replica's pod and Service: its selector's, plus ms-operator's
    ``group-name`` and ``job-name``, so that ms-operator's selectors match them too
    (an operator switch either way keeps every job)."""
    return {
        **replica_selector(job_name, replica_type, index),
        c.LEGACY_LABEL_GROUP_NAME: c.GROUP,
        c.LEGACY_LABEL_JOB_NAME: job_name,
    }


def replica_selector_string(job_name: str, replica_type: str) -> str:
    """The label selector (string form) of one replica type, for the scale subresource."""
    return (
        f"{c.LABEL_JOB_NAME}={job_name},{c.LABEL_REPLICA_TYPE}={c.replica_type_label(replica_type)}"
    )


def owner_reference(job: JSON) -> JSON:
    meta = job["metadata"]
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
