"""Fault 4: the API server sheds load (API Priority and Fairness answers 429 with
``Retry-After``) - msop honours it, counts it, loses nothing, and is back at full
speed once the limit is lifted.

A FlowSchema sends every request of the operator's ServiceAccount to a priority level
with one concurrency share of ~246 (3 seats of the API server's 600) that rejects
rather than queues what does not fit. Three batches of jobs: before, under and after the
limit; each batch's time to all pods is measured.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import datetime
from typing import Any

from msop.kube.client import RETRY_AUDIT_SUFFIX, KubeClient
from msop.kube.resources import PODS
from testbed import LocalCluster, OperatorProcess
from testbed.serviceaccount import (
    OPERATOR_NAMESPACE,
    OPERATOR_SERVICE_ACCOUNT,
    service_account_user,
)
from tests.e2e.faults.checks import final_checks, record
from tests.e2e.reliability import audit_events, create_all, metric, msjob, wait_until

BATCH = 40
RETRY_ID = re.compile(rf"^(.+){re.escape(RETRY_AUDIT_SUFFIX)}(\d+)$")
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


def _stamp(e: dict[str, Any], field: str = "requestReceivedTimestamp") -> datetime:
    return datetime.fromisoformat(e[field].replace("Z", "+00:00"))


def _retry_gaps(cluster: LocalCluster, ns: str) -> tuple[list[float], list[str]]:
    """For each request in ``ns`` of the operator the API server refused with 429,
    seconds from the refusal to the retry by the server's clock; and the audit IDs of
    refusals never sent again (watches aside: an informer reopens a refused watch).

    The operator sends a retry with ``Audit-ID: <first attempt's ID>-retry-<n>``: that
    pairs every retry with the attempt it follows, creates included (APF refuses a create
    before its body, which holds the name, is read, so the log has no name to pair by).
    """
    user = service_account_user()
    by_id: dict[str, dict[str, Any]] = {}
    for e in audit_events(cluster.audit_log):
        if (e.get("objectRef") or {}).get("namespace") == ns and (e.get("user") or {}).get(
            "username"
        ) == user:
            by_id[e["auditID"]] = e
    gaps = []
    answered = set()
    for audit_id, retry in by_id.items():
        m = RETRY_ID.match(audit_id)
        if m is None:
            continue
        n = int(m.group(2))
        first = m.group(1) if n == 1 else f"{m.group(1)}{RETRY_AUDIT_SUFFIX}{n - 1}"
        before = by_id.get(first)
        if before is not None and before["responseStatus"]["code"] == 429:
            answered.add(first)
            gaps.append((_stamp(retry) - _stamp(before, "stageTimestamp")).total_seconds())
    # A watch is not sent again but reopened by its informer, as a new request.
    refused = [
        i
        for i, e in by_id.items()
        if e["responseStatus"]["code"] == 429 and e.get("verb") != "watch"
    ]
    return gaps, [i for i in refused if i not in answered]


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
    gaps, unanswered = _retry_gaps(cluster, namespace)
    assert gaps, "no request in the jobs' namespace was refused with 429"
    assert not unanswered, f"refused with 429 and never sent again: {unanswered}"
    # Retry-After is 1 s (APF); a retry comes at least that long after its refusal.
    assert min(gaps) >= 0.95, f"a retry came {min(gaps):.2f}s after its 429"
    names = before + under + after
    figures = await final_checks(cluster, client, namespace, names, set(), [(op, op.proc.pid)])
    record(
        "APF load shedding (429)",
        jobs=len(names),
        refused_429=int(refused - refused0),
        retried=int(retried),
        retries_paired_in_audit_log=len(gaps),
        retry_after_gap_min_s=round(min(gaps), 2),
        time_to_pods_s={"before": round(base, 1), "limited": round(limited, 1),
                        "after": round(recovered, 1)},
        after_over_before=round(recovered / base, 2),
        **figures,
    )  # fmt: skip
