"""Pod logs: the log endpoint of a replica's pod, read as a stream of lines.

``KubeClient`` parses every answer as JSON, but a log is text that may never end
(``follow``), so the bytes are read here straight from the client's connection pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping

from msop.integrations.wire import AGENT_CONTAINER, KEPT_RUN_BEGIN, KEPT_RUN_END
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError, ApiUnavailable
from msop.kube.objects import JSON
from msop.sdk.errors import MSJobLogsError

_CHUNK = 64 * 1024


def keeps_runs(pod: JSON, container: str) -> bool:
    """Whether the pod's msop-agent keeps the stopped runs of ``container``: a pod that
    msop restarts in place, whose ``container`` runs under the keeper."""
    spec = pod.get("spec") or {}
    if not any(c.get("name") == AGENT_CONTAINER for c in spec.get("initContainers") or []):
        return False
    for c in spec.get("containers") or []:
        if c.get("name") == container:
            return "msop-keeper" in (c.get("command") or [])
    return False


def kept_run(agent_log: list[str]) -> list[str]:
    """The last stopped run in the msop-agent's log, its opening and closing lines
    included (they say where the lines come from); [] if there is none."""
    begin = max((i for i, line in enumerate(agent_log) if line.startswith(KEPT_RUN_BEGIN)),
                default=None)  # fmt: skip
    if begin is None:
        return []
    for end in range(begin + 1, len(agent_log)):
        if agent_log[end].startswith(KEPT_RUN_END):
            return agent_log[begin : end + 1]
    return agent_log[begin:]  # cut short: what there is


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
