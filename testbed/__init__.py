"""The testbed: local clusters (kwok, a real kubelet node), the operator as a process,
images, add-ons. The development package that the tests, ``bench/`` and ``hack/`` (the
demos, ``release.py``) share; it imports nothing of ``tests/``. It is not part of the msop
package, its wheel or its image: ``tests/e2e/kwok/test_dockerfile.py`` checks the
installed wheel."""

from testbed.cluster import ClusterStartError, LocalCluster
from testbed.kubelet import KubeletStandIn
from testbed.operator import OperatorProcess

__all__ = ["ClusterStartError", "KubeletStandIn", "LocalCluster", "OperatorProcess"]
