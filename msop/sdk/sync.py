"""The blocking SDK: :class:`MSJobClientSync`, for scripts and notebooks.

Every call runs on an event loop of its own in a background thread, so it works where a
loop is already running (Jupyter) as well as in plain scripts.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TextIO, TypeVar

from msop.api import constants as c
from msop.kube.objects import JSON
from msop.sdk.client import JSONList, MSJobClient
from msop.sdk.status import JobStatus

T = TypeVar("T")


class MSJobClientSync:
    """The same methods as :class:`MSJobClient`, blocking; ``get_logs`` and
    ``get_job_logs`` are generators.

    Use as ``with MSJobClientSync(kubeconfig) as client`` or call :meth:`close`.
    Interrupting a call (Ctrl-C) cancels the work in the background loop.
    """

    def __init__(
        self,
        kubeconfig: str | Path | None = None,
        *,
        namespace: str | None = None,
        context: str | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="msop-sdk", daemon=True)
        self._thread.start()
        self._client = MSJobClient(kubeconfig, namespace=namespace, context=context)
        try:
            self._call(self._client.__aenter__())
        except BaseException:
            self._stop_loop()
            raise

    @property
    def namespace(self) -> str:
        return self._client.namespace

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("MSJobClientSync is closed")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        """Close the connections and stop the background loop. Idempotent."""
        if self._thread.is_alive():
            try:
                self._call(self._client.close())
                self._call(self._loop.shutdown_default_executor())  # DNS lookup threads
            finally:
                self._stop_loop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def create(self, job: Mapping[str, Any] | str | Path, namespace: str | None = None) -> JSON:
        """See :meth:`MSJobClient.create`."""
        return self._call(self._client.create(job, namespace))

    def get(self, name: str, namespace: str | None = None) -> JSON:
        """See :meth:`MSJobClient.get`."""
        return self._call(self._client.get(name, namespace))

    def list(
        self, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[JSON]:
        """See :meth:`MSJobClient.list`."""
        return self._call(self._client.list(namespace, label_selector=label_selector))

    def delete(
        self,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] = "Background",
    ) -> None:
        """See :meth:`MSJobClient.delete`."""
        self._call(self._client.delete(name, namespace, propagation_policy=propagation_policy))

    def wait_for_job(
        self,
        name: str,
        namespace: str | None = None,
        *,
        conditions: Sequence[str] = (c.SUCCEEDED, c.FAILED),
        timeout: float | None = 600,
        progress: bool = True,
        stream: TextIO | None = None,
        callback: Callable[[JobStatus], None] | None = None,
    ) -> JSON:
        """See :meth:`MSJobClient.wait_for_job` (``callback`` runs in the client's own
        thread)."""
        return self._call(
            self._client.wait_for_job(
                name, namespace, conditions=conditions, timeout=timeout,
                progress=progress, stream=stream, callback=callback,
            )
        )  # fmt: skip

    def get_status(self, name: str, namespace: str | None = None) -> JobStatus:
        """See :meth:`MSJobClient.get_status`."""
        return self._call(self._client.get_status(name, namespace))

    def update(self, job: Mapping[str, Any] | str | Path, namespace: str | None = None) -> JSON:
        """See :meth:`MSJobClient.update`."""
        return self._call(self._client.update(job, namespace))

    def scale(self, name: str, replicas: int, namespace: str | None = None) -> JSON:
        """See :meth:`MSJobClient.scale`."""
        return self._call(self._client.scale(name, replicas, namespace))

    def suspend(self, name: str, namespace: str | None = None) -> JSON:
        """See :meth:`MSJobClient.suspend`."""
        return self._call(self._client.suspend(name, namespace))

    def resume(self, name: str, namespace: str | None = None) -> JSON:
        """See :meth:`MSJobClient.resume`."""
        return self._call(self._client.resume(name, namespace))

    def get_job_pods(
        self, name: str, namespace: str | None = None, *, replica_type: str | None = None
    ) -> JSONList:
        """See :meth:`MSJobClient.get_job_pods`."""
        return self._call(self._client.get_job_pods(name, namespace, replica_type=replica_type))

    def get_job_logs(
        self,
        name: str,
        namespace: str | None = None,
        *,
        replica_type: str | None = None,
        index: int | None = None,
        container: str = c.DEFAULT_CONTAINER_NAME,
        follow: bool = False,
        previous: bool = False,
        tail_lines: int | None = None,
    ) -> Iterator[tuple[str, str]]:
        """See :meth:`MSJobClient.get_job_logs`; closing the generator closes the streams."""
        return self._iterate(
            self._client.get_job_logs(
                name, namespace, replica_type=replica_type, index=index, container=container,
                follow=follow, previous=previous, tail_lines=tail_lines,
            )
        )  # fmt: skip

    def _iterate(self, items: AsyncGenerator[T, None]) -> Iterator[T]:
        """An async generator of the client's loop, as a blocking iterator."""

        async def next_item() -> T:
            return await anext(items)

        try:
            while True:
                try:
                    yield self._call(next_item())
                except StopAsyncIteration:
                    return
        finally:
            if self._thread.is_alive():
                self._call(items.aclose())

    def get_logs(
        self,
        name: str,
        namespace: str | None = None,
        *,
        replica_type: str = c.WORKER,
        index: int = 0,
        container: str = c.DEFAULT_CONTAINER_NAME,
        follow: bool = False,
    ) -> Iterator[str]:
        """See :meth:`MSJobClient.get_logs`; closing the generator closes the stream."""
        return self._iterate(
            self._client.get_logs(
                name, namespace, replica_type=replica_type, index=index,
                container=container, follow=follow,
            )
        )  # fmt: skip

    def get_events(self, name: str, namespace: str | None = None) -> JSONList:
        """See :meth:`MSJobClient.get_events`."""
        return self._call(self._client.get_events(name, namespace))
