"""Kubernetes resource quantities ("500m", "4Gi", "1e3", 2) as exact fractions.

Volcano admits a PodGroup by comparing its ``minResources`` with what its queue and the
cluster have left, so the operator sums the pods' requests itself: :func:`parse` reads a
quantity exactly (no float rounding: "0.1" three times is "300m", not 0.30000000000000004),
:func:`format_quantity` writes a sum back the way Kubernetes would canonicalise it.

:mod:`fractions` (with :mod:`decimal`, 0.4 MiB) is imported when the first quantity is
parsed: an operator with no jobs never needs it.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fractions import Fraction

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


@functools.lru_cache(maxsize=1024, typed=True)
def parse(value: int | float | str) -> Fraction:
    """The exact value of a quantity; raises ValueError for anything else.

    Cached (by value and type, so ``True`` is never taken for ``1``): every pass over a
    job reads its templates' requests again, and a cluster's jobs use few distinct
    quantities."""
    from fractions import Fraction

    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    m = _QUANTITY.match(value.strip())
    if m is None:
        raise ValueError(f"not a quantity: {value!r}")
    number = Fraction(str(m["num"]))
    if m["bin"]:
        return number * Fraction(1024 ** _BINARY[str(m["bin"])])
    if m["exp"] is not None:
        return number * Fraction(10) ** int(str(m["exp"]))
    return number * Fraction(10) ** _DECIMAL[m["dec"] or ""]


def is_binary(value: int | float | str) -> bool:
    """Whether a quantity is written with a binary suffix (Ki, Mi, Gi, ...)."""
    return isinstance(value, str) and value.strip()[-2:] in _BINARY


def format_quantity(value: Fraction, *, binary: bool = False) -> str:
    """``value`` in canonical form: the largest binary suffix that keeps it whole when
    ``binary`` (memory written as "4Gi" stays "4Gi"), else a plain number with the
    smallest decimal fraction suffix it needs ("1500m", "250u"). Beyond nano precision
    it is rounded up, as Kubernetes rounds a quantity it cannot hold."""
    if value < 0:
        return "-" + format_quantity(-value, binary=binary)
    if binary and value.denominator == 1 and value >= 1024:
        for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
            scale = 1024**power
            if value % scale == 0:
                return f"{value // scale}{suffix}"
    if value.denominator == 1:
        return str(value.numerator)
    for suffix, power in (("m", 3), ("u", 6), ("n", 9)):
        scaled = value * 10**power
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    return f"{-(-value.numerator * 10**9 // value.denominator)}n"
