"""How the tests and the development tools import one another: a test module imports no other
test module and no conftest (shared helpers live in ``tests/support`` or, for an e2e tier,
in its helper modules); ``testbed/``, ``bench/`` and ``hack/`` import nothing of ``tests/``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from testbed.paths import REPO


def imported_modules(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """Every module the file at ``path`` (in the checkout) imports, absolute, with its line:
    relative imports are resolved against the file's package, ``from a import b`` gives
    ``a`` and ``a.b``. ``source``: the file's text, if not the file's own."""
    package = path.relative_to(REPO).with_suffix("").parts[:-1]
    text = path.read_text() if source is None else source
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def is_test_module(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return module.split(".")[0] == "tests" and (last.startswith("test_") or last == "conftest")


def python_files(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (REPO / root).rglob("*.py"))


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    bad = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in python_files("tests", "testbed", "bench", "hack")
        for line, module in imported_modules(path)
        if is_test_module(module)
    ]
    assert bad == [], "move what they share to tests/support:\n" + "\n".join(bad)


@pytest.mark.parametrize("root", ["testbed", "bench", "hack"])
def test_the_development_tools_import_nothing_of_tests(root: str) -> None:
    bad = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in python_files(root)
        for line, module in imported_modules(path)
        if module == "tests" or module.startswith("tests.")
    ]
    assert bad == [], (
        f"{root}/ imports from tests/ (move what it needs to testbed/):\n" + "\n".join(bad)
    )


def test_the_check_sees_every_way_to_import_a_test_module() -> None:
    where = REPO / "tests/unit/controller/test_probe.py"
    cases = {
        "from tests.unit.controller.test_manager import manager\n": True,
        "import tests.unit.msjob.test_kueue\n": True,
        "from tests.unit.msjob import test_kueue\n": True,
        "from tests.e2e.kwok.conftest import pool\n": True,
        "from .test_manager import manager\n": True,
        "from . import conftest\n": True,
        "from tests.support.kueue import queued_job\n": False,
        "from tests.e2e.msjobs import wait_for\n": False,
        "from testbed.paths import REPO\n": False,
        "import pytest\n": False,
    }
    for source, flagged in cases.items():
        found = [m for _, m in imported_modules(where, source) if is_test_module(m)]
        assert bool(found) is flagged, (source, found)
