"""Read a Prometheus text exposition page (msop's ``/metrics``, the API server's) into
samples, with prometheus_client's own parser: the one reader of ``bench/`` and the tests.

It imports nothing of msop: ``bench/`` reads the operator's page from outside the process.
"""

from __future__ import annotations

from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families


class Sample(NamedTuple):
    """One line of the page: its series name as written (``x_total``, ``x_created``,
    ``x_bucket``...), its labels and its value."""

    name: str
    labels: dict[str, str]
    value: float


def read_samples(text: str) -> list[Sample]:
    """Every sample of ``text`` in page order; ``# HELP`` and ``# TYPE`` lines give no
    sample. Label values are unescaped; timestamps are dropped. Raises ValueError on a
    line the parser cannot read (none is skipped silently)."""
    return [
        Sample(s.name, s.labels, float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
