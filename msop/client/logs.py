"""Pod logs: the log endpoint of a replica's pod, read as a stream of lines.

``KubeClient`` parses every answer as JSON, but a log is text that may never end
(``follow``), so the bytes are read here straight from the client's connection pool.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any

import aiohttp

from msop.client.errors import MSJobLogsError
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError

_CHUNK = 64 * 1024


def log_path(namespace: str, pod: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{pod}/log"


async def iter_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """Split a byte stream into text lines (without ``\\n``/``\\r\\n``); a last line
    without a newline is yielded at the end. Invalid UTF-8 is replaced, never raised."""
    buf = b""
    async for chunk in chunks:
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            yield line.removesuffix(b"\r").decode("utf-8", "replace")
    if buf:
        yield buf.removesuffix(b"\r").decode("utf-8", "replace")


def error_message(status: int, body: bytes) -> str:
    """``<code> <Reason>: <message>`` from an error answer (a Status object or text)."""
    parsed: Any
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = body.decode("utf-8", "replace").strip()
    err = ApiError.from_status(status, parsed)
    return f"{err.status} {err.reason}: {err.message}"


async def stream_log(
    kube: KubeClient, path: str, query: Mapping[str, str], what: str
) -> AsyncIterator[bytes]:
    """GET ``path`` and yield the body in chunks as they arrive.

    Raises MSJobLogsError with the API's status and message when the answer is not 2xx
    or no answer comes (``what`` names the pod in the message).
    """
    # The REST plumbing of KubeClient (auth headers, TLS session); it has no public
    # streaming call for non-JSON bodies yet.
    headers = await kube._headers(None)
    headers["Accept"] = "*/*"
    await kube.limiter.wait()
    try:
        resp = await kube._rest.request(
            "GET",
            kube._base + path,
            query_params=dict(query),
            headers=headers,
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise MSJobLogsError(f"logs of {what}: no answer from the API server: {e!r}") from e
    try:
        if not 200 <= resp.status < 300:
            body = await resp.read()
            raise MSJobLogsError(f"logs of {what}: {error_message(resp.status, body)}")
        while True:
            try:
                chunk = await resp.content.readany()
            except (aiohttp.ClientError, OSError) as e:
                raise MSJobLogsError(f"logs of {what}: stream broken: {e!r}") from e
            if not chunk:
                return
            yield chunk
    finally:
        resp.close()
