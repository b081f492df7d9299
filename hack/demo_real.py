#!/usr/bin/env python3
"""`make demo-real`: msop installed in-cluster on a real node, running a sample in real containers.

1. installs the node's Debian packages, builds the control plane, kubelet and kube-proxy,
   and the images (pause, a Debian Python base, msop from the Dockerfile), all offline and
   cached (testbed.realnode.prepare);
2. starts a control plane and one real node (containerd, runc, kubelet, kube-proxy) in a
   network namespace of their own;
3. `kubectl apply -k` of an overlay of config/default that sets the image, as a user does,
   and waits for the Deployment to be Available; shows the pods and the Lease holder;
4. `kubectl apply -f config/samples/msjob_print_env.yaml` and shows `kubectl get msjobs`
   until it is Succeeded, then the containers' own output (their MS_* environment);
5. applies examples/mindspore (real MindSpore 2.10 on CPU, Scheduler + 2 Workers), shows
   it to Succeeded and the loss as the workers logged it;
6. tears everything down. MSOP_DEMO_KEEP=1 keeps it running and prints the kubeconfig.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The same step headers and waits as `make demo`.
from hack.demo import step, wait  # noqa: E402
from testbed import ClusterStartError  # noqa: E402
from testbed.examples import MINDSPORE_JOB, mindspore_example  # noqa: E402
from testbed.realnode import RealCluster, prepare, write_overlay  # noqa: E402

CACHE = Path(os.environ.get("MSOP_CACHE_DIR", REPO / ".cache"))
SAMPLE = REPO / "config/samples/msjob_print_env.yaml"
NS = "msop-system"


def show(cluster: RealCluster, *args: str) -> str:
    print(f"$ kubectl {' '.join(args)}")
    out = cluster.kubectl(*args, check=False)
    text = out.stdout + out.stderr
    print(text.rstrip())
    return text


def main() -> int:
    step("preparing: packages, binaries and images (cached after the first run)")
    prepared = prepare(REPO, CACHE)
    images = prepared.images
    for image in images.all():
        print(f"  {image.ref}  ({image.archive.stat().st_size / 2**20:.0f} MiB)")
    cluster = RealCluster(
        name="msop-demo-real",
        bin_dir=prepared.bin_dir,
        node_bin_dir=prepared.node_bin_dir,
        workdir=CACHE / "demo-real",
        images=images.all(),
    )
    keep = bool(os.environ.get("MSOP_DEMO_KEEP"))
    try:
        step("starting the control plane and a real node (kubelet + containerd)")
        cluster.start()
        show(cluster, "get", "nodes", "-o", "wide")

        step("installing msop as users do: kubectl apply -k (an overlay setting the image)")
        overlay = write_overlay(CACHE / "demo-real" / "overlay", images.operator.ref,
                                REPO / "config/default")  # fmt: skip
        print((overlay / "kustomization.yaml").read_text())
        show(cluster, "apply", "-k", str(overlay))

        def available() -> bool:
            out = cluster.kubectl("get", "deployment", "msop-controller-manager", "-n", NS,
                                  "-o", "json", check=False)  # fmt: skip
            if out.returncode:
                return False
            status = json.loads(out.stdout).get("status", {})
            return bool(status.get("readyReplicas") == 2)

        wait("the Deployment to be Available", available, timeout=180)
        show(cluster, "get", "deployment,pods", "-n", NS, "-o", "wide")
        show(cluster, "get", "lease", "msop.mindspore.gitee.com", "-n", NS)

        step(f"kubectl apply -f {SAMPLE.relative_to(REPO)}")
        show(cluster, "apply", "-f", str(SAMPLE))
        name = "msjob-print-env"

        def state(name: str) -> str:
            path = "jsonpath={.status.conditions[-1:].type}"
            out = cluster.kubectl("get", "msjob", name, "-o", path, check=False)
            return out.stdout.strip()

        def follow(name: str) -> str:
            seen = ""
            deadline = time.monotonic() + 240
            while (now := state(name)) not in ("Succeeded", "Failed") and (
                time.monotonic() < deadline
            ):
                if now != seen:
                    show(cluster, "get", "msjobs,pods", "-o", "wide")
                    seen = now
                time.sleep(1)
            step(f"the job is {state(name)}")
            return state(name)

        follow(name)
        show(cluster, "get", "msjobs,pods,svc")
        for pod in (f"{name}-scheduler-0", f"{name}-worker-0", f"{name}-worker-1"):
            step(f"what the container printed: kubectl logs {pod}")
            show(cluster, "logs", pod)
        show(cluster, "get", "events", "--field-selector", f"involvedObject.name={name}")
        if state(name) != "Succeeded":
            return 1

        step("real MindSpore: kubectl apply -k examples/mindspore (with the image built here)")
        checkpoints = CACHE / "demo-real" / "checkpoints"
        shutil.rmtree(checkpoints, ignore_errors=True)  # a fresh run trains from step 1
        objs = mindspore_example(cluster, images.mindspore.ref, checkpoints)
        listed = {"apiVersion": "v1", "kind": "List", "items": list(objs)}
        print(f"$ kubectl apply -k examples/mindspore  # image {images.mindspore.ref}")
        cluster.kubectl("apply", "-f", "-", input=json.dumps(listed))
        result = follow(MINDSPORE_JOB)
        for i in range(2):
            pod = f"{MINDSPORE_JOB}-worker-{i}"
            lines = cluster.kubectl("logs", pod, check=False).stdout.splitlines()
            steps = [json.loads(x) for x in lines if x.startswith('{"') and '"step"' in x]
            if steps:
                first, last = steps[0], steps[-1]
                print(f"  {pod}: rank {last['rank']}, step {first['step']} loss "
                      f"{first['loss']} -> step {last['step']} loss {last['loss']}")  # fmt: skip
        show(cluster, "get", "events", "--field-selector",
             f"involvedObject.name={MINDSPORE_JOB}")  # fmt: skip
        return 0 if result == "Succeeded" else 1
    except (ClusterStartError, TimeoutError) as e:
        print(f"\ndemo-real failed: {e}", file=sys.stderr)
        return 1
    finally:
        if keep:
            print(f"\nkept: export KUBECONFIG={cluster.kubeconfig}")
        else:
            step("tearing down")
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
