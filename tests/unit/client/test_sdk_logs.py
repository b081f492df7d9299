"""Log streaming: bytes split into lines, and get_logs addressing the replica's pod."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from msop.client import MSJobClient, MSJobLogsError
from msop.client.logs import error_message, iter_lines


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


def test_error_message_from_status_and_text() -> None:
    status = (
        b'{"kind":"Status","status":"Failure","message":"pods \\"j-worker-0\\" not found",'
        b'"reason":"NotFound","code":404}'
    )
    assert error_message(404, status) == '404 NotFound: pods "j-worker-0" not found'
    assert error_message(502, b"bad gateway\n") == "502 Unknown: bad gateway"


async def test_get_logs_addresses_the_replica_pod() -> None:
    calls: list[tuple[str, dict[str, str], str]] = []

    async def fake(
        kube: Any, path: str, query: Mapping[str, str], what: str
    ) -> AsyncIterator[bytes]:
        calls.append((path, dict(query), what))
        yield b"line 1\nline"
        yield b" 2\n"

    client = MSJobClient(namespace="team", kube=object())  # type: ignore[arg-type]
    client._log_stream = fake
    lines = [x async for x in client.get_logs("mnist", replica_type="ps", index=2, follow=True)]
    assert lines == ["line 1", "line 2"]
    assert calls == [
        (
            "/api/v1/namespaces/team/pods/mnist-ps-2/log",
            {"container": "mindspore", "follow": "true"},
            "pod team/mnist-ps-2",
        )
    ]


async def test_get_logs_errors() -> None:
    async def failing(
        kube: Any, path: str, query: Mapping[str, str], what: str
    ) -> AsyncIterator[bytes]:
        raise MSJobLogsError(f"logs of {what}: 404 NotFound: gone")
        yield b""  # pragma: no cover

    client = MSJobClient(kube=object())  # type: ignore[arg-type]
    client._log_stream = failing
    with pytest.raises(MSJobLogsError, match="pod default/j-worker-0: 404 NotFound"):
        [x async for x in client.get_logs("j")]
    with pytest.raises(ValueError, match="replica_type"):
        [x async for x in client.get_logs("j", replica_type="chief")]
