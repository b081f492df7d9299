"""Log configuration: structlog to stdout, JSON (default) or console, for msop and libraries.

Every line is one JSON object with ``timestamp``, ``level``, ``logger`` and ``event``.
Lines emitted during a reconcile also carry ``controller``, ``namespace``, ``name`` and
``reconcile_id`` (bound by the controller in ``structlog.contextvars``). Records from
the standard ``logging`` module (aiohttp, kubernetes-asyncio) go through the same
processors, so they are JSON too.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import structlog

LogFormat = Literal["json", "console"]
LEVELS = ("debug", "info", "warning", "error")


def configure(fmt: LogFormat = "json", level: str = "info") -> None:
    """Configure structlog and the stdlib root logger. Raises ValueError on a bad level."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Any
    if fmt == "json":
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Libraries are chatty at debug; keep them at warning unless asked for debug.
    for name in ("aiohttp", "kubernetes_asyncio", "asyncio"):
        logging.getLogger(name).setLevel("DEBUG" if level == "debug" else "WARNING")
