"""Log streaming: bytes split into lines, and get_logs addressing the replica's pod."""

from __future__ import annotations

from collections.abc import AsyncIterator

from msop.sdk.logs import iter_lines


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for p in parts:
        yield p


async def _lines(*parts: bytes) -> list[str]:
    return [line async for line in iter_lines(_chunks(*parts))]


async def test_lines_split_across_chunks() -> None:
    assert await _lines(b"epoch 1 lo", b"ss=0.5\nepoch 2", b" loss=0.4\n", b"done") == [
        "epoch 1 loss=0.5",
        "epoch 2 loss=0.4",
        "done",
    ]


async def test_crlf_empty_lines_and_bad_utf8() -> None:
    assert await _lines(b"a\r\n\r\nb\n", b"\xff\xfe\n") == ["a", "", "b", "\ufffd\ufffd"]


async def test_no_trailing_empty_line_and_empty_stream() -> None:
    assert await _lines(b"x\n") == ["x"]
    assert await _lines() == []


async def test_multibyte_character_split_between_chunks() -> None:
    data = "训练 ok\n".encode()
    assert await _lines(data[:2], data[2:]) == ["训练 ok"]
