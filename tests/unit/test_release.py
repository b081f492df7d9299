"""The release: one version everywhere, and the Helm chart that installs what config/ does.

helm and kustomize are the real tools, built from their Go modules by hack/helm/build.sh
(``make unit`` depends on ``make helm``; the first call here builds them otherwise).

The chart (charts/msop) and config/ are two spellings of one install. With the same
choices they must render the same objects, compared as parsed objects after the
normalization of :func:`normalize`, which removes only what must differ:

- the labels ``app.kubernetes.io/instance`` and ``app.kubernetes.io/version`` (Helm's
  release and chart, which kustomize has no notion of) and ``app.kubernetes.io/managed-by``
  (the tool: Helm or kustomize), wherever labels are (metadata, selectors, pod templates,
  the anti-affinity's selector). Tests below check that each side sets them as it should;
- config/'s Namespace: Helm installs into the release's namespace (``--create-namespace``);
- ``metadata.namespace`` on cluster-scoped objects: kustomize's namespace transformer sets
  it on the ValidatingAdmissionPolicy and its binding, kinds it does not know to be
  cluster-scoped (the API server ignores it);
- the operator's args, compared as ``msop run`` parses them (msop.cli.flags), not as
  strings: the chart spells out every flag, config/manager only the ones it changes.

Metrics security follows config/: the chart is rendered with ``metrics.secure`` set to
whether config/default grants the TokenReview/SubjectAccessReview creates that secure
metrics need, and ``--metrics-secure`` is dropped from the chart's args only while msop's
parser does not know the flag. Everything else, every field of every object, must be equal,
so a change to config/ without the chart (or the other way round) fails here.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

import msop
from msop.cli.flags import RUN_ENV, build_parser, parse_args
from testbed.paths import CACHE, REPO

JSON = dict[str, Any]
CONFIG = REPO / "config"
CHART = REPO / "charts" / "msop"
RELEASE = "msop"
NAMESPACE = "msop-system"

#: Labels only one side can have (Helm's release and chart), or that name the tool.
UNCOMPARED_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)
RECOMMENDED = ("name", "instance", "version", "component", "part-of", "managed-by")
CLUSTER_SCOPED = {
    "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}  # fmt: skip
#: The chart values that turn on what each component of config/components adds.
COMPONENT_VALUES = {"volcano": "gangScheduling.enabled=true", "kueue": "kueue.enabled=true"}


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release = _load("release", REPO / "hack" / "release.py")
gen_crd = _load("gen_crd", REPO / "hack" / "gen_crd.py")


@cache
def tools() -> Path:
    return Path(release.release_tools())


def _run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@cache
def _parsed(text: str) -> tuple[JSON, ...]:
    # libyaml's loader where PyYAML has it: the CRD alone takes the pure-Python one 0.5 s.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(d for d in yaml.load_all(text, Loader=loader) if d)


def _docs(text: str) -> list[JSON]:
    """The documents of a multi-document YAML (a fresh copy: tests may change them)."""
    return copy.deepcopy(list(_parsed(text)))


@cache
def _kustomize_text(components: tuple[str, ...] = (), base: str = "default") -> str:
    """``kustomize build`` of config/<base>, or of an overlay of it with ``components``."""
    if not components:
        return _run(str(tools() / "kustomize"), "build", str(CONFIG / base))
    overlay = CACHE / "unit-overlays" / "-".join(components)
    overlay.mkdir(parents=True, exist_ok=True)
    (overlay / "kustomization.yaml").write_text(
        json.dumps({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(CONFIG / base, overlay)],
            "components": [os.path.relpath(CONFIG / "components" / c, overlay) for c in components],
        })
    )  # fmt: skip
    return _run(str(tools() / "kustomize"), "build", str(overlay))


def kustomize(*components: str, base: str = "default") -> list[JSON]:
    return _docs(_kustomize_text(tuple(components), base))


@cache
def _helm_text(values: tuple[str, ...], crds: bool) -> str:
    sets = [arg for v in values for arg in ("--set", v)]
    return _run(str(tools() / "helm"), "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                *(["--include-crds"] if crds else []), *sets)  # fmt: skip


def helm(*values: str, crds: bool = True) -> list[JSON]:
    return _docs(_helm_text(tuple(values), crds))


def by_key(objs: list[JSON]) -> dict[tuple[str, str], JSON]:
    out: dict[tuple[str, str], JSON] = {}
    for obj in objs:
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in out, f"{key} rendered twice"
        out[key] = obj
    return out


def deployment(objs: list[JSON]) -> JSON:
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    return dep


def container(objs: list[JSON]) -> JSON:
    (c,) = deployment(objs)["spec"]["template"]["spec"]["containers"]
    found: JSON = c
    return found


def images(objs: list[JSON]) -> list[str]:
    return [
        c["image"]
        for o in objs
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
        + o["spec"]["template"]["spec"].get("initContainers", [])
    ]


@pytest.fixture(autouse=True)
def _no_flag_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """msop run's flags take defaults from MSOP_* variables: none may leak in."""
    build_parser()
    for var in RUN_ENV.values():
        monkeypatch.delenv(var.name, raising=False)


