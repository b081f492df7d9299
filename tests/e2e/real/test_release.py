"""msop installed from its release on the real node, upgraded and uninstalled, as
docs/tasks/install.md, upgrade.md and uninstall.md tell users.

The release is built once (fixture ``releases``) by hack/release.py's ``build``, the code
``make release`` runs, into ``.cache/real/release/dist`` for the version pyproject.toml
holds (X.Y.Z): the operator image as an OCI archive, built and labelled for the release
and named ``docker.io/library/msop:X.Y.Z`` (not the tier's test image), ``install.yaml``,
the packaged chart and ``SHA256SUMS``; the wheel and sdist are left out. The release after
it, X.Y.(Z+1), is made from it without a second build (``tests.e2e.real.release``): the
image relabelled and tagged with the new version (a new reference and image ID), the chart
repackaged with the new version. Both archives are imported into the node's containerd
with ``ctr -n k8s.io images import``, as the docs say for nodes without a registry. helm
is the one ``make helm`` builds (hack/helm).

- ``test_helm_install_runs_a_job``: the archives hold the release's image (its name, and
  its version and revision labels; the next one differs in version and image ID); ``helm
  install msop dist/msop-X.Y.Z.tgz`` into the namespace created and labelled as the docs
  say: the release is deployed, the CRD (from the chart's ``crds/``) Established, both
  replicas Ready, running the archive's image (the kubelet's imageID), and a Scheduler +
  1 Worker MSJob runs in real containers to Succeeded.
- ``test_helm_metrics_are_for_readers_only``: with the chart's defaults (secure metrics),
  each replica's ``/metrics``, reached at its pod IP through a relay into the cluster's
  network namespace, answers 401 without a token, 403 to a ServiceAccount token without
  the role and 200 with the metrics to one bound to the chart's ``msop-metrics-reader``.
- ``test_helm_upgrade_leaves_a_training_job_alone``: while real MindSpore trains
  (examples/mindspore, Scheduler + 2 Workers, past its first epoch), the upgrade as
  documented: the new chart's CRD with ``kubectl apply --server-side --force-conflicts``
  (the same CRD here; tests/e2e/kwok/test_crd_upgrade.py changes it), then ``helm
  upgrade msop dist-next/msop-X.Y.(Z+1).tgz``. The Deployment rolls through its two
  replicas: afterwards both pods are new, Ready and run the new image, and one of them
  holds the Lease. The job was still training when the rollout ended, and no pod of it was
  created or deleted meanwhile: the API server's audit log between the upgrade and the end
  of the rollout has no pod create, eviction or delete in the job's namespace, and the
  pods' UIDs and restart counts are unchanged. The job then Succeeds, with no restart
  counted, its Workers the same pods, each having trained once from the start (no resume)
  to the end, and no restart, lost-member or failure Event.
- ``test_helm_uninstall_leaves_only_the_crd``: docs/tasks/uninstall.md, "Remove
  everything", as written: the MSJobs deleted first (none left, nor a Workload of msop's
  when Kueue's API is installed), ``helm uninstall`` and ``kubectl delete namespace``:
  nothing of msop is left but the CRD (Helm keeps it); then ``kubectl delete crd``, and
  nothing is left.
- ``test_install_yaml_runs_a_job_then_uninstalls``: ``sha256sum -c SHA256SUMS``, ``kubectl
  apply --server-side -f install.yaml`` and ``rollout status``: both replicas run the
  archive's image and the same MSJob Succeeds; then the documented uninstall (MSJobs
  first, ``kubectl delete -f install.yaml``) leaves nothing, the CRD included.

"Nothing left" (:func:`leftovers`): no object of the kinds msop's installs make labelled
``app.kubernetes.io/name=msop`` or ``part-of=msop`` in any namespace, no Helm release
record, no namespace msop-system, no CRD, and no pod, Service or Kueue Workload of msop's
jobs held by a finalizer (msop has no finalizer of its own; Kueue's
``kueue.x-k8s.io/resource-in-use`` on Workloads is the one only msop removes).

Order. The rest of the tier shares one install of msop, ``kubectl apply -k`` of
config/default (the ``installed`` fixture), and a release cannot own the same CRD,
namespace and cluster roles beside it. So this module runs after every other module of
the tier (conftest.py's ``pytest_collection_modifyitems`` puts it last, whatever the
names), and its fixture ``clean_cluster`` first removes the shared install as the
uninstall page says for kustomize (the MSJobs, then ``kubectl delete -k`` of the overlay,
which takes the CRD along), with the role and binding of config/components/kueue that
test_kueue.py added. The tests then run in file order, on one Helm release (fixture
``helm_release``) that the fourth test uninstalls; the fifth starts from whatever is left
(it removes what a failed test above left). At the end ``clean_cluster`` removes anything
a failed test left, and installs the shared install again only if a test collected after
this module uses ``installed`` (none does today).

Time, on the 2-core machine (estimated, not yet measured): the release's image build
dominates (the Dockerfile built as ``make release`` builds it, a minute or two: it is the
release's own, so the tier's cached operator image cannot stand in; the base image and
the wheelhouse are the tier's cached ones), the next release some 20 s, the upgrade test
as long as the job takes (``STEP_DELAY`` below: about a minute of steps, after MindSpore
starts), each install and uninstall 20-30 s.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from msop.api.constants import LABEL_OPERATOR_NAME, OPERATOR_NAME
from testbed.examples import MINDSPORE_JOB as NAME
from testbed.examples import mindspore_example
from testbed.paths import CACHE, REPO
from testbed.realnode import NodeImages, RealCluster, write_overlay
from testbed.serviceaccount import service_account_token, service_account_user
from tests.e2e.msjobs import (
    event_reasons,
    get,
    is_true,
    job_pods,
    sample,
    wait_condition,
    wait_events,
    wait_for,
)
from tests.e2e.real.install import DEPLOYMENT, LEASE, OPERATOR_NAMESPACE, wait_available
from tests.e2e.real.joblogs import JobLogs
from tests.e2e.real.release import (
    VERSION_LABEL,
    Helm,
    Release,
    build_dist,
    hack_release,
    helm_binary,
    import_image,
    next_release,
)
from tests.e2e.real.training import (
    PRINT_ENV,
    apply,
    apply_job,
    real_job,
    wait_training,
    worker_records,
)

JSON = dict[str, Any]
NS = OPERATOR_NAMESPACE
#: The Helm release's name: the docs' (objects are then named as with kustomize).
RELEASE = "msop"
CRD = "msjobs.mindspore.gitee.com"
CRD_OBJECT = f"customresourcedefinition.apiextensions.k8s.io/{CRD}"
READER_ROLE = "msop-metrics-reader"
OPERATOR_SELECTOR = f"{LABEL_OPERATOR_NAME}={OPERATOR_NAME}"
#: Seconds after each of the job's 200 training steps: it trains for about a minute, past
#: a rollout of two replicas (each new pod Ready in 5-10 s, then an old one stops).
STEP_DELAY = "0.3"
#: Every kind that msop's installs make (the CRD, the admission policy, the cluster roles,
#: and in msop-system the Deployment's objects, the Service, the PDB, the Lease's Role)
#: and what Helm keeps of a release (Secrets labelled owner=helm).
KINDS = ",".join((
    "customresourcedefinitions", "validatingadmissionpolicies",
    "validatingadmissionpolicybindings", "clusterroles", "clusterrolebindings", "namespaces",
    "deployments", "replicasets", "pods", "services", "endpointslices", "serviceaccounts",
    "roles", "rolebindings", "poddisruptionbudgets", "configmaps", "secrets", "leases",
))  # fmt: skip
MSOP_SELECTORS = ("app.kubernetes.io/name=msop", "app.kubernetes.io/part-of=msop",
                  f"owner=helm,name={RELEASE}")  # fmt: skip


@dataclass(frozen=True)
class Releases:
    first: Release
    """X.Y.Z, pyproject.toml's version: dist/ as ``make release`` writes it."""
    second: Release
    """X.Y.(Z+1), made from ``first``: the upgrade's target."""
    helm: Helm


