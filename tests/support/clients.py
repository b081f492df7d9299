"""A :class:`~msop.kube.client.KubeClient` with no API server behind it, for the code that
takes a client but, in a test, must not reach one (a manager, the SDK's local checks), and
the base of the fakes that serve a few calls of the client themselves."""

from __future__ import annotations

from typing import NoReturn

from msop.kube.client import KubeClient
from msop.kube.contact import Contact


class NoApiServer(KubeClient):
    """A client never connected (no configuration, no session, no rate limits): any request
    it would send fails the test. A subclass serves the calls its test expects."""

    def __init__(self) -> None:
        """Nothing to set up: every request fails before it needs anything (and a client
        that never reached an API server never lost it either)."""
        self.contact = Contact()

    def __getattr__(self, name: str) -> NoReturn:
        # Reached when a request looks for what __init__ did not set (its transport,
        # configuration, limiters): the code under test asked for the API server.
        raise AssertionError(f"unexpected API call: the client has no {name!r}")
