"""What runs inside training pods: progress reporting for msop to read, and the restart
agent.

What a training image runs imports only the Python standard library, so the image can
``pip install --no-deps msop`` and use it; framework glue (e.g.
:mod:`msop.integrations.mindspore`) imports its framework only when first used. The
restart agent (:mod:`msop.integrations.agent`) and its signatures
(:mod:`msop.integrations.signature`) run from the operator's image and use
``cryptography`` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from msop.integrations.reporter import Reporter

__all__ = ["Reporter"]


def __getattr__(name: str) -> Any:
    # Lazy: the operator imports msop.integrations.wire (the contract) and must not load
    # the reporter's sockets and threads with it.
    if name == "Reporter":
        from msop.integrations.reporter import Reporter

        return Reporter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