# --- the cluster's state, for failure messages and checks ------------------------------


def diagnostics(cluster: RealCluster, *namespaces: str) -> str:
    """The pods and Events of msop-system and of ``namespaces``."""
    out = []
    for ns in (NS, *namespaces):
        pods = cluster.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False)
        evs = cluster.kubectl("get", "events", "-n", ns, check=False)
        out.append(f"--- pods in {ns}:\n{(pods.stdout or pods.stderr).strip()}")
        out.append(f"--- events in {ns}:\n{(evs.stdout or evs.stderr).strip()[-3000:]}")
    return "\n".join(out)


def documented(cluster: RealCluster, *args: str, timeout: float = 180) -> str:
    """One kubectl command of the docs, as written; AssertionError with its output and the
    cluster's state when it fails or takes longer than ``timeout``."""
    try:
        proc = cluster.kubectl(*args, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"kubectl {' '.join(args)} did not end within {timeout}s\n{diagnostics(cluster)}"
        ) from None
    if proc.returncode != 0:
        raise AssertionError(
            f"kubectl {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}"
            f"\n{diagnostics(cluster)}"
        )
    return proc.stdout


def helm_step(cluster: RealCluster, helm: Helm, *args: str) -> str:
    """One helm command of the docs; its failure says what the cluster shows."""
    try:
        return helm(*args).stdout
    except subprocess.TimeoutExpired:
        raise AssertionError(f"helm {' '.join(args)} timed out\n{diagnostics(cluster)}") from None
    except AssertionError as e:
        raise AssertionError(f"{e}\n{diagnostics(cluster)}") from None


