"""What every e2e tier shares: building the control plane, starting a cluster or an
add-on for a test session, installing the CRDs, starting operators as processes.

A failure to build or start fails every test that needs the cluster, with the component's
log tail; nothing is skipped. Set ``MSOP_E2E_KEEP=1`` to leave a session's cluster running
(its kubeconfig path is printed), e.g. to look at what a failed test left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from testbed import LocalCluster
from testbed.operator import OperatorProcess
from testbed.paths import CACHE, REPO


def build_binaries() -> Path:
    proc = subprocess.run([str(REPO / "hack/cluster/build.sh")], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(
            f"building the control plane failed (hack/cluster/build.sh):\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def install_crds(cluster: LocalCluster, timeout: float = 60) -> None:
    """Apply every CRD under config/crd/bases and wait until served. Volcano's CRDs come
    from its Go module, installed by the ``volcano`` fixture (tests/e2e/kwok/test_volcano.py)."""
    crds = sorted((REPO / "config/crd/bases").glob("*.yaml"))
    for crd in crds:
        cluster.kubectl("apply", "-f", str(crd))
    # `kubectl wait` fails outright while a new CRD has no status yet; poll instead.
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = cluster.kubectl("get", "-f", str(crd), "-o", "name").stdout.strip()
        while True:
            # A new API server may fail a read now and then (seen once in a fresh clone's
            # run: exit 1 straight after the apply succeeded): keep polling to the deadline.
            proc = cluster.kubectl(
                "get", name, "-o",
                "jsonpath={.status.conditions[?(@.type=='Established')].status}",
                check=False,
            )  # fmt: skip
            if proc.returncode == 0 and proc.stdout.strip() == "True":
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{name} not Established within {timeout}s: {proc.stderr.strip()[-500:]}",
                    pytrace=False,
                )
            time.sleep(0.2)


class SessionCluster(Protocol):
    name: str

    @property
    def kubeconfig(self) -> str: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


C = TypeVar("C", bound=SessionCluster)


def run_session_cluster(c: C, setup: Callable[[C], None] | None = None) -> Iterator[C]:
    """Start ``c`` for a test session (a failure fails every test that needs it, with the
    component's log tail), run ``setup``, yield it, and stop it afterwards unless
    ``MSOP_E2E_KEEP`` is set."""
    started = time.monotonic()
    try:
        c.start()
    except Exception as e:
        c.stop()
        pytest.fail(str(e), pytrace=False)
    print(f"\ncluster {c.name} up in {time.monotonic() - started:.1f}s; KUBECONFIG={c.kubeconfig}")
    try:
        if setup is not None:
            setup(c)
        yield c
    finally:
        if os.environ.get("MSOP_E2E_KEEP"):
            print(f"\nkept cluster {c.name}: KUBECONFIG={c.kubeconfig}")
        else:
            c.stop()


class AddOn(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


A = TypeVar("A", bound=AddOn)


def run_addon(what: str, build: Callable[[], Path], make: Callable[[Path, Path], A]) -> Iterator[A]:
    """Build an add-on (Volcano, Kueue), make it with its binaries' and the e2e logs'
    directories, start it (a failure fails every test that needs it, with its log tail),
    yield it and stop it afterwards."""
    try:
        bin_dir = build()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    started = time.monotonic()
    addon = make(bin_dir, CACHE / "e2e-logs")
    try:
        addon.start()
    except (RuntimeError, OSError) as e:
        addon.stop()
        pytest.fail(str(e), pytrace=False)
    print(f"\n{what} up in {time.monotonic() - started:.1f}s")
    try:
        yield addon
    finally:
        addon.stop()


def kubectl_json(cluster: LocalCluster, *args: str) -> dict[str, object]:
    out = cluster.kubectl(*args, "-o", "json")
    result: dict[str, object] = json.loads(out.stdout)
    return result


OperatorFactory = Callable[..., OperatorProcess]


@contextlib.contextmanager
def operator_factory(kubeconfig: str | Path, namespace: str) -> Iterator[OperatorFactory]:
    """``start(*flags, kubeconfig=..., command_prefix=(), wait_ready=True,
    metrics_secure=False, **env)`` starts ``msop run`` watching ``namespace`` only (so
    tests never share an operator), its ``/metrics`` plain HTTP unless ``metrics_secure``
    (see :class:`~testbed.operator.OperatorProcess`). Every
    process still running at the end is stopped with SIGTERM and must exit 0. Logs:
    .cache/e2e-logs/<namespace>-<n>.log."""
    started: list[OperatorProcess] = []

    def start(
        *args: str,
        kubeconfig: str | Path | None = None,
        command_prefix: tuple[str, ...] = (),
        wait_ready: bool = True,
        metrics_secure: bool = False,
        **env: str,
    ) -> OperatorProcess:
        op = OperatorProcess(
            kubeconfig=str(kubeconfig or default_kubeconfig),
            log_path=CACHE / "e2e-logs" / f"{namespace}-{len(started)}.log",
            args=("--namespace", namespace, "--log-level", "debug", *args),
            env=env,
            command_prefix=command_prefix,
            metrics_secure=metrics_secure,
        )
        started.append(op)
        try:
            op.start(wait_ready=wait_ready)
        except RuntimeError as e:
            pytest.fail(str(e), pytrace=False)
        return op

    default_kubeconfig = kubeconfig
    try:
        yield start
    finally:
        # Also when the test failed inside a `with`: no operator outlives its test.
        codes = [(op, op.stop()) for op in started if op.alive()]
    for op, code in codes:
        assert code == 0, f"operator exited {code} on SIGTERM:\n{op.log_tail()}"


#: A device resource the pool's nodes declare (jobs take one per Worker).
DEVICE = "huawei.com/Ascend910"
#: The label (and taint) that keeps a test's pool for its own jobs.
POOL_LABEL = "msop-e2e/pool"


Pool = Callable[..., list[str]]
