"""msop: a Kubernetes operator for MindSpore distributed training.

``msop.__version__`` is the installed distribution's version, the one in pyproject.toml:
the only place the version is written (``make bump`` changes it, and with it the chart
and config/, see docs/development/release.md). It is read on first use, not at import: reading
the package metadata costs tens of milliseconds that most commands do not need.
"""

from __future__ import annotations

from functools import cache

__all__ = ["__version__"]

#: What ``__version__`` says for a source tree that was never installed (no metadata).
UNKNOWN_VERSION = "0+unknown"


@cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("msop")
    except PackageNotFoundError:
        return UNKNOWN_VERSION


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