def kueue_api(cluster: RealCluster) -> bool:
    """Kueue's Workload API is installed (test_kueue.py installs it for the session)."""
    return cluster.kubectl("get", "crd", "workloads.kueue.x-k8s.io", check=False).returncode == 0


def held_by_finalizers(cluster: RealCluster) -> list[str]:
    """Pods, Services and (with Kueue's API) Workloads of msop's jobs that a finalizer holds."""
    kinds = "pods,services" + (",workloads.kueue.x-k8s.io" if kueue_api(cluster) else "")
    out = cluster.kubectl("get", kinds, "-A", "-l", OPERATOR_SELECTOR, "-o", "json").stdout
    return [
        f"{o['kind']} {o['metadata'].get('namespace')}/{o['metadata']['name']}: {fins}"
        for o in json.loads(out)["items"]
        if (fins := o["metadata"].get("finalizers"))
    ]


def leftovers(cluster: RealCluster) -> list[str]:
    """What is left of msop (see the module's docstring), by ``kubectl get -o name``."""
    found: set[str] = set()
    for selector in MSOP_SELECTORS:
        proc = cluster.kubectl("get", KINDS, "-A", "-l", selector, "-o", "name", check=False)
        assert proc.returncode == 0, f"kubectl get {KINDS}: {proc.stderr}"
        found.update(proc.stdout.split())
    if cluster.kubectl("get", "namespace", NS, check=False).returncode == 0:
        found.add(f"namespace/{NS}")
    if cluster.kubectl("get", "crd", CRD, check=False).returncode == 0:
        found.add(CRD_OBJECT)
    found.update(held_by_finalizers(cluster))
    return sorted(found)


def all_operator_pods(cluster: RealCluster) -> list[JSON]:
    """The operator's pods, terminating ones included."""
    out = cluster.kubectl(
        "get", "pods", "-n", NS, "-l", "app.kubernetes.io/name=msop", "-o", "json"
    ).stdout
    pods: list[JSON] = json.loads(out)["items"]
    return pods


