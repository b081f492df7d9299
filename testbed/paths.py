"""Where the checkout and its cache are: the harness, the tests and the bench find files by
these, never by counting their own ``__file__``'s parents."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The root of the checkout (``config/``, ``hack/``, ``examples/`` are under it)."""

CACHE = Path(os.environ.get("MSOP_CACHE_DIR", REPO / ".cache"))
"""Built binaries, clusters' work directories and test logs (``$MSOP_CACHE_DIR``)."""
