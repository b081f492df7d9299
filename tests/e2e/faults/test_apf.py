"""Fault 4: the API server sheds load (API Priority and Fairness answers 429 with
``Retry-After``) - msop honours it, counts it, loses nothing, and is back at full
speed once the limit is lifted (issue 25, item 4).

A FlowSchema sends every request of the operator's ServiceAccount to a priority level
with one concurrency share of ~246 (3 seats of the API server's 600) that rejects
rather than queues what does not fit. Three batches of jobs: before, under and after the
limit; each batch's time to all pods is measured.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from msop.kube.client import KubeClient
from msop.kube.resources import PODS
from tests.e2e.faults.checks import final_checks, record
from tests.e2e.reliability import audit_events, create_all, metric, msjob, wait_until
from tests.harness import LocalCluster, OperatorProcess
from tests.harness.serviceaccount import (
    OPERATOR_NAMESPACE,
    OPERATOR_SERVICE_ACCOUNT,
    service_account_user,
)

BATCH = 40
PRIORITY_LEVEL = "msop-faults-tiny"
FLOW_SCHEMA = "msop-faults"

APF = [
    {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": PRIORITY_LEVEL},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    },
    {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": FLOW_SCHEMA},
        "spec": {
            "priorityLevelConfiguration": {"name": PRIORITY_LEVEL},
            "matchingPrecedence": 100,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "serviceAccount": {
                                "name": OPERATOR_SERVICE_ACCOUNT,
                                "namespace": OPERATOR_NAMESPACE,
                            },
                        }
                    ],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                }
            ],
        },
    },
]


def _limit(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": APF}))  # fmt: skip


def _lift(cluster: LocalCluster) -> None:
    cluster.kubectl("delete", "flowschema", FLOW_SCHEMA, "--ignore-not-found")
    cluster.kubectl("delete", "prioritylevelconfiguration", PRIORITY_LEVEL, "--ignore-not-found")


def _refusals(op: OperatorProcess) -> tuple[float, float]:
    """(429 answers, retries after a 429) the operator counted."""
    return (
        metric(op.metrics_url, "rest_client_requests_total", code="429"),
        metric(op.metrics_url, "rest_client_request_retries_total", code="429"),
    )


async def _batch(client: KubeClient, ns: str, names: list[str]) -> float:
    """Create one MSJob per name; return the seconds until every one has its pod."""
    started = time.monotonic()
    await create_all(client, ns, [msjob(n) for n in names], parallel=16)
    want = {f"{n}-worker-0" for n in names}
    await wait_until(
        f"pods of {names[0]}..{names[-1]}",
        lambda: _have_pods(client, ns, want),
        within=240,
        interval=0.2,
    )
    return time.monotonic() - started


async def _have_pods(client: KubeClient, ns: str, want: set[str]) -> bool:
    pods = {p["metadata"]["name"] for p in (await client.list(PODS, ns))["items"]}
    return want <= pods


def _stamp(e: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00"))


def _retry_gaps(cluster: LocalCluster, ns: str) -> list[float]:
    """For each request of the operator the API server refused with 429, seconds until
    the operator sent the same request (verb and URI) again, by the server's clock.

    Only requests that name their object in the URI (status patches, reads, deletes)
    can be paired: APF refuses a create before its body, which holds the name, is read.
    """
    user = service_account_user()
    tries: dict[tuple[str, str], list[tuple[datetime, int]]] = defaultdict(list)
    for e in audit_events(cluster.audit_log):
        ref = e.get("objectRef") or {}
        if (
            ref.get("namespace") == ns
            and ref.get("name")
            and (e.get("user") or {}).get("username") == user
        ):
            key = (e.get("verb", ""), e.get("requestURI", ""))
            tries[key].append((_stamp(e), e["responseStatus"]["code"]))
    gaps = []
    for attempts in tries.values():
        attempts.sort()
        for (t0, code), (t1, _) in itertools.pairwise(attempts):
            if code == 429:
                gaps.append((t1 - t0).total_seconds())
    return gaps


async def test_load_shedding_is_honoured_counted_and_lossless(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    op = start_operator("--max-concurrent-reconciles", "10")
    assert op.proc is not None
    before = [f"apf-a-{i:02d}" for i in range(BATCH)]
    under = [f"apf-b-{i:02d}" for i in range(BATCH)]
    after = [f"apf-c-{i:02d}" for i in range(BATCH)]
    try:
        base = await _batch(client, namespace, before)
        await asyncio.to_thread(_limit, cluster)
        refused0, _ = _refusals(op)
        limited = await _batch(client, namespace, under)
        refused, retried = _refusals(op)
        assert refused > refused0, "the API server never answered 429: the limit did not bite"
        assert retried >= refused - refused0 - 1, (refused, retried)
    finally:
        await asyncio.to_thread(_lift, cluster)
    # The API server applies a FlowSchema's removal within a second or two.
    await asyncio.sleep(3)
    refused_lifted, _ = _refusals(op)
    recovered = await _batch(client, namespace, after)
    refused_after, _ = _refusals(op)
    assert refused_after == refused_lifted, "429s after the limit was lifted"
    gaps = _retry_gaps(cluster, namespace)
    assert gaps, "no refused request the audit log can pair with its retry"
    # Retry-After is 1 s (APF); a retry comes at least that long after its refusal.
    assert min(gaps) >= 0.95, f"a retry came {min(gaps):.2f}s after its 429"
    names = before + under + after
    figures = await final_checks(cluster, client, namespace, names, set(), [(op, op.proc.pid)])
    record(
        "APF load shedding (429)",
        jobs=len(names),
        refused_429=int(refused - refused0),
        retried=int(retried),
        retry_after_gap_min_s=round(min(gaps), 2),
        time_to_pods_s={"before": round(base, 1), "limited": round(limited, 1),
                        "after": round(recovered, 1)},
        after_over_before=round(recovered / base, 2),
        **figures,
    )  # fmt: skip
