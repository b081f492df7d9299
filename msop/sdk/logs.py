"""Pod logs: the log endpoint of a replica's pod, read as a stream of lines.

``KubeClient`` parses every answer as JSON, but a log is text that may never end
(``follow``), so the bytes are read here straight from the client's connection pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping

from msop.kube.client import KubeClient
from msop.kube.errors import ApiError, ApiUnavailable
from msop.sdk.errors import MSJobLogsError

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


async def stream_log(
    kube: KubeClient, path: str, query: Mapping[str, str], what: str
) -> AsyncIterator[bytes]:
    """GET ``path`` and yield the body in chunks as they arrive.

    Raises MSJobLogsError with the API's status and message when the answer is not 2xx
    or no answer comes (``what`` names the pod in the message).
    """
    try:
        async with contextlib.aclosing(kube.stream(path, query=query)) as chunks:
            async for chunk in chunks:
                yield chunk
    except ApiUnavailable as e:
        raise MSJobLogsError(f"logs of {what}: no answer from the API server: {e}") from e
    except ApiError as e:
        raise MSJobLogsError(f"logs of {what}: {e.status} {e.reason}: {e.message}") from e
