"""The test harness: local clusters (kwok, a real kubelet node), the operator as a process,
images, add-ons. Used by the tests, ``bench/`` and the ``hack/`` demos. It is not part of
the msop package, its wheel or its image: ``tests/e2e/kwok/test_dockerfile.py`` checks the
installed wheel."""

from tests.harness.cluster import ClusterStartError, LocalCluster
from tests.harness.kubelet import KubeletStandIn
from tests.harness.operator import OperatorProcess

__all__ = ["ClusterStartError", "KubeletStandIn", "LocalCluster", "OperatorProcess"]