def wait_operator_pods(
    cluster: RealCluster,
    release: Release,
    details: Callable[[], str] | None = None,
    replicas: int = 2,
    timeout: float = 120,
) -> list[JSON]:
    """Wait until the operator has exactly ``replicas`` pods, none terminating, all Ready
    and running ``release``'s image (:meth:`Release.mismatch`)."""
    why = [""]

    def check() -> list[JSON] | None:
        pods = all_operator_pods(cluster)
        wrong = [m for p in pods if (m := release.mismatch(p))]
        for p in pods:
            name = p["metadata"]["name"]
            statuses = p.get("status", {}).get("containerStatuses") or []
            if p["metadata"].get("deletionTimestamp"):
                wrong.append(f"{name} is terminating")
            elif not statuses or not all(s.get("ready") for s in statuses):
                wrong.append(f"{name} is not Ready")
        if len(pods) != replicas:
            wrong.append(f"{len(pods)} pods, not {replicas}")
        why[0] = "; ".join(wrong)
        return None if wrong else pods

    def more() -> str:
        return f"{why[0]}\n{details() if details else diagnostics(cluster)}"

    pods: list[JSON] = wait_for(
        f"{replicas} operator pods, Ready and all running {release.reference} (the "
        f"{release.version} archive's image)",
        check, timeout, interval=1, details=more,
    )  # fmt: skip
    return pods


def lease_holder(cluster: RealCluster) -> str:
    proc = cluster.kubectl(
        "get", "lease", LEASE, "-n", NS, "-o", "jsonpath={.spec.holderIdentity}", check=False
    )
    return proc.stdout.strip().split("_")[0] if proc.returncode == 0 else ""


