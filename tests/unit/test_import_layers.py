"""The package layers, checked in a fresh interpreter (imports are process-wide state).

- ``import msop.sdk`` (and ``msop.sdk.render``, which runs the planner) loads neither the
  controller runtime (``msop.controller``: manager, leader election, metrics), nor the
  informers, nor aiohttp's web server: a notebook that submits jobs pays for none of it.
- ``msop validate``/``render``/``version`` do not load the runtime either, nor do the job
  commands (``msop list``, ``kubectl msjob list``).
- The generic layers never import the domain: ``msop.kube``, ``msop.informers`` and
  ``msop.controller`` load nothing of ``msop.msjob``, ``msop.sdk`` or ``msop.cli``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.paths import REPO


def _loaded_by(statement: str) -> list[str]:
    code = textwrap.dedent(
        f"""
        import json, sys
        {statement}
        print(json.dumps({{"file": sys.modules["msop"].__file__, "mods": sorted(sys.modules)}}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
        timeout=60,
    )  # fmt: skip
    result = json.loads(out.stdout.splitlines()[-1])
    assert Path(result["file"]).resolve() == REPO / "msop" / "__init__.py"  # this checkout
    mods: list[str] = result["mods"]
    return mods


def _runtime(mods: list[str]) -> list[str]:
    prefixes = (
        "msop.controller",
        "msop.informers",
        "msop.msjob.reconciler",
        "msop.msjob.doubts",
        "msop.msjob.setup",
    )
    return [m for m in mods if m.startswith(prefixes) or m.startswith("aiohttp.web")]


def test_the_sdk_does_not_load_the_runtime() -> None:
    mods = _loaded_by("import msop.sdk, msop.sdk.render, msop.sdk.sync")
    assert "msop.sdk" in mods and "msop.msjob.plan" in mods
    assert _runtime(mods) == []


@pytest.mark.parametrize("command", ["validate", "render", "version"])
def test_offline_commands_do_not_load_the_runtime(command: str) -> None:
    mods = _loaded_by(
        f"from msop.cli import main; main(['{command}'] + (['-f', '/dev/null'] "
        f"if '{command}' != 'version' else []))"
    )
    assert _runtime(mods) == []


def test_the_job_commands_do_not_load_the_runtime() -> None:
    # A kubeconfig that does not exist: the command gets as far as loading it.
    mods = _loaded_by(
        "from msop.cli import main, kubectl_plugin; "
        "assert main(['list', '--kubeconfig', '/nonexistent']) == 1; "
        "assert kubectl_plugin(['status', 'j', '--kubeconfig', '/nonexistent']) == 1"
    )
    assert "msop.cli.jobs" in mods and "msop.sdk.client" in mods
    assert _runtime(mods) == []


def test_the_generic_layers_do_not_import_the_domain() -> None:
    mods = _loaded_by("import msop.kube, msop.informers, msop.controller")
    assert [m for m in mods if m.startswith(("msop.msjob", "msop.sdk", "msop.cli"))] == []
    assert [m for m in mods if m.startswith("msop.api")] == []


def test_the_api_reads_the_pods_contract_without_the_pod_side_code() -> None:
    # api/ needs a dozen names of the wire contract; the reporter (sockets, threads) and the
    # msrun launcher (process handling) run in training pods, not in the operator's API.
    mods = _loaded_by("import msop.api, msop.api.report, msop.api.constants")
    assert "msop.integrations.wire" in mods
    assert [
        m for m in mods if m.startswith("msop.integrations.") and m != "msop.integrations.wire"
    ] == []
    assert [
        m for m in mods if m.startswith(("msop.msjob", "msop.controller", "msop.informers"))
    ] == []


def test_the_pure_rooms_load_no_runtime() -> None:
    # The planner's rooms (pod facts, the status-write decision) are pure, and the write
    # protocol needs no HTTP client.
    mods = _loaded_by(
        "import msop.msjob.podstate, msop.msjob.statuswrite, msop.msjob.plan, msop.kube.writer,"
        " msop.msjob.passes, msop.msjob.replicastatus, msop.msjob.restarts,"
        " msop.msjob.scheduling, msop.msjob.gang, msop.msjob.kueue_workload"
    )
    assert _runtime(mods) == []
    assert "msop.kube.client" not in mods and "aiohttp" not in mods
    assert "structlog" not in mods  # the SDK's planner logs nothing


def _imported(path: str) -> set[str]:
    """``module.name`` for every ``from module import name`` of the file, and every
    ``import module``."""
    tree = ast.parse((REPO / path).read_text())
    return {
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }


SYSTEM_MODULES = ("msop.msjob.gang", "msop.msjob.kueue", "msop.msjob.workloadapi")


@pytest.mark.parametrize(
    "path",
    [
        "msop/msjob/reconciler.py",
        "msop/msjob/plan.py",
        "msop/msjob/passes.py",
        "msop/msjob/children.py",
        "msop/msjob/restarts.py",
        "msop/msjob/replicastatus.py",
    ],
)
def test_the_core_knows_no_scheduling_system(path: str) -> None:
    # Kueue and Volcano live behind msop.msjob.scheduling: the reconciler and the planner
    # import neither system nor its resources and have no function about their objects,
    # so the next scheduling feature is a new implementation, not new branches here.
    tree = ast.parse((REPO / path).read_text())
    imported = _imported(path)
    assert [m for m in imported if m.startswith(SYSTEM_MODULES)] == []
    assert [m for m in imported if m.endswith((".PODGROUPS", ".WORKLOADS"))] == []
    functions = [
        n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    about = ("workload", "pod_group", "podgroup", "gang", "kueue", "flavor")
    assert [f for f in functions if any(word in f.lower() for word in about)] == []
    # Whether a job runs on another cluster (MultiKueue) is a question a system answers.
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert [n for n in names if "MULTIKUEUE" in n] == []


def _strings_and_names(path: str) -> set[str]:
    """The string literals of the code (not its docstrings) and the attribute names."""
    tree = ast.parse((REPO / path).read_text())
    docstrings = {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    } | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


@pytest.mark.parametrize(
    "path", ["msop/msjob/setup.py", "msop/sdk/render.py", "msop/cli/render.py"]
)
def test_the_wiring_and_render_go_through_the_seam(path: str) -> None:
    # setup.py starts the enabled systems and msop render plans with what they would see,
    # both from the list in msop.msjob.systems: neither names a system or its resources,
    # nor makes a system's object by hand (an admitted Workload, an Inqueue PodGroup).
    imported = _imported(path)
    assert [m for m in imported if m.startswith(SYSTEM_MODULES)] == []
    resources = (".PODGROUPS", ".WORKLOADS", ".RESOURCEFLAVORS")
    assert [m for m in imported if m.endswith(resources)] == []
    made_by_hand = {"Inqueue", "Admitted", "QuotaReserved", "admission", "MANAGED_BY_MULTIKUEUE"}
    assert _strings_and_names(path) & made_by_hand == set()


def test_volcano_knows_nothing_of_multikueue() -> None:
    # Whether a job runs on another cluster is Kueue's answer (Decision.runs_elsewhere).
    assert "MANAGED_BY_MULTIKUEUE" not in _strings_and_names("msop/msjob/gang.py")


def test_only_the_list_of_systems_imports_them() -> None:
    # msop.msjob.systems is the one place that names the scheduling systems: every other
    # module reaches them through the seam (msop.msjob.scheduling).
    importers = []
    for path in sorted((REPO / "msop").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        module = ".".join(Path(rel).with_suffix("").parts)
        if module.startswith(SYSTEM_MODULES) or rel == "msop/msjob/systems.py":
            continue
        # ``from msop.msjob import kueue`` counts as msop.msjob.kueue.
        if [m for m in _imported(rel) if m.startswith(SYSTEM_MODULES)]:
            importers.append(rel)
    assert importers == []


def test_the_store_side_of_the_informers_imports_no_watch_machinery() -> None:
    # The store (with the relist deltas and the tombstone) is what listers and the informer
    # file objects in; the reflector (list and watch) feeds it, never the other way round.
    tree = ast.parse((REPO / "msop/informers/store.py").read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert [m for m in imported if m.startswith("msop.")] == ["msop.kube.objects"]


#: The layers of docs/development/layout.md, in order: each imports only those before it.
LAYERS = (
    ("msop", "msop.logs", "msop.metrics"),
    ("msop.integrations",),
    ("msop.kube",),
    ("msop.informers",),
    ("msop.controller",),
    ("msop.api",),
    ("msop.msjob",),
    ("msop.sdk",),
    ("msop.cli",),
)


def _rank(module: str) -> int:
    for rank, roots in reversed(list(enumerate(LAYERS))):
        if any(module == r or module.startswith(f"{r}.") for r in roots if r != "msop"):
            return rank
    return 0


def _static_imports() -> dict[str, set[str]]:
    """Each msop module's msop imports, read from its source: also those inside functions
    and under TYPE_CHECKING (``from a import b`` names ``a.b`` when that is a module)."""
    paths = sorted((REPO / "msop").rglob("*.py"))
    names = {
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
        for p in paths
    }
    imports: dict[str, set[str]] = {}
    for module, path in names.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module
                    for a in node.names
                }
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        imports[module] = {m for m in found if m.startswith("msop.") and m != module}
    return imports


def test_each_layer_imports_only_the_layers_before_it() -> None:
    wrong = [
        f"{module} imports {n}"
        for module, names in _static_imports().items()
        for n in sorted(names)
        if _rank(n) > _rank(module)
    ]
    assert wrong == []


def test_no_module_imports_one_that_imports_it_back() -> None:
    # The planner's rules act through the planning pass (msop.msjob.passes) and the pass
    # imports no rule: a circle would make each module's meaning depend on the other's.
    imports = _static_imports()
    circles = []
    for start in sorted(imports):
        seen: set[str] = set()
        todo: list[tuple[str, tuple[str, ...]]] = [(start, (start,))]
        while todo:
            module, path = todo.pop()
            for n in sorted(imports.get(module, ())):
                if n == start:
                    circles.append(" -> ".join((*path, n)))
                elif n not in seen:
                    seen.add(n)
                    todo.append((n, (*path, n)))
    assert circles == []


def test_the_operator_does_not_load_aiohttp_web() -> None:
    # /healthz, /readyz and /metrics are served by msop.controller.health's own small
    # server: aiohttp's web server (about 2 MiB of RSS) is not part of ``msop run``.
    mods = _loaded_by("import msop.cli.run")
    assert "msop.controller.manager" in mods
    assert [m for m in mods if m.startswith("aiohttp.web")] == []
