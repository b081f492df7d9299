"""GET /progress over real sockets on 127.0.0.1: the wire format, statuses, slow clients."""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from msop.integrations import reporter as progress
from msop.integrations.reporter import Reporter
from tests.support.clocks import FakeClock


def http_get(
    port: int, path: str = "/progress", method: str = "GET", timeout: float = 10.0
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


MakeReporter = Callable[..., Reporter]


def serving(reporter: Reporter) -> int:
    port = reporter.port
    assert port is not None and port > 0
    return port


def test_wire_format(make_reporter: MakeReporter, clock: FakeClock) -> None:
    reporter = make_reporter(total_steps=200, total_epochs=20)
    clock.now = 10.0
    reporter.update(step=90, epoch=9, metrics={"loss": 0.0213, "lr": "1e-3"})
    clock.now = 12.5

    status, headers, body = http_get(serving(reporter))

    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert int(headers["Content-Length"]) == len(body)
    assert b" " not in body  # compact
    assert json.loads(body) == {
        "version": 1,
        "pod": {"name": "job-worker-0", "uid": "0f4c7b1e-8d2a-4c55-9d1e-3b6a2f0c9e11"},
        "seq": 1,
        "age": 2.5,
        "step": 90,
        "totalSteps": 200,
        "epoch": 9,
        "totalEpochs": 20,
        "percentComplete": 45.0,
        "metrics": [{"name": "loss", "value": "0.0213"}, {"name": "lr", "value": "1e-3"}],
        "final": False,
    }


def test_eta_and_seq_on_the_wire(make_reporter: MakeReporter, clock: FakeClock) -> None:
    reporter = make_reporter(total_steps=100, min_interval=0)
    for step in (0, 1, 11):
        reporter.update(step=step)
        clock.advance(10)
    obj = json.loads(http_get(serving(reporter))[2])
    assert obj["seq"] == 3
    assert obj["estimatedRemainingSeconds"] == 89 * 1  # 10 steps in 10 s
    assert isinstance(obj["estimatedRemainingSeconds"], int)
    assert obj["age"] == 10.0


def test_no_content_before_the_first_update(make_reporter: MakeReporter) -> None:
    status, headers, body = http_get(serving(make_reporter()))
    assert (status, body) == (204, b"")
    assert "Content-Type" not in headers


def test_query_strings_are_ignored(make_reporter: MakeReporter) -> None:
    reporter = make_reporter()
    reporter.update(step=1)
    assert http_get(serving(reporter), "/progress?watch=1")[0] == 200


@pytest.mark.parametrize("path", ["/", "/progress/", "/metrics", "/progressx"])
def test_other_paths_are_not_found(make_reporter: MakeReporter, path: str) -> None:
    reporter = make_reporter()
    reporter.update(step=1)
    assert http_get(serving(reporter), path)[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD"])
def test_only_get(make_reporter: MakeReporter, method: str) -> None:
    reporter = make_reporter()
    reporter.update(step=1)
    status, headers, _ = http_get(serving(reporter), method=method)
    assert status == 405
    assert headers["Allow"] == "GET"


def test_a_garbled_request_line_is_a_bad_request(make_reporter: MakeReporter) -> None:
    with socket.create_connection(("127.0.0.1", serving(make_reporter())), timeout=10) as s:
        s.sendall(b"hello\r\n\r\n")
        assert recv_all(s).startswith(b"HTTP/1.1 400 ")


def recv_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_silent_client_does_not_block_another(make_reporter: MakeReporter) -> None:
    # A long io_timeout: the silent client is still connected while the second is served.
    reporter = make_reporter(io_timeout=60)
    reporter.update(step=1)
    port = serving(reporter)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
        assert http_get(port, timeout=10)[0] == 200
        silent.setblocking(False)
        with pytest.raises(BlockingIOError):
            silent.recv(1)  # not answered and not closed: it was simply not waited for


def test_a_silent_client_is_closed_after_io_timeout(make_reporter: MakeReporter) -> None:
    reporter = make_reporter(io_timeout=0.2)
    with socket.create_connection(("127.0.0.1", serving(reporter)), timeout=10) as silent:
        assert silent.recv(1) == b""  # closed by the server, without an answer


def test_when_every_slot_is_taken_the_next_client_waits_at_most_io_timeout(
    make_reporter: MakeReporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "_MAX_CONNECTIONS", 2)
    reporter = make_reporter(io_timeout=0.3)
    reporter.update(step=1)
    port = serving(reporter)
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    try:
        assert http_get(port, timeout=10)[0] == 200
    finally:
        for s in silent:
            s.close()


def test_a_request_without_end_is_cut_off_at_8_kib(make_reporter: MakeReporter) -> None:
    reporter = make_reporter(io_timeout=30)
    with socket.create_connection(("127.0.0.1", serving(reporter)), timeout=10) as s:
        s.sendall(b"GET /progress HTTP/1.1\r\nX: " + b"a" * progress._MAX_REQUEST_BYTES)
        assert recv_all(s).startswith(b"HTTP/1.1 431 ")


def test_a_port_in_use_is_one_warning_and_the_file_is_still_written(
    make_reporter: MakeReporter,
    msop_env: dict[str, str],
    final_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        env = {**msop_env, "MSOP_PROGRESS_PORT": str(taken.getsockname()[1])}
        with caplog.at_level(logging.WARNING, logger=progress.__name__):
            reporter = make_reporter(env=env)
            assert reporter.enabled and reporter.port is None
            assert reporter.update(step=1, force=True)
            reporter.finish()
    assert [r.getMessage() for r in caplog.records if "cannot serve" in r.getMessage()] != []
    assert len(caplog.records) == 1
    assert json.loads(final_file.read_bytes())["step"] == 1


def test_a_port_that_is_not_a_number_is_a_warning(
    make_reporter: MakeReporter,
    msop_env: dict[str, str],
    final_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=progress.__name__):
        reporter = make_reporter(env={**msop_env, "MSOP_PROGRESS_PORT": "http"})
    assert reporter.enabled and reporter.port is None
    assert "is not a port" in caplog.text
    reporter.update(step=1)
    reporter.finish()
    assert final_file.exists()


def test_finish_stops_the_server(make_reporter: MakeReporter) -> None:
    reporter = make_reporter()
    reporter.update(step=1)
    port = serving(reporter)
    reporter.finish()
    assert reporter.port is None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    reporter.finish()  # again: nothing to do


def test_a_forked_child_neither_serves_nor_writes_the_final_file(
    make_reporter: MakeReporter, final_file: Path
) -> None:
    # e.g. a data-loading worker forked from the trainer: it inherits the reporter.
    reporter = make_reporter()
    reporter.update(step=1)
    port = serving(reporter)
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 2
        try:
            disowned = not reporter.enabled and reporter.port is None
            published = reporter.update(step=2, force=True)
            reporter.finish()  # what atexit would call in the child
            code = 0 if disowned and not published and not final_file.exists() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert http_get(port)[0] == 200  # the parent still serves
    reporter.finish()
    assert json.loads(final_file.read_bytes())["step"] == 1