def parser_knows_metrics_secure() -> bool:
    build_parser()
    return "--metrics-secure" in RUN_ENV


def parsed_args(args: list[str]) -> JSON:
    """The Deployment's args as ``msop run`` sees them (flag defaults included)."""
    return dict(vars(parse_args(args)))


def _strip_labels(node: Any) -> None:
    if isinstance(node, dict):
        for key in UNCOMPARED_LABELS:
            node.pop(key, None)
        for value in node.values():
            _strip_labels(value)
    elif isinstance(node, list):
        for value in node:
            _strip_labels(value)


def normalize(objs: list[JSON], chart: bool) -> dict[tuple[str, str], JSON]:
    """The objects, keyed by (kind, name), with only what must differ taken out (see the
    module's docstring)."""
    out = [copy.deepcopy(o) for o in objs if chart or o["kind"] != "Namespace"]
    for obj in out:
        _strip_labels(obj)
        if not obj["metadata"].get("labels"):
            obj["metadata"].pop("labels", None)
        if obj["kind"] in CLUSTER_SCOPED:
            obj["metadata"].pop("namespace", None)
        if obj["kind"] == "Deployment":
            c = obj["spec"]["template"]["spec"]["containers"][0]
            c["args"] = parsed_args(chart_args(c["args"]) if chart else c["args"])
    return by_key(out)


def chart_args(args: list[str]) -> list[str]:
    """The chart's args, less ``--metrics-secure`` while msop's parser does not know it."""
    if parser_knows_metrics_secure():
        return args
    secure = [a for a in args if a.split("=")[0] == "--metrics-secure"]
    assert len(secure) == 1, args
    return [a for a in args if a != secure[0]]


def assert_same_objects(config: list[JSON], chart: list[JSON]) -> None:
    namespaces = [o["metadata"]["name"] for o in config if o["kind"] == "Namespace"]
    assert namespaces == [NAMESPACE], "config/default creates the operator's namespace"
    want, got = normalize(config, chart=False), normalize(chart, chart=True)
    assert sorted(got) == sorted(want), (
        f"only in config/: {sorted(set(want) - set(got))}; "
        f"only in the chart: {sorted(set(got) - set(want))}"
    )
    for key in want:
        if got[key] != want[key]:
            a = yaml.safe_dump(want[key], sort_keys=True).splitlines()
            b = yaml.safe_dump(got[key], sort_keys=True).splitlines()
            diff = "\n".join(difflib.unified_diff(a, b, "config/", "chart", lineterm="", n=2))
            pytest.fail(f"{key[0]} {key[1]} differs:\n{diff}", pytrace=False)


def grants(objs: list[JSON], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", []) and resource in r.get("resources", [])
        and verb in r.get("verbs", [])
        for o in objs if o["kind"] == "ClusterRole" for r in o.get("rules", [])
    )  # fmt: skip


def config_metrics_secure(objs: list[JSON]) -> bool:
    """Whether config/ serves secure metrics (it lets msop create TokenReviews)."""
    return grants(objs, "authentication.k8s.io", "tokenreviews", "create")


def secure_value(objs: list[JSON]) -> str:
    return f"metrics.secure={str(config_metrics_secure(objs)).lower()}"


# --- the chart against config/ -----------------------------------------------------------


