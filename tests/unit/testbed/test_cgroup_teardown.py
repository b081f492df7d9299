"""The real node's teardown walks its cgroup tree while the kubelet may still be removing
the cgroups of ending containers (testbed.realnode._kill_cgroup_tree).

On a plain directory tree: every cgroup is visited deepest first and removed, and one
that vanishes during the walk is skipped instead of failing the teardown (it did:
``FileNotFoundError`` from ``Path.rglob`` at the end of a real-tier session).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testbed import realnode


def test_cgroup_dirs_lists_deepest_first(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    (tmp_path / "a" / "cgroup.procs").write_text("")

    dirs = realnode._cgroup_dirs(tmp_path)

    assert set(dirs) == {tmp_path, tmp_path / "a", tmp_path / "a" / "b", tmp_path / "c"}
    assert dirs.index(tmp_path / "a" / "b") < dirs.index(tmp_path / "a")
    assert dirs[-1] == tmp_path
    assert realnode._cgroup_dirs(tmp_path / "absent") == []


def test_a_cgroup_that_vanishes_during_the_walk_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kubepods" / "pod1" / "ctr1").mkdir(parents=True)
    (tmp_path / "kubepods" / "pod2").mkdir()
    gone = tmp_path / "kubepods" / "pod1"
    scandir = os.scandir

    def vanishing(path: str | os.PathLike[str]) -> object:
        if Path(path) == gone:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", vanishing)

    dirs = realnode._cgroup_dirs(tmp_path)

    assert tmp_path / "kubepods" / "pod2" in dirs
    assert gone / "ctr1" not in dirs


def test_kill_cgroup_tree_removes_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "msop-real-1" / "kubepods" / "pod1").mkdir(parents=True)
    monkeypatch.setattr(realnode, "_hierarchies", lambda: [tmp_path])
    monkeypatch.setattr(time, "sleep", lambda _s: None)

    realnode._kill_cgroup_tree("msop-real-1")

    assert not (tmp_path / "msop-real-1").exists()
