"""Test helpers that ship with msop: a local kwok cluster and a kubelet stand-in."""

from msop.testing.cluster import ClusterStartError, LocalCluster
from msop.testing.kubelet import KubeletStandIn
from msop.testing.operator import OperatorProcess

__all__ = ["ClusterStartError", "KubeletStandIn", "LocalCluster", "OperatorProcess"]