def pod_writes(audit_log: Path, ns: str, start: int, end: int) -> list[str]:
    """The pod creates, evictions and deletes in ``ns`` that the API server's audit log
    holds between the byte offsets ``start`` and ``end``."""
    assert end >= start, f"the audit log shrank ({start} -> {end} bytes): rotated?"
    with audit_log.open("rb") as f:
        f.seek(start)
        data = f.read(max(0, end - start))
    found = []
    for line in data.decode(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a line cut by an offset
        ref = ev.get("objectRef") or {}
        if ref.get("resource") != "pods" or ref.get("namespace") != ns:
            continue
        verb, sub = ev.get("verb"), ref.get("subresource")
        if (verb == "create" and sub in (None, "eviction")) or (
            verb in ("delete", "deletecollection") and sub is None
        ):
            user = (ev.get("user") or {}).get("username")
            code = (ev.get("responseStatus") or {}).get("code")
            found.append(f"{verb} pods/{ref.get('name', '')}{'/' + sub if sub else ''} "
                         f"by {user}: {code}")  # fmt: skip
    return found


def run_small_job(cluster: RealCluster, ns: str, images: NodeImages) -> None:
    """The tier's smallest real job (as test_monitoring.py's): the dataparallel sample
    with a Scheduler and one Worker that print their MS_* environment, to Succeeded."""
    job = real_job(
        sample("ms_wide_deep_dataparallel.yaml"), images.python.ref,
        {"Scheduler": PRINT_ENV, "Worker": PRINT_ENV}, workers=1,
    )  # fmt: skip
    name = apply_job(cluster, ns, job)
    wait_condition(cluster, ns, name, "Succeeded", timeout=120,
                   details=lambda: diagnostics(cluster, ns))  # fmt: skip
    wait_events(cluster, ns, name, "MSJobSucceeded")


def delete_jobs_as_documented(cluster: RealCluster) -> None:
    """docs/tasks/uninstall.md, "Remove everything", step 1: delete the MSJobs while msop
    runs, and see that none is left (nor, with Kueue, a Workload of msop's)."""
    documented(cluster, "delete", "msjobs", "--all", "-A", "--wait=true")
    left = documented(cluster, "get", "msjobs", "-A")
    assert not left.strip(), f"MSJobs left after `kubectl delete msjobs --all -A`:\n{left}"
    if kueue_api(cluster):
        wait_for(
            "no Workload of msop's left",
            lambda: not documented(cluster, "get", "workloads.kueue.x-k8s.io", "-A", "-l",
                                     OPERATOR_SELECTOR)
            .strip(),
            timeout=60, details=lambda: diagnostics(cluster),
        )  # fmt: skip


def purge(cluster: RealCluster, releases: Releases) -> None:
    """Remove whatever of msop is left, however it was installed (a test failed half-way):
    best effort, each step may find nothing."""
    steps: list[tuple[str, ...]] = []
    if cluster.kubectl("get", "crd", CRD, check=False).returncode == 0:
        steps.append(("delete", "msjobs", "--all", "-A"))
    steps += [
        ("delete", "-f", str(releases.first.install_yaml), "--ignore-not-found"),
        ("delete", "namespace", NS, "--ignore-not-found"),
        ("delete", "crd", CRD, "--ignore-not-found"),
        *(("delete", "clusterroles,clusterrolebindings,validatingadmissionpolicies,"
           "validatingadmissionpolicybindings", "-l", selector, "--ignore-not-found")
          for selector in MSOP_SELECTORS[:2]),
    ]  # fmt: skip
    with contextlib.suppress(subprocess.TimeoutExpired):
        releases.helm("uninstall", RELEASE, "-n", NS, check=False)
    for args in steps:
        with contextlib.suppress(subprocess.TimeoutExpired):
            cluster.kubectl(*args, "--timeout=120s", check=False, timeout=150)


def later_tests_use_the_shared_install(request: pytest.FixtureRequest) -> bool:
    """A test collected after this module uses ``installed``."""
    items = request.session.items
    mine = [i for i, item in enumerate(items) if item.path == request.path]
    return bool(mine) and any(
        "installed" in getattr(item, "fixturenames", ()) for item in items[mine[-1] + 1 :]
    )


# --- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def releases(real_cluster: RealCluster) -> Releases:
    """X.Y.Z built as ``make release`` builds it, X.Y.(Z+1) made from it, both images
    imported into the node's containerd."""
    base = CACHE / "real" / "release"
    started = time.monotonic()
    try:
        helm = Helm(helm_binary(), real_cluster.kubeconfig, base / "helm")
        first = build_dist(base / "dist")
        built = time.monotonic()
        second = next_release(first, base / "dist-next", helm)
        for release in (first, second):
            import_image(real_cluster, release)
    except Exception as e:  # a build step, helm or ctr: every test here fails with it
        pytest.fail(f"building or importing the release failed:\n{e}", pytrace=False)
    print(
        f"\nrelease {first.version} built in {built - started:.1f}s; {second.version} made "
        f"and both imported in {time.monotonic() - built:.1f}s"
    )
    return Releases(first, second, helm)


@pytest.fixture(scope="module")
def clean_cluster(
    request: pytest.FixtureRequest,
    real_cluster: RealCluster,
    images: NodeImages,
    releases: Releases,
) -> Iterator[Releases]:
    """No msop in the cluster: the shared kustomize install removed as documented, if the
    session made it. Afterwards, whatever the tests left is removed, and the shared install
    is applied again if a later test uses it."""
    cluster = real_cluster
    overlay = write_overlay(
        CACHE / "real" / "overlay", images.operator.ref, REPO / "config/default"
    )
    dep = get(cluster, NS, "deployment", DEPLOYMENT) or {"metadata": {}}
    if dep["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "kustomize":
        started = time.monotonic()
        delete_jobs_as_documented(cluster)
        documented(cluster, "delete", "-k", str(overlay), "--ignore-not-found", timeout=240)
        # test_kueue.py applied the overlay again with config/components/kueue: its role.
        documented(cluster, "delete", "clusterrole,clusterrolebinding", "-l",
                   "app.kubernetes.io/name=msop", "--ignore-not-found")  # fmt: skip
        print(f"\nthe shared install removed in {time.monotonic() - started:.1f}s")
    left = leftovers(cluster)
    if left:
        pytest.fail(f"msop is still in the cluster before the release tests: {left}")
    yield releases
    purge(cluster, releases)
    left = leftovers(cluster)
    assert not left, f"msop objects the release tests left behind: {left}"
    if later_tests_use_the_shared_install(request):
        cluster.kubectl("apply", "-k", str(overlay))
        wait_available(cluster)


@pytest.fixture(scope="module")
def helm_release(clean_cluster: Releases, real_cluster: RealCluster) -> Releases:
    """docs/tasks/install.md, "With Helm": the namespace, labelled for the Pod Security
    Standard, then ``helm install`` of the packaged chart. The image is in the node's
    containerd under the name the chart means (``msop:X.Y.Z``): no image.repository."""
    cluster, releases = real_cluster, clean_cluster
    documented(cluster, "create", "namespace", NS)
    documented(cluster, "label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
    helm_step(cluster, releases.helm, "install", RELEASE, str(releases.first.chart), "-n", NS)
    wait_available(cluster)
    return releases


# --- tests --------------------------------------------------------------------------------


def test_helm_install_runs_a_job(
    helm_release: Releases, real_cluster: RealCluster, namespace: str, images: NodeImages
) -> None:
    cluster, releases = real_cluster, helm_release
    first, second = releases.first, releases.second
    release = hack_release()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    # The archives hold the releases' images, named as install.yaml's and the chart's
    # msop:X.Y.Z mean on a node.
    assert first.image.ref == release.image_reference("msop", first.version), first.image
    assert first.image.labels.get(VERSION_LABEL) == first.version, first.image.labels
    assert first.image.labels.get("org.opencontainers.image.revision") == head
    assert second.image.ref == release.image_reference("msop", second.version), second.image
    assert second.image.labels.get(VERSION_LABEL) == second.version, second.image.labels
    assert second.image.config != first.image.config

    status = json.loads(
        helm_step(cluster, releases.helm, "status", RELEASE, "-n", NS, "-o", "json")
    )
    assert status["info"]["status"] == "deployed", status["info"]
    listed = json.loads(helm_step(cluster, releases.helm, "list", "-n", NS, "-o", "json"))
    (entry,) = [r for r in listed if r["name"] == RELEASE]
    assert entry["chart"] == f"msop-{first.version}", entry
    assert entry["app_version"] == first.version, entry
    # The CRD came from the chart's crds/ (there was none before).
    wait_for(
        "the MSJob CRD Established",
        lambda: cluster.kubectl(
            "get", "crd", CRD, "-o",
            "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False,
        ).stdout.strip() == "True",
        timeout=30,
    )  # fmt: skip
    dep = get(cluster, NS, "deployment", DEPLOYMENT)
    assert dep is not None
    labels = dep["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "Helm", labels
    assert labels["app.kubernetes.io/version"] == first.version, labels
    wait_operator_pods(cluster, first)
    run_small_job(cluster, namespace, images)


def scrape(url: str, token: str | None) -> tuple[int, str] | None:
    """GET ``url`` (HTTPS, msop's self-signed certificate not verified, as a Prometheus
    with ``insecure_skip_verify``), with the bearer ``token``: ``(status, body)``, or None
    when nothing answers."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None


def test_helm_metrics_are_for_readers_only(
    helm_release: Releases, real_cluster: RealCluster, namespace: str
) -> None:
    cluster = real_cluster
    service = get(cluster, NS, "service", f"{DEPLOYMENT}-metrics")
    assert service is not None
    assert service["metadata"]["annotations"]["prometheus.io/scheme"] == "https", service

    binding = f"{namespace}-metrics-reader"
    for sa in ("scraper", "stranger"):
        documented(cluster, "create", "serviceaccount", sa, "-n", namespace)
    documented(cluster, "create", "clusterrolebinding", binding, f"--clusterrole={READER_ROLE}",
               f"--serviceaccount={namespace}:scraper")  # fmt: skip

    def can_get_metrics(sa: str) -> bool:
        user = service_account_user(sa, namespace)
        proc = cluster.kubectl("auth", "can-i", "get", "/metrics", f"--as={user}", check=False)
        return proc.stdout.strip() == "yes"

    try:
        # msop caches a 403 for 30 s: scrape only once the authorizer has the binding.
        wait_for("the chart's metrics-reader role bound to the scraper",
                 lambda: can_get_metrics("scraper"), timeout=30)  # fmt: skip
        assert not can_get_metrics("stranger")
        tokens = {sa: service_account_token(cluster, sa, namespace)
                  for sa in ("scraper", "stranger")}  # fmt: skip
        pods = wait_operator_pods(cluster, helm_release.first)
        for pod in pods:
            (container,) = pod["spec"]["containers"]
            port = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
            # Pod IPs live in the cluster's network namespace: a relay from the host's loopback.
            relay = cluster.expose(f"{pod['status']['podIP']}:{port}")
            url = f"https://127.0.0.1:{relay}/metrics"
            name = pod["metadata"]["name"]

            def anonymous_scrape(url: str = url) -> tuple[int, str] | None:
                return scrape(url, None)

            anonymous = wait_for(f"{name}'s /metrics to answer", anonymous_scrape, timeout=30,
                                 interval=1, details=lambda: diagnostics(cluster))  # fmt: skip
            assert anonymous[0] == 401, (name, anonymous)
            stranger = scrape(url, tokens["stranger"])
            assert stranger is not None and stranger[0] == 403, (name, stranger)
            reader = scrape(url, tokens["scraper"])
            assert reader is not None and reader[0] == 200, (name, reader)
            assert "leader_election_master_status" in reader[1], (name, reader[1][:500])
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found", check=False)


def test_helm_upgrade_leaves_a_training_job_alone(
    helm_release: Releases,
    real_cluster: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    tmp_path: Path,
) -> None:
    cluster, releases = real_cluster, helm_release
    first, second = releases.first, releases.second
    config_map, job = mindspore_example(
        cluster, images.mindspore.ref, checkpoints, STEP_DELAY=STEP_DELAY
    )
    apply(cluster, namespace, config_map, job)
    with JobLogs(cluster, namespace, NAME) as logs:

        def details() -> str:
            return f"{logs.tail()}\n{diagnostics(cluster, namespace)}"

        wait_training(cluster, namespace, f"{NAME}-worker-0", 1, logs)
        before = job_pods(cluster, namespace, NAME)
        assert sorted(before) == [f"{NAME}-scheduler-0", f"{NAME}-worker-0",
                                  f"{NAME}-worker-1"], sorted(before)  # fmt: skip
        old = {p["metadata"]["uid"] for p in all_operator_pods(cluster)}
        assert len(old) == 2 and not [m for p in all_operator_pods(cluster)
                                      if (m := first.mismatch(p))]  # fmt: skip
        mark = cluster.audit_log.stat().st_size
        started = time.monotonic()

        # docs/tasks/upgrade.md: the new chart's CRD first, then the chart, with the values
        # given at install (none).
        crd = "msop/crds/mindspore.gitee.com_msjobs.yaml"
        subprocess.run(["tar", "xzf", str(second.chart), crd], cwd=tmp_path, check=True)
        documented(
            cluster, "apply", "--server-side", "--force-conflicts", "-f", str(tmp_path / crd)
        )
        helm_step(cluster, releases.helm, "upgrade", RELEASE, str(second.chart), "-n", NS)
        documented(cluster, "-n", NS, "rollout", "status", f"deployment/{DEPLOYMENT}",
                   "--timeout=180s", timeout=200)  # fmt: skip
        new = wait_operator_pods(cluster, second, details=details)
        rolled = time.monotonic() - started
        new_names = {p["metadata"]["name"] for p in new}
        assert not old & {p["metadata"]["uid"] for p in new}, "a replica was not replaced"

        now = get(cluster, namespace, "msjob", NAME)
        assert not is_true(now, "Succeeded") and not is_true(now, "Failed"), (
            f"the job ended before the rollout did ({rolled:.0f}s): the upgrade did not happen "
            f"under training (lengthen STEP_DELAY); status: {(now or {}).get('status')}"
        )
        after = job_pods(cluster, namespace, NAME)
        time.sleep(1)  # the audit log written up to the rollout's end
        during = pod_writes(cluster.audit_log, namespace, mark, cluster.audit_log.stat().st_size)
        assert during == [], f"pods of the job written during the upgrade: {during}"
        assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
            n: p["metadata"]["uid"] for n, p in before.items()
        }

        def restarts(pods: dict[str, JSON]) -> dict[str, list[int]]:
            out = {}
            for name, pod in pods.items():
                statuses = pod["status"].get("containerStatuses") or []
                out[name] = [s.get("restartCount", 0) for s in statuses]
            return out

        assert restarts(after) == restarts(before), (restarts(before), restarts(after))
        holder = wait_for("a new replica to hold the Lease",
                          lambda: (h := lease_holder(cluster)) in new_names and h,
                          timeout=60, details=details)  # fmt: skip
        done = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300, details=details)

    status = done["status"]
    assert not any(s.get("restarts") for s in status["replicaStatuses"].values()), status
    final = {n: p["metadata"]["uid"] for n, p in job_pods(cluster, namespace, NAME).items()}
    for i in range(2):
        worker = f"{NAME}-worker-{i}"
        assert final.get(worker) == before[worker]["metadata"]["uid"], (worker, final)
    for pod, lines in worker_records(cluster, namespace, 2).items():
        starts = [r["event"] for r in lines if r.get("event") in ("fresh", "resume")]
        assert starts == ["fresh"], (pod, starts)
        assert lines[-1].get("event") == "done" and lines[-1].get("trained") is True, lines[-1]
    reasons = event_reasons(cluster, namespace, NAME)
    unwanted = {"MSJobRestarting", "MSJobMemberLost", "ExitedWithCode", "ForceDeletedStuckPod",
                "MSJobFailed"}  # fmt: skip
    assert not reasons & unwanted, reasons
    print(f"\n{first.version} -> {second.version} rolled out in {rolled:.1f}s under a training "
          f"job; {holder} leads")  # fmt: skip


def test_helm_uninstall_leaves_only_the_crd(
    helm_release: Releases, real_cluster: RealCluster
) -> None:
    cluster, releases = real_cluster, helm_release
    # docs/tasks/uninstall.md, "Remove everything". 1: the MSJobs, while msop runs.
    delete_jobs_as_documented(cluster)
    # 2: msop; Helm keeps the CRD.
    helm_step(cluster, releases.helm, "uninstall", RELEASE, "-n", NS)
    documented(cluster, "delete", "namespace", NS)
    listed = json.loads(helm_step(cluster, releases.helm, "list", "-A", "-o", "json"))
    assert RELEASE not in {r["name"] for r in listed}, listed
    assert leftovers(cluster) == [CRD_OBJECT]
    # 3: the CRD.
    documented(cluster, "delete", "crd", CRD)
    assert leftovers(cluster) == []


def test_install_yaml_runs_a_job_then_uninstalls(
    clean_cluster: Releases, real_cluster: RealCluster, namespace: str, images: NodeImages
) -> None:
    cluster, releases = real_cluster, clean_cluster
    first = releases.first
    if leftovers(cluster):  # a Helm test above failed half-way
        purge(cluster, releases)
    assert leftovers(cluster) == []
    # docs/tasks/install.md, "With kubectl".
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=first.dist,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert sums.returncode == 0, sums.stdout + sums.stderr
    documented(cluster, "apply", "--server-side", "-f", str(first.install_yaml))
    documented(cluster, "-n", NS, "rollout", "status", f"deployment/{DEPLOYMENT}",
               "--timeout=180s", timeout=200)  # fmt: skip
    wait_available(cluster)
    wait_operator_pods(cluster, first)
    run_small_job(cluster, namespace, images)
    # docs/tasks/uninstall.md, "Remove everything": the MSJobs first, then the file, which
    # takes the CRD along.
    delete_jobs_as_documented(cluster)
    documented(cluster, "delete", "-f", str(first.install_yaml), timeout=240)
    assert leftovers(cluster) == []
