"""The informer factory: one shared informer per (resource, namespace, selectors).

Every controller asks the factory instead of building informers, so two controllers
watching pods share one cache and one watch connection. :meth:`InformerFactory.run`
runs all informers in one ``asyncio.TaskGroup`` until cancelled, including informers
requested after it started. :meth:`InformerFactory.wait_for_sync` waits for all of them.

Errors: :meth:`InformerFactory.informer_for` raises ValueError when an existing informer
was built with a different transform or ``compact`` setting. ``run`` ends only by
cancellation (informers retry API errors forever) or by an unexpected bug in an informer,
which propagates.
"""

from __future__ import annotations

import asyncio

from msop.informers.informer import SharedInformer
from msop.informers.reflector import ReflectorOptions
from msop.informers.store import Transform, default_transform
from msop.kube.client import KubeClient
from msop.kube.resources import Resource

__all__ = ["InformerFactory", "InformerKey"]

InformerKey = tuple[Resource, str | None, str | None, str | None]
"""(resource, namespace, label_selector, field_selector)."""


class InformerFactory:
    """Builds and runs shared informers; see the module docstring.

    ``options`` tunes every reflector (stall bound, backoff, page size).
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        options: ReflectorOptions | None = None,
    ) -> None:
        self.client = client
        self.options = options
        self._informers: dict[InformerKey, SharedInformer] = {}
        self._tg: asyncio.TaskGroup | None = None

    def informer_for(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
        *,
        compact: bool = False,
    ) -> SharedInformer:
        """The shared informer for this scope, created on first request.

        ``transform=None`` means :data:`~msop.informers.store.default_transform`;
        ``compact`` keeps its cache encoded (see :class:`SharedInformer`). If the
        factory is running, a new informer starts at once.
        """
        key: InformerKey = (res, namespace, label_selector or None, field_selector or None)
        wanted = transform or default_transform
        informer = self._informers.get(key)
        if informer is not None:
            if informer.transform is not wanted:
                raise ValueError(f"informer for {key} already exists with another transform")
            if informer.compact != compact:
                raise ValueError(f"informer for {key} already exists with compact={not compact}")
            return informer
        informer = SharedInformer(
            self.client,
            res,
            namespace=namespace,
            label_selector=key[2],
            field_selector=key[3],
            transform=wanted,
            options=self.options,
            compact=compact,
        )
        self._informers[key] = informer
        if self._tg is not None:
            self._start(key, informer)
        return informer

    def informers(self) -> list[SharedInformer]:
        """Every informer built so far."""
        return list(self._informers.values())

    def _start(self, key: InformerKey, informer: SharedInformer) -> None:
        assert self._tg is not None
        self._tg.create_task(informer.run(), name=f"informer {key[0]} {key[1] or '*'}")

    async def run(self) -> None:
        """Run every informer until cancelled. RuntimeError if already running."""
        if self._tg is not None:
            raise RuntimeError("InformerFactory is already running")
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                for key, informer in self._informers.items():
                    self._start(key, informer)
                await asyncio.Future()  # park until cancelled
        finally:
            self._tg = None

    def has_synced(self) -> bool:
        """True when every informer built so far has synced."""
        return all(inf.has_synced() for inf in self._informers.values())

    async def wait_for_sync(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until every informer built so far has synced.

        Raises TimeoutError after ``timeout`` seconds. Informers must be running (via
        :meth:`run` or their own ``run``) for this to finish.
        """
        async with asyncio.timeout(timeout):
            for informer in list(self._informers.values()):
                await informer.wait_for_sync()
