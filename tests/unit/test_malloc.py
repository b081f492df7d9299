"""glibc heap tuning: works on glibc, is a harmless no-op elsewhere."""

from __future__ import annotations

import platform

import pytest

from msop import malloc


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_on_glibc_the_calls_take_effect() -> None:
    assert malloc.limit_heap_growth() is True
    blocks = [bytes(1000) for _ in range(20_000)]  # 20 MB of small heap chunks
    del blocks
    assert malloc.trim() is True


def test_without_glibc_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malloc, "_libc", False)
    assert malloc.limit_heap_growth() is False
    assert malloc.trim() is False
