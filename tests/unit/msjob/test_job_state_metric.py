"""``msop_jobs{job_namespace,state}`` counts an index of the MSJob cache: no job is decoded
on a scrape, and the counts follow every status change."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from msop.informers.store import EncodedStore
from msop.metrics import CollectorRegistry, generate_latest
from msop.msjob import metrics


def job(ns: str, name: str, state: str | None, rv: str = "1") -> dict[str, Any]:
    status = {"conditions": [{"type": state, "status": "True"}]} if state else {}
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": rv}, "status": status}


def test_counts_follow_status_changes_and_deletes_without_decoding_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = EncodedStore()
    store.add_indexers({metrics.BY_JOB_STATE: metrics.job_state_index})
    store.add(job("a", "j1", None))
    store.add(job("a", "j2", "Running"))
    store.add(job("b", "j3", "Running"))
    collector = metrics.JobStateCollector()
    collector.add(functools.partial(metrics.state_counts, store))
    registry = CollectorRegistry()
    registry.register(collector)

    def scrape() -> list[str]:
        text = generate_latest(registry).decode()
        return sorted(line for line in text.splitlines() if line.startswith("msop_jobs{"))

    assert scrape() == [
        'msop_jobs{job_namespace="a",state="None"} 1.0',
        'msop_jobs{job_namespace="a",state="Running"} 1.0',
        'msop_jobs{job_namespace="b",state="Running"} 1.0',
    ]
    store.update(job("a", "j1", "Running", rv="2"))
    store.update(job("a", "j2", "Succeeded", rv="2"))
    store.delete("b/j3")
    decodes: list[bytes] = []
    real = store.decode

    def decoding(raw: bytes) -> dict[str, Any]:
        decodes.append(raw)
        return real(raw)

    monkeypatch.setattr(store, "decode", decoding)
    assert scrape() == [
        'msop_jobs{job_namespace="a",state="Running"} 1.0',
        'msop_jobs{job_namespace="a",state="Succeeded"} 1.0',
    ]
    assert decodes == []  # a scrape reads the index only


def test_sources_of_several_namespaces_add_up() -> None:
    collector = metrics.JobStateCollector()
    collector.add(lambda: [("a", "Running", 2)])
    collector.add(lambda: [("a", "Running", 3), ("c", "Failed", 1)])
    family = next(iter(collector.collect()))
    assert [(s.labels["job_namespace"], s.labels["state"], s.value) for s in family.samples] == [
        ("a", "Running", 5.0),
        ("c", "Failed", 1.0),
    ]


def _job(name: str, rv: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "a", "name": name, "resourceVersion": rv}, "status": status}


def test_per_job_series_exist_while_the_job_is_unfinished_and_read_no_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = EncodedStore()
    store.add_indexers({metrics.BY_JOB_ALERTING: metrics.job_alerting_index})
    queued = {"type": "Queued", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    store.add(_job("waiting", "1", conditions=[queued]))
    counts = {"Scheduler": {"restarts": 1}, "Worker": {"restarts": 2, "active": 2}}
    store.add(_job("flaky", "1", replicaStatuses=counts))
    store.add(_job("done", "1", conditions=[{"type": "Succeeded", "status": "True"}],
                   replicaStatuses={"Worker": {"restarts": 5}}))  # fmt: skip
    collector = metrics.JobCollector()
    collector.add(functools.partial(metrics.alerting_values, store))
    registry = CollectorRegistry()
    registry.register(collector)

    def scrape() -> list[str]:
        text = generate_latest(registry).decode()
        return sorted(line for line in text.splitlines() if line.startswith("msop_job_"))

    decodes: list[bytes] = []
    real = store.decode

    def decoding(raw: bytes) -> dict[str, Any]:
        decodes.append(raw)
        return real(raw)

    monkeypatch.setattr(store, "decode", decoding)
    assert scrape() == [
        'msop_job_queued_since_timestamp_seconds{job_name="waiting",job_namespace="a"} '
        "1.7672256e+09",
        'msop_job_restarts_total{job_name="flaky",job_namespace="a"} 3.0',
        'msop_job_restarts_total{job_name="waiting",job_namespace="a"} 0.0',
    ]
    assert decodes == []
    # Admitted: the queue wait ends; finished: its series end.
    store.update(_job("waiting", "2", conditions=[{**queued, "status": "False"}]))
    store.update(_job("flaky", "2", conditions=[{"type": "Failed", "status": "True"}]))
    assert scrape() == ['msop_job_restarts_total{job_name="waiting",job_namespace="a"} 0.0']
