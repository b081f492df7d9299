"""The faults tier's clusters: APF on with the default limits, the scheduler and the
controller-manager without leader election (see ``ONE_INSTANCE``), msop's CRDs and RBAC."""

from __future__ import annotations

import os
from typing import Any

from testbed import LocalCluster
from testbed.paths import CACHE, REPO
from testbed.serviceaccount import install_rbac
from tests.e2e.sessions import (
    build_binaries,
    install_crds,
)

#: The scheduler and the controller-manager run without leader election: with it, an API
#: server down for longer than their renew deadline (10 s, which a 5-8 s outage plus the
#: API server's own start can reach) makes them exit, and nothing here restarts them.
ONE_INSTANCE = (
    "--extra-args", "kube-scheduler=leader-elect=false",
    "--extra-args", "kube-controller-manager=leader-elect=false",
)  # fmt: skip


def fault_cluster(name: str, *extra_args: str, **options: Any) -> LocalCluster:
    """A kwok cluster with the API server's default limits and APF on; ``extra_args``
    are more kwokctl arguments (``--extra-args component=flag=value``), ``options`` more
    kwokctl options."""
    return LocalCluster(
        name=f"{name}-{os.getpid()}",
        bin_dir=build_binaries(),
        workdir=CACHE / "kwok",
        nodes=2,
        extra_options={"disableQPSLimits": False, **options},
        extra_kwokctl_args=(*ONE_INSTANCE, *extra_args),
    )


def prepare(c: LocalCluster) -> None:
    install_crds(c)
    install_rbac(c, REPO / "config")
