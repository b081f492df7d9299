"""``msop_jobs{namespace,state}`` counts an index of the MSJob cache: no job is decoded
on a scrape, and the counts follow every status change."""

from __future__ import annotations

import functools
from typing import Any

from msop.informers.store import EncodedStore
from msop.metrics import CollectorRegistry, generate_latest
from msop.msjob import metrics


def job(ns: str, name: str, state: str | None, rv: str = "1") -> dict[str, Any]:
    status = {"conditions": [{"type": state, "status": "True"}]} if state else {}
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": rv}, "status": status}


def test_counts_follow_status_changes_and_deletes_without_decoding_jobs() -> None:
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
        'msop_jobs{namespace="a",state="None"} 1.0',
        'msop_jobs{namespace="a",state="Running"} 1.0',
        'msop_jobs{namespace="b",state="Running"} 1.0',
    ]
    store.update(job("a", "j1", "Running", rv="2"))
    store.update(job("a", "j2", "Succeeded", rv="2"))
    store.delete("b/j3")
    decodes: list[bytes] = []
    real = store.decode
    store.decode = lambda raw: decodes.append(raw) or real(raw)  # type: ignore[method-assign]
    assert scrape() == [
        'msop_jobs{namespace="a",state="Running"} 1.0',
        'msop_jobs{namespace="a",state="Succeeded"} 1.0',
    ]
    assert decodes == []  # a scrape reads the index only


def test_sources_of_several_namespaces_add_up() -> None:
    collector = metrics.JobStateCollector()
    collector.add(lambda: [("a", "Running", 2)])
    collector.add(lambda: [("a", "Running", 3), ("c", "Failed", 1)])
    family = next(iter(collector.collect()))
    assert [(s.labels["namespace"], s.labels["state"], s.value) for s in family.samples] == [
        ("a", "Running", 5.0),
        ("c", "Failed", 1.0),
    ]
