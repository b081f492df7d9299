"""The documentation: generated reference pages are fresh, README.md's links resolve, and the
hand-written reference pages name everything the code defines."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from msop.api import constants as c
from testbed.paths import REPO


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "hack/gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_docs"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gen_docs = _load_generator()


@pytest.mark.parametrize("page", sorted(gen_docs.PAGES), ids=lambda p: p.name)
def test_generated_page_is_fresh(page: Path) -> None:
    generated = gen_docs.PAGES[page]()
    committed = page.read_text() if page.is_file() else ""
    assert committed == generated, (
        f"{page.relative_to(REPO)} is stale: run `make generate-docs` (hack/gen_docs.py)"
    )


def test_readme_links_resolve() -> None:
    assert gen_docs.link_errors(gen_docs.README) == []


#: A docs page named in code: ``docs/tasks/kueue.md`` in a comment, a docstring, a message.
DOCS_PATH = re.compile(r"\bdocs/[\w./-]+?\.md\b")
SOURCE_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".toml", ".cfg", ".json", ""}


def docs_paths_named_in(root: Path) -> list[tuple[str, str]]:
    """Every path of a docs page named in the text files under ``root``, with where."""
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix not in SOURCE_SUFFIXES or ".cache" in path.parts:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            found += [(f"{path.relative_to(REPO)}:{n}", m) for m in DOCS_PATH.findall(line)]
    return found


@pytest.mark.parametrize(
    "root", ["msop", "hack", "tests", "testbed", "bench", "config", "charts", "examples"]
)
def test_docs_pages_named_in_code_exist(root: str) -> None:
    named = docs_paths_named_in(REPO / root)
    missing = [f"{where}: {page}" for where, page in named if not (REPO / page).is_file()]
    assert missing == [], "pages named in code that do not exist:\n" + "\n".join(missing)


def test_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("# Page\n\n## A `code` heading\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](page.md#a-code-heading) [no file](nothing.md) [no anchor](page.md#nope)\n"
        "`[in code](ignored.md)` [web](https://example.com/x.md) [self](#top)\n"
        "```\n[fenced](ignored.md)\n```\n# Top\n"
    )
    errors = gen_docs.link_errors(readme)
    assert len(errors) == 2, errors
    assert "nothing.md does not exist" in errors[0]
    assert "has no heading #nope" in errors[1]


def test_headings_get_the_same_anchor_on_github_and_on_the_site() -> None:
    assert gen_docs.anchor_mismatches() == []


def test_api_page_lists_every_field_and_stops_at_the_template() -> None:
    text = gen_docs.msjob_api_page()
    for field in (
        "spec.runPolicy.cleanPodPolicy",
        "spec.runPolicy.schedulingPolicy.minResources",
        "spec.msReplicaSpecs.<type>.restartPolicy",
        "spec.msReplicaSpecs.<type>.template",
        "status.replicaStatuses.<type>.selector",
        "status.conditions[].lastTransitionTime",
        "status.progress.metrics[].value",
        "status.workers",
    ):
        assert f"| `{field}` |" in text, field
    assert "template.spec.containers[].image" in text  # a rule msop adds, listed
    fields = text.split("## Validation rules")[0]
    assert "| `spec.msReplicaSpecs.<type>.template." not in fields  # not expanded
    assert "must contain exactly one container named 'mindspore'" in text


def test_flags_page_lists_every_flag_with_its_variable() -> None:
    text = gen_docs.flags_page()
    for flag, var in gen_docs.flags.RUN_ENV.items():
        assert f"| `{flag}` | `{var.name}`" in text, flag


def test_metrics_page_lists_every_series_msop_serves() -> None:
    from testbed.monitoring import exported_metrics

    text = gen_docs.metrics_page()
    for name in exported_metrics():
        if name == "up" or name.endswith(("_bucket", "_sum", "_count", "_created")):
            continue
        assert f"| `{name}` |" in text, name


def test_every_condition_type_is_documented() -> None:
    text = (REPO / "docs/reference/conditions.md").read_text()
    for type_ in c.CONDITION_TYPES:
        assert f"| `{type_}` |" in text, type_


def test_every_label_and_variable_the_operator_sets_is_documented() -> None:
    text = (REPO / "docs/reference/labels.md").read_text()
    names = [
        c.LABEL_JOB_NAME,
        c.LABEL_REPLICA_TYPE,
        c.LABEL_REPLICA_INDEX,
        c.LABEL_OPERATOR_NAME,
        c.LEGACY_LABEL_REPLICA_TYPE,
        c.LEGACY_LABEL_REPLICA_INDEX,
        c.ENV_ROLE,
        c.ENV_SCHED_HOST,
        c.ENV_SCHED_PORT,
        c.ENV_WORKER_NUM,
        c.ENV_SERVER_NUM,
        c.ENV_NODE_ID,
        c.ENV_PROGRESS_PORT,
        c.ENV_POD_NAME,
        c.ENV_POD_UID,
        c.ENV_PROGRESS_FILE,
    ]
    for name in names:
        assert f"`{name}`" in text, name


def test_the_sdk_reference_documents_every_method_and_field() -> None:
    page = gen_docs.sdk_page()
    assert "(undocumented)" not in page
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert rows and all(not line.rstrip().endswith("|  |") for line in rows), [
        line for line in rows if line.rstrip().endswith("|  |")
    ]
    for method in ("get_job_logs", "get_status", "scale", "suspend", "resume", "update"):
        assert f"### {method}" in page


DELIMITER_ROW = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def broken_tables(text: str) -> list[str]:
    """Lines of ``text`` (Markdown) that start a table row but render as plain text: a run
    of ``|`` lines outside code fences must follow a blank line and have a delimiter row
    (``|---|---|``) second."""
    broken = []
    lines = text.splitlines()
    fenced = False
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced or not lines[i].startswith("|"):
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].startswith("|"):
            i += 1
        after_blank = start == 0 or not lines[start - 1].strip()
        delimited = start + 1 < i and DELIMITER_ROW.match(lines[start + 1]) is not None
        if not (after_blank and delimited):
            broken.append(f"line {start + 1}: {lines[start][:60]}")
    return broken


def test_table_check_finds_rows_that_render_as_text() -> None:
    good = "Text.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\n| not a table\n```\n"
    assert broken_tables(good) == []
    glued = "| a | b |\n|---|---|\n| 1 | 2 |\nA paragraph.\n| 3 | 4 |\n"
    assert broken_tables(glued) == ["line 5: | 3 | 4 |"]
    assert broken_tables("Text.\n| a | b |\n|---|---|\n") == ["line 2: | a | b |"]


@pytest.mark.parametrize(
    "page",
    [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_table_renders_as_a_table(page: Path) -> None:
    # mkdocs --strict does not see a table cut in two by a paragraph: its second half
    # is printed as raw "|" text.
    assert broken_tables(page.read_text()) == []
