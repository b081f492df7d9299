"""testbed.exposition: the one Prometheus text reader of bench/ and the tests."""

from __future__ import annotations

import pytest

from testbed.exposition import Sample, read_samples

PAGE = """\
# HELP msop_progress_polls_total Progress polls
# TYPE msop_progress_polls_total counter
msop_progress_polls_total{result="report"} 10.0
msop_progress_polls_created{result="report"} 1.7e+09
# HELP workqueue_queue_duration_seconds How long an item stays in the queue
# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{name="msjob",le="0.1"} 3.0
workqueue_queue_duration_seconds_bucket{name="msjob",le="+Inf"} 4.0
workqueue_queue_duration_seconds_sum{name="msjob"} 0.5
workqueue_queue_duration_seconds_count{name="msjob"} 4.0
workqueue_queue_duration_seconds_created{name="msjob"} 1.7e+09
process_cpu_seconds_total 4.5
"""


def test_every_sample_in_page_order_with_comments_giving_none() -> None:
    assert read_samples(PAGE) == [
        Sample("msop_progress_polls_total", {"result": "report"}, 10.0),
        Sample("msop_progress_polls_created", {"result": "report"}, 1.7e9),
        Sample("workqueue_queue_duration_seconds_bucket", {"name": "msjob", "le": "0.1"}, 3.0),
        Sample("workqueue_queue_duration_seconds_bucket", {"name": "msjob", "le": "+Inf"}, 4.0),
        Sample("workqueue_queue_duration_seconds_sum", {"name": "msjob"}, 0.5),
        Sample("workqueue_queue_duration_seconds_count", {"name": "msjob"}, 4.0),
        Sample("workqueue_queue_duration_seconds_created", {"name": "msjob"}, 1.7e9),
        Sample("process_cpu_seconds_total", {}, 4.5),
    ]
    assert read_samples("") == []


def test_label_values_with_braces_commas_and_quotes_are_read_whole() -> None:
    page = 'x_total{a="}b,c=\\"d\\"",e="f\\\\g"} 3\n'
    assert read_samples(page) == [Sample("x_total", {"a": '}b,c="d"', "e": "f\\g"}, 3.0)]


def test_a_sample_without_a_label_has_no_such_key() -> None:
    page = 'x_total{group="",resource="pods"} 11\nx_total{group=""} 2\n'
    first, second = read_samples(page)
    assert first.labels == {"group": "", "resource": "pods"}
    assert second.labels == {"group": ""} and "resource" not in second.labels


def test_values_are_floats_whatever_their_spelling() -> None:
    page = "a 11\nb +Inf\nc 1e3\nd 2 1700000000000\n"
    values = [s.value for s in read_samples(page)]
    assert values == [11.0, float("inf"), 1000.0, 2.0]
    assert all(type(v) is float for v in values)


def test_a_line_the_parser_cannot_read_raises() -> None:
    with pytest.raises(ValueError):
        read_samples('x{a="b} 1\n')
