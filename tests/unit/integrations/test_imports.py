"""msop.integrations runs in training images: only the standard library, and no MindSpore
until the callback is asked for; the restart agent, which the operator imports too, loads
its HTTP server only when it serves."""

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

PACKAGE = REPO / "msop" / "integrations"


@pytest.mark.parametrize(
    ("modules", "allowed"),
    [
        # What a training image imports (installed with --no-deps): the standard library.
        ("msop.integrations, msop.integrations.reporter, msop.integrations.mindspore", ()),
        # The restart agent runs from the operator's image: it verifies with cryptography.
        (
            "msop.integrations.agent, msop.integrations.signing",
            ("cryptography", "_cffi_backend", "_openssl"),
        ),
    ],
)
def test_importing_the_integrations_loads_only_the_standard_library(
    modules: str, allowed: tuple[str, ...]
) -> None:
    code = textwrap.dedent(
        """
        import json, sys
        before = set(sys.modules)
        import MODULES
        new = {name.split(".")[0] for name in set(sys.modules) - before}
        print(json.dumps({"file": sys.modules["msop"].__file__, "new": sorted(new)}))
        """
    ).replace("MODULES", modules)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
        timeout=60,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert Path(result["file"]).resolve() == REPO / "msop" / "__init__.py"  # this checkout
    new = result["new"]
    assert "msop" in new and "mindspore" not in new
    assert [
        m for m in new if m != "msop" and m not in sys.stdlib_module_names and m not in allowed
    ] == []


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


#: The modules that run from the operator's image, never from a training image: they may
#: import the ``cryptography`` package (a dependency of msop).
OPERATOR_IMAGE_ONLY = ("agent.py", "signing.py")


def test_every_import_in_the_package_is_stdlib_or_the_package_itself() -> None:
    # Also catches imports inside functions, which the runtime check above cannot see.
    files = [*sorted(PACKAGE.glob("*.py")), REPO / "msop" / "__init__.py"]
    assert len(files) >= 4
    for path in files:
        allowed = ("cryptography",) if path.name in OPERATOR_IMAGE_ONLY else ()
        for name in imports_of(path):
            top = name.split(".")[0]
            assert (
                top in sys.stdlib_module_names
                or name.startswith("msop.integrations")
                or top in allowed
            ), f"{path.relative_to(REPO)} imports {name}"


def test_the_agent_imports_only_the_contract_and_the_curve() -> None:
    # The agent's containers run it alone; the curve module is shared with the operator.
    def msop_imports(name: str) -> set[str]:
        names = set()
        for node in ast.walk(ast.parse((PACKAGE / name).read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module == "msop.integrations":
                names.update(f"msop.integrations.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        return {n for n in names if n.split(".")[0] == "msop"}

    assert msop_imports("agent.py") == {"msop.integrations.signing", "msop.integrations.wire"}
    assert msop_imports("signing.py") == set()
    assert msop_imports("wire.py") == set()


def test_importing_the_agent_does_not_load_its_http_server() -> None:
    # The operator imports signed_message from the agent; http.server costs 2.5 MiB.
    code = textwrap.dedent(
        """
        import json, sys
        from msop.integrations.agent import signed_message
        print(json.dumps(sorted(sys.modules)))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
        timeout=60,
    )  # fmt: skip
    loaded = set(json.loads(out.stdout))
    assert "msop.integrations.agent" in loaded
    assert loaded.isdisjoint({"http.server", "socketserver", "argparse"})
