"""The scheduling systems msop integrates with, in the order they decide: Kueue, then the
gang scheduler, Volcano or Kubernetes' Workload API (a job queued by Kueue and placed as a
gang waits for Kueue first).

The operator (``setup.py``) starts the enabled ones, each with the caches it asks for;
``msop render`` plans a job with what each would see of it. Both go through the seam
(:mod:`.scheduling`) and name no system: this list is the one place that does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msop.msjob import gang, kueue, workloadapi
from msop.msjob.scheduling import Integration
from msop.msjob.settings import WorkerLost

if TYPE_CHECKING:
    from msop.kube.client import KubeClient
    from msop.kube.contact import Contact


def enabled(
    *,
    kueue_enabled: bool,
    gang_scheduling: bool,
    workload_api: str | None = None,
    worker_lost: WorkerLost | None = None,
    contact: Contact | None = None,
) -> list[Integration]:
    """The systems switched on (``--enable-kueue``; ``--gang-scheduler``: Volcano, or the
    Workload API of the version ``workload_api``), in the order they decide; Kueue holds
    MultiKueue's copies after the API server's outages ``contact`` records
    (``worker_lost``)."""
    queue = kueue.integration(worker_lost or WorkerLost(), contact)
    switched = ((queue, kueue_enabled), (gang.INTEGRATION, gang_scheduling))
    on = [integration for integration, wanted in switched if wanted]
    if workload_api is not None:
        on.append(workloadapi.integration(workload_api))
    return on


async def workload_api_version(client: KubeClient) -> str | None:
    """The version of Kubernetes' Workload API the API server serves, or None
    (:func:`.workloadapi.served_version`)."""
    return await workloadapi.served_version(client)
