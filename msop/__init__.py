"""msop: a Kubernetes operator for MindSpore distributed training.

``msop.__version__`` is the installed distribution's version, the one in pyproject.toml:
the only place the version is written (``make bump`` changes it, and with it the chart
and config/, see docs/development/release.md). It is read on first use, not at import,
straight from the distribution's metadata file (see ``_version``).
"""

from __future__ import annotations

from functools import cache

__all__ = ["__version__"]

#: What ``__version__`` says for a source tree that was never installed (no metadata).
UNKNOWN_VERSION = "0+unknown"


@cache
def _version() -> str:
    """The ``Version:`` header of the first msop distribution on ``sys.path``, as
    ``importlib.metadata.version("msop")`` finds it (a ``.dist-info`` or an ``.egg-info``),
    read directly: ``importlib.metadata`` and the distributions it parses cost the idle
    operator 0.9 MiB of RSS for a single string (measured with ``msop run`` against an
    empty API server)."""
    import sys
    from pathlib import Path

    for entry in sys.path:
        base = Path(entry or ".")
        found = [*sorted(base.glob("msop-*.dist-info")), *sorted(base.glob("msop.egg-info"))]
        for dist in found:
            metadata = dist / ("METADATA" if dist.suffix == ".dist-info" else "PKG-INFO")
            try:
                headers = metadata.read_text(encoding="utf-8").split("\n\n", 1)[0]
            except OSError:
                continue
            for line in headers.splitlines():
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip()
    return UNKNOWN_VERSION


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
