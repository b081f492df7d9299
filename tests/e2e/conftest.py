"""Fixtures for e2e tests on a real control plane (see msop.testing).

- ``cluster`` (session): built once (hack/cluster/build.sh) and started once per run,
  with every CRD under config/crd/bases installed. A failure to build or start fails
  every e2e test with the component's log tail; nothing is skipped.
- ``namespace``: a fresh namespace per test, deleted afterwards.
- ``kubelet``: a ``KubeletStandIn`` that runs, ends and restarts simulated pods.

Set ``MSOP_E2E_KEEP=1`` to leave the cluster running after the session (its kubeconfig
path is printed), e.g. to look at what a failed test left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from msop.kube.client import KubeClient
from msop.testing import KubeletStandIn, LocalCluster
from msop.testing.cluster import fake_node, pod_cidr
from msop.testing.operator import OperatorProcess
from tests.e2e.reliability import TEST_AGENT

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("MSOP_CACHE_DIR", REPO / ".cache"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


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
    from its Go module, installed by the ``volcano`` fixture (tests/e2e/test_volcano.py)."""
    crds = sorted((REPO / "config/crd/bases").glob("*.yaml"))
    for crd in crds:
        cluster.kubectl("apply", "-f", str(crd))
    # `kubectl wait` fails outright while a new CRD has no status yet; poll instead.
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = cluster.kubectl("get", "-f", str(crd), "-o", "name").stdout.strip()
        while True:
            out = cluster.kubectl(
                "get", name, "-o",
                "jsonpath={.status.conditions[?(@.type=='Established')].status}",
            ).stdout  # fmt: skip
            if out.strip() == "True":
                break
            if time.monotonic() > deadline:
                pytest.fail(f"{name} not Established within {timeout}s", pytrace=False)
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
    addon = make(bin_dir, Path(os.environ.get("MSOP_CACHE_DIR", REPO / ".cache")) / "e2e-logs")
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


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(
        name=f"msop-e2e-{os.getpid()}",
        bin_dir=build_binaries(),
        workdir=Path(os.environ.get("MSOP_CACHE_DIR", REPO / ".cache")) / "kwok",
    )
    yield from run_session_cluster(c, install_crds)


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    # Pods are admitted only once the namespace's default ServiceAccount exists.
    deadline = time.monotonic() + 30
    while cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode != 0:
        if time.monotonic() > deadline:
            pytest.fail(f"namespace {name}: default ServiceAccount never appeared")
        time.sleep(0.2)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def kubelet(cluster: LocalCluster) -> KubeletStandIn:
    return KubeletStandIn(cluster)


def kubectl_json(cluster: LocalCluster, *args: str) -> dict[str, object]:
    out = cluster.kubectl(*args, "-o", "json")
    result: dict[str, object] = json.loads(out.stdout)
    return result


OperatorFactory = Callable[..., OperatorProcess]


@contextlib.contextmanager
def operator_factory(kubeconfig: str | Path, namespace: str) -> Iterator[OperatorFactory]:
    """``start(*flags, kubeconfig=..., command_prefix=(), wait_ready=True, **env)`` starts
    ``msop run`` watching ``namespace`` only (so tests never share an operator). Every
    process still running at the end is stopped with SIGTERM and must exit 0. Logs:
    .cache/e2e-logs/<namespace>-<n>.log."""
    started: list[OperatorProcess] = []

    def start(
        *args: str,
        kubeconfig: str | Path | None = None,
        command_prefix: tuple[str, ...] = (),
        wait_ready: bool = True,
        **env: str,
    ) -> OperatorProcess:
        op = OperatorProcess(
            kubeconfig=str(kubeconfig or default_kubeconfig),
            log_path=CACHE / "e2e-logs" / f"{namespace}-{len(started)}.log",
            args=("--namespace", namespace, "--log-level", "debug", *args),
            env=env,
            command_prefix=command_prefix,
        )
        started.append(op)
        try:
            op.start(wait_ready=wait_ready)
        except RuntimeError as e:
            pytest.fail(str(e), pytrace=False)
        return op

    default_kubeconfig = kubeconfig
    yield start
    for op in started:
        if op.alive():
            code = op.stop()
            assert code == 0, f"operator exited {code} on SIGTERM:\n{op.log_tail()}"


@pytest.fixture
def start_operator(cluster: LocalCluster, namespace: str) -> Iterator[OperatorFactory]:
    """Operators as the cluster's admin (see :func:`operator_factory`)."""
    with operator_factory(cluster.kubeconfig, namespace) as start:
        yield start


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    """A client of the test's own (the cluster's admin, generous client-side limits)."""
    async with await KubeClient.from_config(
        cluster.kubeconfig, user_agent=TEST_AGENT, qps=200, burst=400
    ) as c:
        yield c


@pytest.fixture
def operator(start_operator: OperatorFactory) -> OperatorProcess:
    """One operator for this test's namespace, with default flags."""
    return start_operator()


#: A device resource the pool's nodes declare (jobs take one per Worker).
DEVICE = "huawei.com/Ascend910"
#: The label (and taint) that keeps a test's pool for its own jobs.
POOL_LABEL = "msop-e2e/pool"


Pool = Callable[..., list[str]]


@pytest.fixture
def pool(cluster: LocalCluster, namespace: str) -> Iterator[Pool]:
    """``pool(nodes, devices, labels)``: kwok nodes with ``devices`` Ascend devices each
    (and ``labels``), tainted for this test's jobs only; deleted afterwards."""
    made: list[str] = []

    def make(nodes: int = 2, devices: int = 2, labels: dict[str, str] | None = None) -> list[str]:
        names = []
        for _ in range(nodes):
            name = f"{namespace}-n{len(made)}"
            capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", DEVICE: str(devices)}
            node = fake_node(
                name, pod_cidr(50 + len(made)), capacity, {POOL_LABEL: namespace, **(labels or {})},
                [{"key": POOL_LABEL, "value": namespace, "effect": "NoSchedule"}],
            )  # fmt: skip
            cluster.kubectl("apply", "-f", "-", input=json.dumps(node))
            made.append(name)
            names.append(name)
        for name in names:
            cluster.kubectl("wait", "--for=condition=Ready", "--timeout=60s", f"node/{name}")
        return names

    yield make
    # Pods that terminate for their grace period still count as used in Volcano's
    # accounting, and slowed the tests after them: end this test's jobs at once.
    cluster.kubectl("delete", "msjobs", "--all", "-n", namespace, "--wait=false", check=False)
    cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force",
                    check=False)  # fmt: skip
    if made:
        cluster.kubectl("delete", "node", *made, "--wait=false", check=False)