def test_helm_lint() -> None:
    _run(str(tools() / "helm"), "lint", "--strict", str(CHART))
    _run(str(tools() / "helm"), "lint", "--strict", str(CHART), "--set",
         "gangScheduling.enabled=true,kueue.enabled=true,metrics.serviceMonitor.enabled=true,"
         "metrics.secure=false,replicaCount=1")  # fmt: skip


def test_default_values_render_config_default() -> None:
    config = kustomize()
    assert_same_objects(config, helm(secure_value(config)))


@pytest.mark.parametrize("components", [("volcano",), ("kueue",), ("volcano", "kueue")])
def test_volcano_and_kueue_render_the_components(components: tuple[str, ...]) -> None:
    config = kustomize(*components)
    values = [COMPONENT_VALUES[c] for c in components]
    assert_same_objects(config, helm(secure_value(config), *values))


def test_service_monitor_renders_config_prometheus() -> None:
    monitor = kustomize(base="prometheus")
    chart = helm(secure_value(kustomize()), "metrics.serviceMonitor.enabled=true")
    got = [o for o in chart if o["kind"] == "ServiceMonitor"]
    assert normalize(got, chart=True) == normalize(monitor, chart=False)
    assert not [o for o in helm() if o["kind"] == "ServiceMonitor"], "off by default"


def test_the_chart_crd_is_the_generated_crd() -> None:
    # Helm installs crds/ untemplated: the file is config/'s, byte for byte.
    assert gen_crd.CHART_CRD_PATH.read_bytes() == gen_crd.CRD_PATH.read_bytes(), (
        "charts/msop/crds is stale: run make generate"
    )
    (crd,) = [o for o in helm() if o["kind"] == "CustomResourceDefinition"]
    assert crd == yaml.safe_load(gen_crd.CRD_PATH.read_text())


