"""What a reconciler writes through: the counterpart of ``msop.informers.lister.Reader``.

A reconciler reads from caches (``Reader``) and acts on the API server through a
:class:`Writer`: create, patch, delete. A few decisions cannot be made from a cache (is
the job still there before its children are recreated? does a priority class exist?):
those read the API server live, through :class:`LiveReader`. :class:`Client` is both,
which :class:`~msop.kube.client.KubeClient` is; a test passes a fake that is too.
(controller-runtime splits its client the same way: ``client.Writer``,
``client.Reader``, and the manager's uncached ``APIReader``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from msop.kube.resources import Resource

__all__ = ["Client", "Creator", "LiveReader", "PatchType", "Writer"]

PatchType = Literal["merge", "json", "strategic", "apply"]
"""How a patch body is read: RFC 7386, RFC 6902, strategic merge, server-side apply."""


class Creator(Protocol):
    """Creates objects on the API server (the part every writer has)."""

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """POST a new object; raises ``ApiError`` (``is_already_exists`` when taken)."""
        ...


class Writer(Creator, Protocol):
    """Creates, patches and deletes objects on the API server."""

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
    ) -> dict[str, Any]:
        """PATCH an object or a subresource (``status``); returns the object stored."""
        ...

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        uid_precondition: str | None = None,
        resource_version_precondition: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict[str, Any] | None:
        """DELETE an object; the object while its deletion is pending, else None."""
        ...


class LiveReader(Protocol):
    """Reads one object from the API server itself, not from a cache."""

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        """GET an object; raises ``ApiError`` (``is_not_found`` when absent)."""
        ...


class LiveLister(Protocol):
    """Lists objects on the API server itself, not from a cache."""

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
    ) -> dict[str, Any]:
        """List one page: a List with ``items`` (never None)."""
        ...


class Client(Writer, LiveReader, LiveLister, Protocol):
    """A :class:`Writer` that can also read and list live: what the MSJob reconciler is
    given."""
