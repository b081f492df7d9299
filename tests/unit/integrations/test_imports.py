"""msop.integrations runs in training images: only the standard library, and no MindSpore
until the callback is asked for. The restart agent runs from the operator's image, so it
(and its signatures) may use ``cryptography`` too; the operator imports it as well, and it
loads its HTTP server only when it serves."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from testbed.paths import REPO

PACKAGE = REPO / "msop" / "integrations"
AGENT = PACKAGE / "agent"


def operator_image_only(path: Path) -> bool:
    """The modules that run only from the operator's image, where ``cryptography`` is
    installed: the restart agent's package and its signatures."""
    return path.name == "signature.py" or AGENT in path.parents


def test_importing_the_integrations_loads_only_the_standard_library() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        before = set(sys.modules)
        import msop.integrations, msop.integrations.reporter, msop.integrations.mindspore
        import msop.integrations.msrun, msop.integrations.wire
        new = {name.split(".")[0] for name in set(sys.modules) - before}
        import msop.integrations.agent.main
        agent = {name.split(".")[0] for name in set(sys.modules) - before} - new
        print(json.dumps({
            "file": sys.modules["msop"].__file__, "new": sorted(new), "agent": sorted(agent),
        }))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
        timeout=60,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert Path(result["file"]).resolve() == REPO / "msop" / "__init__.py"  # this checkout
    new = result["new"]
    assert "msop" in new and "mindspore" not in new
    assert [m for m in new if m != "msop" and m not in sys.stdlib_module_names] == []
    assert "cryptography" in result["agent"]
    agent_new = [m for m in result["agent"] if m not in sys.stdlib_module_names]
    assert set(agent_new) <= {"cryptography", "_cffi_backend", "_openssl"}, agent_new


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_every_import_in_the_package_is_stdlib_or_the_package_itself() -> None:
    # Also catches imports inside functions, which the runtime check above cannot see.
    files = [*sorted(PACKAGE.rglob("*.py")), REPO / "msop" / "__init__.py"]
    assert len(files) >= 10
    for path in files:
        allowed = {"cryptography"} if operator_image_only(path) else set()
        for name in imports_of(path):
            top = name.split(".")[0]
            assert (
                top in sys.stdlib_module_names
                or top in allowed
                or name.startswith("msop.integrations")
            ), f"{path.relative_to(REPO)} imports {name}"


def test_the_agent_imports_only_the_contract_and_the_signatures() -> None:
    # The agent's containers run it alone; the signatures are shared with the operator.
    def msop_imports(name: str) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(ast.parse((PACKAGE / name).read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module == "msop.integrations":
                names.update(f"msop.integrations.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        return {n for n in names if n.split(".")[0] == "msop"}

    agent = set().union(*(msop_imports(f"agent/{p.name}") for p in AGENT.glob("*.py")))
    assert {n for n in agent if not n.startswith("msop.integrations.agent")} == {
        "msop.integrations.signature", "msop.integrations.wire", "msop.integrations.podhttp",
    }  # fmt: skip
    assert msop_imports("podhttp.py") == set()
    assert msop_imports("keeper.py") == set()  # copied alone into the training container
    assert msop_imports("signature.py") == set()
    assert msop_imports("wire.py") == set()


def test_one_http_server_in_a_pod() -> None:
    # The reporter and the agent both serve with msop.integrations.podhttp: no module here
    # serves HTTP another way, or binds a socket itself.
    for path in PACKAGE.rglob("*.py"):
        names = imports_of(path)
        assert names.isdisjoint({"http.server", "socketserver", "asyncio"}), path
        if path.name != "podhttp.py":
            assert "selectors" not in names, path
            assert "create_server" not in path.read_text(), path


def test_importing_the_agent_loads_neither_http_server_nor_argparse() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        import msop.integrations.agent.main
        print(json.dumps(sorted(sys.modules)))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
        timeout=60,
    )  # fmt: skip
    loaded = set(json.loads(out.stdout))
    assert {"msop.integrations.agent.server", "msop.integrations.agent.barrier"} <= loaded
    assert "msop.integrations.podhttp" in loaded
    assert loaded.isdisjoint({"http.server", "socketserver", "argparse"})
