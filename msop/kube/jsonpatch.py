"""JSON patches (RFC 6902) whose ``test`` operations the API server can match.

The API server applies a JSON patch to the object *as its own encoder writes it*, and
its ``test`` operation compares strings by their encoded bytes, not their decoded
values. Go's encoder writes ``<``, ``>`` and ``&`` as ``\\u003c``, ``\\u003e`` and
``\\u0026``, U+2028/U+2029 as escapes, and any other non-ASCII character as raw UTF-8;
Python's ``json`` (with its default ``ensure_ascii``) writes ``\\u00e9`` for ``é`` and
leaves ``>`` alone. A ``test`` of a value holding such a character therefore fails
although the stored value is the same, every time: a status with the message
``MS_WORKER_NUM 2 -> 3`` or an API error quoting ``<nil>`` could never be written over.

:func:`dumps` encodes the way the API server does, so a ``test`` of a value read from
the API server matches when, and only when, the value is unchanged.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dumps"]

_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def dumps(patch: Any) -> bytes:
    """Compact JSON of ``patch`` with the string escaping of Go's ``encoding/json``.

    The characters translated can only occur inside JSON strings, so the whole document
    is translated at once."""
    text = json.dumps(patch, separators=(",", ":"), ensure_ascii=False)
    return text.translate(_GO_ESCAPES).encode()