def test_every_flag_of_msop_run_is_a_value() -> None:
    """A flag added to msop run without the chart fails here (--kubeconfig excepted: in a
    pod msop uses its in-cluster config)."""
    chart = helm("leaderElection.namespace=leases", "watchNamespaces={a,b}",
                 "metrics.certSecret=msop-metrics-cert", "restartInPlace.agentImage=agent:1",
                 *COMPONENT_VALUES.values())  # fmt: skip
    passed = {a.split("=")[0] for a in container(chart)["args"]}
    assert set(RUN_ENV) - {"--kubeconfig"} <= passed, set(RUN_ENV) - passed
    parsed = parsed_args(chart_args(container(chart)["args"]))
    assert parsed["enable_gang_scheduling"] and parsed["enable_kueue"]
    assert parsed["namespaces"] == ["a", "b"] and parsed["leader_election_namespace"] == "leases"
    assert parsed["agent_image"] == "agent:1"
    roles = {
        o["metadata"]["namespace"]: o["metadata"]["name"].split("-")[1]
        for o in chart if o["kind"] in ("Role", "RoleBinding")
    }  # fmt: skip
    # The leader-election Role goes where the Lease is; the key's where msop runs.
    assert roles == {"leases": "leader", NAMESPACE: "restart"}
    # The certificate's Secret is mounted where --metrics-cert-dir points.
    cert_dir = parsed["metrics_cert_dir"]
    (mount,) = [m for m in container(chart)["volumeMounts"] if m["mountPath"] == cert_dir]
    volumes = deployment(chart)["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "msop-metrics-cert"
    assert "metrics_cert_dir" not in parsed_args(chart_args(container(helm())["args"])) or (
        parsed_args(chart_args(container(helm())["args"]))["metrics_cert_dir"] in (None, "")
    )


def test_values_that_change_the_pods() -> None:
    chart = helm(
        "image.repository=registry.example.com/msop", "image.tag=9.9.9", "replicaCount=3",
        "priorityClassName=system-cluster-critical", "nodeSelector.pool=ops",
        "tolerations[0].key=ops", "tolerations[0].operator=Exists",
        "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
        "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        ".preference.matchExpressions[0].key=pool",
        "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        ".preference.matchExpressions[0].operator=Exists",
        "resources.limits.memory=1Gi", "image.pullPolicy=Always",
    )  # fmt: skip
    dep = deployment(chart)
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 3
    assert container(chart)["image"] == "registry.example.com/msop:9.9.9"
    assert container(chart)["imagePullPolicy"] == "Always"
    assert container(chart)["resources"]["limits"]["memory"] == "1Gi"
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"pool": "ops"}
    assert spec["tolerations"] == [{"key": "ops", "operator": "Exists"}]
    assert set(spec["affinity"]) == {"nodeAffinity"}, "a set affinity replaces the default"
    (pdb,) = [o for o in chart if o["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["maxUnavailable"] == 1


def test_no_second_replica_without_leader_election() -> None:
    proc = subprocess.run(
        [str(tools() / "helm"), "template", RELEASE, str(CHART), "--set",
         "leaderElection.enabled=false"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "needs replicaCount: 1" in proc.stderr, proc.stderr
    dep = deployment(helm("leaderElection.enabled=false", "replicaCount=1"))
    assert "--leader-elect" not in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    roles = helm("leaderElection.enabled=false", "replicaCount=1")
    assert not [o for o in roles if o["kind"] == "Role" and "leader" in o["metadata"]["name"]]


def test_pod_disruption_budget_only_with_more_than_one_replica() -> None:
    assert [o for o in helm() if o["kind"] == "PodDisruptionBudget"]
    assert not [o for o in helm("replicaCount=1") if o["kind"] == "PodDisruptionBudget"]
    assert not [o for o in helm("podDisruptionBudget.enabled=false")
                if o["kind"] == "PodDisruptionBudget"]  # fmt: skip


def test_metrics_are_secure_by_default() -> None:
    secure, plain = helm(), helm("metrics.secure=false")
    assert "--metrics-secure" in container(secure)["args"]
    assert "--metrics-secure=false" in container(plain)["args"]
    for group, resource in (("authentication.k8s.io", "tokenreviews"),
                            ("authorization.k8s.io", "subjectaccessreviews")):  # fmt: skip
        assert grants(secure, group, resource, "create")
        assert not grants(plain, group, resource, "create")
    scheme = {
        json.dumps(o["metadata"].get("annotations", {}).get("prometheus.io/scheme"))
        for o in secure if o["kind"] == "Service"
    }  # fmt: skip
    assert scheme == {'"https"'}


def test_volcano_and_kueue_rbac_only_when_enabled() -> None:
    for objs, on in ((helm(), False), (helm(*COMPONENT_VALUES.values()), True)):
        assert grants(objs, "scheduling.volcano.sh", "podgroups", "create") is on
        assert grants(objs, "kueue.x-k8s.io", "workloads", "create") is on
        assert grants(objs, "scheduling.k8s.io", "priorityclasses", "get") is on
    # config/ the same: the manager role alone grants neither.
    assert not grants(kustomize(), "scheduling.volcano.sh", "podgroups", "create")
    assert not grants(kustomize(), "kueue.x-k8s.io", "workloads", "create")


def test_user_roles_scale_the_jobs() -> None:
    for objs in (kustomize(), helm()):
        roles = by_key(objs)
        editor = roles[("ClusterRole", "msop-msjob-editor-role")]["rules"]
        viewer = roles[("ClusterRole", "msop-msjob-viewer-role")]["rules"]
        assert {"resources": ["msjobs/scale"], "verbs": ["get", "update", "patch"],
                "apiGroups": ["mindspore.gitee.com"]} in editor  # fmt: skip
        assert {"resources": ["msjobs/scale"], "verbs": ["get"],
                "apiGroups": ["mindspore.gitee.com"]} in viewer  # fmt: skip


def test_leader_election_role_grants_only_the_leases() -> None:
    # list: with --shards, a replica counts the live replicas from the namespace's Leases.
    for objs in (kustomize(), helm()):
        (role,) = [o for o in objs if o["kind"] == "Role" and "leader" in o["metadata"]["name"]]
        assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                  "verbs": ["get", "list", "create", "update"]}]  # fmt: skip


def test_shards_pass_through_and_need_leader_election() -> None:
    args = container(helm("shards=6"))["args"]
    assert "--shards=6" in args and "--leader-elect" in args
    assert "--shards=1" in container(helm())["args"]
    for values in (("shards=6", "leaderElection.enabled=false", "replicaCount=1"), ("shards=0",)):
        with pytest.raises(AssertionError, match="shards"):
            helm(*values)


def test_the_restart_in_place_role_reads_one_secret_and_goes_with_its_flag() -> None:
    for objs in (kustomize(), helm()):
        (role,) = [o for o in objs if o["kind"] == "Role" and "restart" in o["metadata"]["name"]]
        secrets = [r for r in role["rules"] if r["resources"] == ["secrets"]]
        assert secrets == [
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["msop-agent-key"],
             "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        ]  # fmt: skip
    off = helm("restartInPlace.enabled=false")
    assert not [o for o in off if "restart-in-place" in o["metadata"]["name"]]
    assert "--restart-in-place=false" in container(off)["args"]
    rules = [r for o in off if o["kind"] == "ClusterRole" for r in o.get("rules", [])]
    # The nodes are still watched: a pod is lost from its node's first sign.
    assert [r["verbs"] for r in rules if r.get("resources") == ["nodes"]] == [["list", "watch"]]
    none = helm("restartInPlace.enabled=false", "nodeLostAfter=off")
    assert "--node-lost-after=off" in container(none)["args"]
    rules = [r for o in none if o["kind"] == "ClusterRole" for r in o.get("rules", [])]
    assert not [r for r in rules if r.get("resources") == ["nodes"]]
    only_listed = helm("nodeLostAfter=off")
    rules = [r for o in only_listed if o["kind"] == "ClusterRole" for r in o.get("rules", [])]
    assert [r["verbs"] for r in rules if r.get("resources") == ["nodes"]] == [["list"]]
    assert "--node-lost-after=10s" in container(helm())["args"]


# --- labels ------------------------------------------------------------------------------


def _labels(obj: JSON) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels


def test_chart_objects_carry_the_recommended_labels() -> None:
    version = msop_version()
    everything = helm(*COMPONENT_VALUES.values(), "metrics.serviceMonitor.enabled=true",
                      crds=False)  # fmt: skip
    for obj in everything:
        labels = _labels(obj)
        where = f"{obj['kind']} {obj['metadata']['name']}"
        assert {f"app.kubernetes.io/{k}" for k in RECOMMENDED} <= set(labels), where
        assert labels["app.kubernetes.io/managed-by"] == "Helm", where
        assert labels["app.kubernetes.io/instance"] == RELEASE, where
        assert labels["app.kubernetes.io/version"] == version, where
        assert labels["app.kubernetes.io/part-of"] == "msop", where
        assert labels["app.kubernetes.io/name"] == "msop", where
        assert labels["app.kubernetes.io/component"], where
    # Helm does not template crds/: the CRD carries the labels that do not name a release.
    (crd,) = [o for o in helm() if o["kind"] == "CustomResourceDefinition"]
    assert _labels(crd) == gen_crd.CRD_LABELS


def test_config_objects_carry_the_recommended_labels() -> None:
    everything = [*kustomize("volcano", "kueue"), *kustomize(base="prometheus")]
    for obj in everything:
        labels = _labels(obj)
        where = f"{obj['kind']} {obj['metadata']['name']}"
        assert labels.get("app.kubernetes.io/managed-by") == "kustomize", where
        assert labels.get("app.kubernetes.io/part-of") == "msop", where
        assert labels.get("app.kubernetes.io/name") == "msop", where
        assert labels.get("app.kubernetes.io/component"), where
        # No release and no version: config/ is the source, not one release of it.
        assert "app.kubernetes.io/instance" not in labels, where
        assert "app.kubernetes.io/version" not in labels, where


# --- one version -------------------------------------------------------------------------


def msop_version() -> str:
    version: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return version


def test_the_version_agrees_everywhere() -> None:
    version = msop_version()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert str(chart["version"]) == version
    assert str(chart["appVersion"]) == version
    assert release.current_version() == version
    assert images(kustomize()) == [f"msop:{version}"]
    assert images(helm()) == [f"msop:{version}"]
    assert msop.__version__ == version, "the installed metadata is stale: run make venv"


def test_no_image_is_latest() -> None:
    renders = [
        kustomize(), kustomize("volcano", "kueue"), helm(), helm(*COMPONENT_VALUES.values()),
        _docs(release.install_yaml(f"msop:{msop_version()}", tools())),
    ]  # fmt: skip
    for objs in renders:
        for image in images(objs):
            name, _, tag = image.rpartition(":")
            assert name and "/" not in tag and tag not in ("", "latest"), image
    # Nor in the files themselves (a Deployment without a tag would mean latest too).
    for path in [*CONFIG.rglob("*.yaml"), *CHART.rglob("*.yaml")]:
        text = path.read_text()
        assert not re.search(r"image:\s*\S+:latest\b", text), path
        assert not re.search(r"newTag:\s*\"?latest", text), path


def test_install_yaml_is_config_default_with_the_image() -> None:
    image = f"registry.example.com/team/msop:{msop_version()}"
    installed = _docs(release.install_yaml(image, tools()))
    want = kustomize()
    container(want)["image"] = image
    assert installed == want


def test_bump_writes_every_copy_of_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamps = {}
    for path, patterns in release._STAMPS.items():
        copy_ = tmp_path / path.relative_to(REPO)
        copy_.parent.mkdir(parents=True, exist_ok=True)
        copy_.write_text(path.read_text())
        stamps[copy_] = patterns
    monkeypatch.setattr(release, "_STAMPS", stamps)
    monkeypatch.setattr(release, "ROOT", tmp_path)
    assert sorted(release.bump("7.8.9")) == sorted(stamps)
    assert release.current_version() == "7.8.9"
    assert 'version = "7.8.9"' in (tmp_path / "pyproject.toml").read_text()
    with pytest.raises(release.ReleaseError):
        release.parse_version("1.0.0rc1")
    assert release.parse_version("v1.2.3") == "1.2.3"


def test_image_reference_is_fully_qualified() -> None:
    assert release.image_reference("msop", "1.2.3") == "docker.io/library/msop:1.2.3"
    assert release.image_reference("team/msop", "1.2.3") == "docker.io/team/msop:1.2.3"
    assert release.image_reference("reg.example.com:5000/msop", "1") == (
        "reg.example.com:5000/msop:1"
    )


def _iter_chart_files() -> Iterator[Path]:
    yield from (p for p in CHART.rglob("*") if p.is_file())


def test_packaged_chart_has_the_image_repository(tmp_path: Path) -> None:
    archive = release.package_chart(tmp_path, "registry.example.com/msop", tools())
    assert archive.name == f"msop-{msop_version()}.tgz"
    listed = _run("tar", "tzf", str(archive)).split()
    assert sorted(listed) == sorted(f"msop/{p.relative_to(CHART)}" for p in _iter_chart_files())
    values = yaml.safe_load(_run("tar", "xzf", str(archive), "-O", "msop/values.yaml"))
    assert values["image"] == {"repository": "registry.example.com/msop", "tag": "",
                               "pullPolicy": "IfNotPresent"}  # fmt: skip


def test_the_version_is_read_as_importlib_metadata_reads_it_without_loading_it() -> None:
    # The operator reads its version for msop_build_info; importlib.metadata would cost
    # its idle RSS 0.9 MiB for that one string.
    code = (
        "import sys, msop; v = msop.__version__; "
        "assert 'importlib.metadata' not in sys.modules, 'loaded'; "
        "import importlib.metadata as m; assert v == m.version('msop'), (v, m.version('msop'))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)


@pytest.mark.parametrize(
    ("release_name", "prefix"),
    [("msop", "msop"), ("msop-prod", "msop-prod"), ("training", "training-msop")],
)
def test_install_md_names_a_releases_objects_as_helm_does(release_name: str, prefix: str) -> None:
    # Helm's usual rule: the release name when it contains the chart's, else <release>-<chart>.
    text = _run(str(tools() / "helm"), "template", release_name, str(CHART), "--namespace",
                NAMESPACE)  # fmt: skip
    names = {(d["kind"], d["metadata"]["name"]) for d in _docs(text)}
    assert ("Deployment", f"{prefix}-controller-manager") in names
    assert ("ClusterRole", f"{prefix}-manager-role") in names
    install = (REPO / "docs" / "tasks" / "install.md").read_text()
    for name in (f"{prefix}-controller-manager", f"{prefix}-manager-role"):
        assert f"`{name}`" in install, name
