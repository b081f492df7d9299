"""glibc heap tuning: works on glibc, is a harmless no-op elsewhere."""

from __future__ import annotations

import platform

import pytest

from msop import malloc

GLIBC_ONLY = "heap tuning calls glibc's mallopt; on other C libraries it is a no-op (tested below)"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason=GLIBC_ONLY)
def test_on_glibc_the_calls_take_effect() -> None:
    assert malloc.limit_heap_growth() is True
    blocks = [bytes(1000) for _ in range(20_000)]  # 20 MB of small heap chunks
    del blocks
    assert malloc.trim() is True


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason=GLIBC_ONLY)
def test_a_tls_read_buffer_comes_from_the_heap_and_a_large_body_from_mmap() -> None:
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]  # fmt: skip

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2

    def mapped() -> int:
        return int(libc.mallinfo2().hblks)

    assert malloc.limit_heap_growth() is True
    before = mapped()
    tls_buffer = bytearray(256 * 1024)  # what SSLObject.read(256 KiB) allocates
    assert mapped() == before
    # A large body: its own mapping, given back when freed. (A chunk between the threshold
    # and the trim threshold may come from free space at the top of the heap.)
    page = bytearray(4 * malloc.TRIM_THRESHOLD)
    assert mapped() == before + 1
    del tls_buffer, page


def test_without_glibc_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malloc, "_libc", False)
    assert malloc.limit_heap_growth() is False
    assert malloc.trim() is False
