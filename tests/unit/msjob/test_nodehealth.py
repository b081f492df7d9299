"""What a pod's node and devices say about it (msop.msjob.nodehealth): the taint manager's
toleration rules, and what the cache keeps of a node."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from msop.kube.objects import format_time
from msop.msjob import nodehealth
from tests.support.builders import NOW

JSON = dict[str, Any]


def tainted(*taints: JSON, ready: str = "True") -> JSON:
    return {
        "metadata": {"name": "n1", "resourceVersion": "3", "labels": {"a": "b"}},
        "spec": {"taints": list(taints), "podCIDR": "10.0.0.0/24"},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "r",
                                   "lastTransitionTime": format_time(NOW),
                                   "lastHeartbeatTime": format_time(NOW)}],
                   "capacity": {"cpu": "64"}},
    }  # fmt: skip


def on(node_name: str, *tolerations: JSON) -> JSON:
    return {"spec": {"nodeName": node_name, "tolerations": list(tolerations)}, "status": {}}


GPU = {"key": "gpu-broken", "value": "yes", "effect": "NoExecute",
       "timeAdded": format_time(NOW - timedelta(seconds=5))}  # fmt: skip


@pytest.mark.parametrize(
    ("toleration", "lost_in"),
    [
        ({}, 0.0),  # none: at once (lost_in <= 0)
        ({"key": "gpu-broken", "operator": "Exists"}, None),  # for ever
        ({"operator": "Exists"}, None),  # an empty key with Exists tolerates every taint
        ({"key": "gpu-broken", "value": "yes"}, None),  # Equal, the same value
        ({"key": "gpu-broken", "value": "no"}, 0.0),  # another value: not tolerated
        ({"key": "gpu-broken", "operator": "Exists", "effect": "NoSchedule"}, 0.0),
        ({"key": "gpu-broken", "operator": "Exists", "tolerationSeconds": 30}, 25.0),
        ({"key": "gpu-broken", "operator": "Exists", "tolerationSeconds": -1}, 0.0),
    ],
)
def test_a_noexecute_taint_follows_the_pods_tolerations(
    toleration: JSON, lost_in: float | None
) -> None:
    signal = nodehealth.judge(
        on("n1", *([toleration] if toleration else [])), tainted(GPU),
        template_tolerations=[], now=NOW, grace=10.0,
    )  # fmt: skip
    if lost_in is None:
        assert signal is None
        return
    assert signal is not None and signal.node == "n1" and not signal.node_down
    assert max(signal.lost_in, 0.0) == pytest.approx(lost_in)


def test_the_shortest_matching_toleration_wins() -> None:
    both = [{"key": "gpu-broken", "operator": "Exists", "tolerationSeconds": 60},
            {"operator": "Exists", "tolerationSeconds": 20}]  # fmt: skip
    signal = nodehealth.judge(on("n1", *both), tainted(GPU), template_tolerations=[],
                              now=NOW, grace=10.0)  # fmt: skip
    assert signal is not None and signal.lost_in == pytest.approx(15.0)


def test_a_sign_without_a_time_counts_at_once() -> None:
    node = tainted({"key": nodehealth.UNREACHABLE_TAINT, "effect": "NoExecute"})
    signal = nodehealth.judge(on("n1"), node, template_tolerations=[], now=NOW, grace=10.0)
    assert signal is not None and signal.lost_in <= 0 and signal.node_down
    assert signal.what == "node unreachable (taint node.kubernetes.io/unreachable:NoExecute)"


def test_the_cache_keeps_a_nodes_health_alone() -> None:
    node = tainted(GPU, {"key": "x", "effect": "NoSchedule"}, ready="False")
    kept = nodehealth.node_projection(node)
    assert kept == {
        "metadata": {"name": "n1", "resourceVersion": "3"},
        "spec": {"taints": [GPU]},
        "status": {"conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": format_time(NOW)}]},
    }  # fmt: skip
    assert nodehealth.node_projection({"metadata": None, "spec": "odd"}) == {"metadata": {}}
    # Judged alike, full or kept.
    for seen in (node, kept):
        signal = nodehealth.judge(on("n1"), seen, template_tolerations=[], now=NOW, grace=0.0)
        assert signal is not None and signal.lost_in <= 0
