"""The agent client: sends a plan's requests to the pods' agents, signed by the operator's
key (:mod:`.startup` loads it).

Requests go to each pod's IP and agent port, a few at a time, each with a short timeout;
one that fails is asked again by the next pass (the plan requeues in 1 s). A signature is
made once per (job, action, generation) and cached: every pod of the job gets the same.

A request an agent accepted is not sent again to the same pod (UID) for a while
(:data:`ANSWERED_SECONDS`): what it did is durable in the pod's emptyDir (the generation
it restarts to, the generation released), and a pass that runs before the pod's status
shows it (the kubelet's next sync) would otherwise ask every such pod again: at 1,000
pods, 2.4 releases per pod and 1.4 restart requests were sent (the bench's ``hybrid``
scenario) where one each does. A pod recreated has a new UID and is asked.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
import structlog
from cachetools import LRUCache, TTLCache

from msop.integrations import signature, wire
from msop.integrations.wire import signed_message
from msop.kube.objects import JSON
from msop.msjob.inplace.pods import agent_of
from msop.msjob.passes import AgentRequest

log = structlog.get_logger("msop.msjob.inplace")

TIMEOUT_SECONDS = 3.0
CONCURRENCY = 32
ANSWERED_SECONDS = 30.0
"""How long an accepted request is not sent again to the same pod: longer than a
kubelet takes to report the restart it causes, short enough that a pod whose emptyDir
was lost (it never is while the pod lives) is asked again soon."""


class AgentClient:
    """Sends a plan's :class:`~msop.msjob.passes.AgentRequest` s, signed."""

    def __init__(self, key: signature.PrivateKey) -> None:
        self.key = key
        self.public_key = signature.public_key(key).hex()
        self._signatures: LRUCache[tuple[str, str, int], str] = LRUCache(maxsize=1024)
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(CONCURRENCY)
        self._answered: TTLCache[tuple[str, str, int], bool] = TTLCache(
            maxsize=65536, ttl=ANSWERED_SECONDS, timer=time.monotonic
        )
        """(pod UID, action, generation) accepted by the pod's agent lately."""

    def signature(self, job_uid: str, action: str, generation: int) -> str:
        key = (job_uid, action, generation)
        sig = self._signatures.get(key)
        if sig is None:
            message = signed_message(action, job_uid, generation)
            sig = self._signatures[key] = signature.sign(self.key, message).hex()
        return sig

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, job: JSON, requests: Sequence[AgentRequest]) -> bool:
        """Ask every pod; True if every agent answered as asked."""
        if not requests:
            return True
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECONDS),
                connector=aiohttp.TCPConnector(limit=CONCURRENCY, force_close=True),
            )
        uid = str(job["metadata"]["uid"])
        results = await asyncio.gather(*(self._one(uid, r) for r in requests))
        return all(results)

    async def _one(self, uid: str, request: AgentRequest) -> bool:
        pod = request.pod
        name = pod["metadata"]["name"]
        agent = agent_of(pod)
        ip = (pod.get("status") or {}).get("podIP")
        if agent is None or not ip:
            return False
        answered = (str(pod["metadata"].get("uid") or ""), request.action, request.generation)
        if answered[0] and answered in self._answered:
            return True
        body = {
            "generation": request.generation,
            "signature": self.signature(uid, request.action, request.generation),
        }
        path = wire.AGENT_RESTART_PATH if request.action == "restart" else wire.AGENT_RELEASE_PATH
        host = f"[{ip}]" if ":" in ip else ip
        assert self._session is not None
        try:
            async with (
                self._slots,
                self._session.post(f"http://{host}:{agent.port}{path}", json=body) as resp,
            ):
                answer = await resp.read()
                if resp.status in (200, 202):
                    if answered[0]:
                        self._answered[answered] = True
                    log.info(
                        "agent answered", pod=name, action=request.action,
                        generation=request.generation, answer=_short(answer),
                    )  # fmt: skip
                    return True
                log.warning(
                    "agent refused", pod=name, action=request.action, status=resp.status,
                    answer=_short(answer),
                )  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.info("agent unreachable", pod=name, action=request.action, error=str(e))
        return False


def _short(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data[:200].decode(errors="replace")
