"""Test helpers that ship with msop: a local kwok cluster and a kubelet stand-in."""

from msop.testing.cluster import ClusterStartError, LocalCluster
from msop.testing.kubelet import KubeletStandIn

__all__ = ["ClusterStartError", "KubeletStandIn", "LocalCluster"]
