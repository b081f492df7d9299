#!/usr/bin/env python3
"""`make cluster-up` / `make cluster-down`: the long-lived local cluster named "msop".

up:   builds (or reuses) the binaries, starts the cluster, installs the CRDs from
      config/crd/bases, and prints the kubeconfig path (.cache/kwok/msop.kubeconfig).
down: deletes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the test harness lives in the checkout, not in the package

from testbed import ClusterStartError, LocalCluster  # noqa: E402


def cluster() -> LocalCluster:
    bin_dir = subprocess.run(
        [str(REPO / "hack/cluster/build.sh")], check=True, capture_output=True, text=True
    ).stdout.split()[-1]
    return LocalCluster(
        name=os.environ.get("MSOP_CLUSTER_NAME", "msop"),
        bin_dir=Path(bin_dir),
        workdir=Path(os.environ.get("MSOP_CACHE_DIR", REPO / ".cache")) / "kwok",
    )


def main() -> int:
    cmd = sys.argv[1] if len(sys.argv) > 1 else "up"
    try:
        c = cluster()
    except subprocess.CalledProcessError as e:
        print(f"building the control plane failed:\n{e.stderr}", file=sys.stderr)
        return 1
    if cmd == "down":
        c.stop()
        print(f"cluster {c.name} deleted")
        return 0
    started = time.monotonic()
    try:
        c.start()
    except ClusterStartError as e:
        print(e, file=sys.stderr)
        return 1
    for crd in sorted((REPO / "config/crd/bases").glob("*.yaml")):
        c.kubectl("apply", "-f", str(crd))
    print(f"cluster {c.name} up in {time.monotonic() - started:.1f}s")
    print(f"export KUBECONFIG={c.kubeconfig}")
    print(f"kubectl: {c.binary('kubectl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
