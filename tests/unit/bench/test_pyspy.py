"""The py-spy summary: idle samples out, self and inclusive shares of busy samples."""

from __future__ import annotations

from pathlib import Path

from bench.pyspy import summarize, write_summary

RAW = """\
<module> (msop/cli.py:1);run (asyncio/runners.py:190);_worker (msop/controller/controller.py:230);raw_decode (json/decoder.py:353) 6
<module> (msop/cli.py:1);run (asyncio/runners.py:190);_worker (msop/controller/controller.py:231);plan (msop/controller/msjob/plan.py:580) 2
<module> (msop/cli.py:1);run (asyncio/runners.py:190);select (selectors.py:468) 90
_bootstrap (threading.py:995);_worker (concurrent/futures/thread.py:81) 50
<module> (msop/cli.py:1);run (asyncio/runners.py:190);_read (msop/informers/reflector.py:327) 2
not a sample line
"""  # noqa: E501


def test_summary_counts_busy_samples_only() -> None:
    text = summarize(RAW)
    assert text.startswith("busy samples: 10 (idle samples left out: 140)")
    self_part, inclusive_part = text.split("inclusive time:")
    assert " 60.0%  raw_decode (decoder.py)" in self_part
    assert " 20.0%  plan (plan.py)" in self_part
    assert "select" not in text and "thread.py" not in text
    # Two lines of one function count once per sample.
    assert "100.0%  run (runners.py)" in inclusive_part
    assert " 80.0%  _worker (controller.py)" in inclusive_part
    assert summarize("") == "no busy samples\n"


def test_write_summary_waits_for_the_file(tmp_path: Path) -> None:
    raw, out = tmp_path / "raw.txt", tmp_path / "top.txt"
    assert not write_summary(raw, out, wait_s=0.3)
    raw.write_text(RAW)
    assert write_summary(raw, out, wait_s=1)
    assert out.read_text() == summarize(RAW)
