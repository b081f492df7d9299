"""msop validate: one CI-readable line per problem, OK per clean file, exit 1 on errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from msop.cli import main
from testbed.paths import REPO

SAMPLES = REPO / "config" / "samples"

BAD = """\
apiVersion: mindspore.gitee.com/v1
kind: MSJob
metadata:
  name: Bad_Name
spec:
  runPolicy: {cleanPodPolicy: Sometimes}
  msReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: mindspore}]
"""

GOOD = """\
apiVersion: mindspore.gitee.com/v1
kind: MSJob
metadata: {name: good}
spec:
  msReplicaSpecs:
    Worker:
      template:
        spec:
          containers: [{name: mindspore, image: img}]
"""


def _run(capsys: pytest.CaptureFixture[str], *files: Path | str) -> tuple[int, list[str]]:
    args = ["validate"]
    for f in files:
        args += ["-f", str(f)]
    code = main(args)
    captured = capsys.readouterr()
    assert captured.err == ""
    return code, captured.out.splitlines()


def test_every_sample_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(SAMPLES.glob("*.yaml"))
    code, lines = _run(capsys, *files)
    assert code == 0
    assert lines == [f"OK {f}" for f in files]


def test_errors_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    code, lines = _run(capsys, good, bad)
    assert code == 1
    assert lines[0] == f"OK {good}"
    assert sorted(lines[1:]) == sorted(
        [
            f'{bad}: spec.runPolicy.cleanPodPolicy: unsupported value; supported: "All", '
            '"Running", "None"',
            f"{bad}: spec.msReplicaSpecs.Worker.template.spec.containers[0].image: "
            "required: every container of a pod needs an image",
            f"{bad}: metadata.name: must be a DNS-1035 label (lower case letters, "
            "digits and '-', starting with a letter, ending with a letter or digit), because it "
            "names the Scheduler Service <name>-scheduler-0",
        ]
    )


def test_multi_document_names_the_job_and_skips_other_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "bundle.yaml"
    f.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n---\n" + GOOD + "---\n" + BAD
    )
    code, lines = _run(capsys, f)
    assert code == 1
    assert len(lines) == 3
    assert all(line.startswith(f"{f}: Bad_Name: ") for line in lines)

    f.write_text(GOOD + "---\n" + GOOD.replace("good", "good2"))
    assert _run(capsys, f) == (0, [f"OK {f}"])


def test_wrong_api_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "old.yaml"
    f.write_text(GOOD.replace("mindspore.gitee.com/v1", "mindspore.gitee.com/v1alpha1"))
    code, lines = _run(capsys, f)
    assert code == 1
    assert lines == [
        f"{f}: apiVersion: must be mindspore.gitee.com/v1, got 'mindspore.gitee.com/v1alpha1'"
    ]


def test_unreadable_unparsable_and_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1,\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: ConfigMap\n")
    code, lines = _run(capsys, tmp_path / "missing.yaml", broken, empty)
    assert code == 1
    assert len(lines) == 3
    assert lines[0].startswith(f"{tmp_path / 'missing.yaml'}: ")
    assert lines[1].startswith(f"{broken}: ") and "\n" not in lines[1]
    assert lines[2] == f"{empty}: no MSJob document (kind: MSJob)"


def test_filename_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["validate"])
    assert info.value.code == 2
    capsys.readouterr()
