"""A kubelet stand-in: drive simulated pods through their lifecycle, deterministically.

kwok's default stages move a scheduled Pending pod to Running (with a podIP) and
remove a pod once it has a deletionTimestamp. They never end a pod that no Job owns.
``KubeletStandIn`` does the rest with status-subresource patches, the way a kubelet
reports them:

- ``run``: wait until kwok has the pod Running, return it;
- ``succeed`` / ``fail``: the pod's containers terminate with an exit code and the
  phase becomes Succeeded (code 0) or Failed;
- ``restart``: a container exited and was restarted in place (restartPolicy Always or
  OnFailure): ``restartCount`` goes up, ``lastState`` records the exit code, and the
  pod stays Running.

Each call acts once and returns the pod as the API server stored it. Errors from the
API server propagate as ``subprocess.CalledProcessError``; a wait that times out
raises ``TimeoutError`` naming the pod and the phase it was in.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from msop.kube.objects import JSON
from testbed.cluster import Kubectl


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def terminated_containers(
    pod: JSON, exit_code: int, reason: str, now: str | None = None
) -> list[JSON]:
    """``containerStatuses`` of a pod whose containers all exited with ``exit_code``
    (restart counts kept). Pure: use it to build status patches at scale."""
    now = now or _now()
    old = {c["name"]: c for c in (pod.get("status") or {}).get("containerStatuses") or []}
    return [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": old.get(c["name"], {}).get("restartCount", 0),
            "state": {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": now,
                    "finishedAt": now,
                }
            },
        }
        for c in pod["spec"]["containers"]
    ]


def succeeded_status(pod: JSON, now: str | None = None) -> JSON:
    """The status patch a kubelet sends when every container of ``pod`` exited 0."""
    return {
        "status": {
            "phase": "Succeeded",
            "containerStatuses": terminated_containers(pod, 0, "Completed", now),
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
        }
    }


def failed_status(
    pod: JSON, exit_code: int, reason: str = "Error", message: str | None = None
) -> JSON:
    """The status patch a kubelet sends when every container exited with ``exit_code``
    (and, if given, the ``mindspore`` container left ``message`` as its termination
    message)."""
    statuses = terminated_containers(pod, exit_code, reason)
    for cs in statuses:
        if message is not None and cs["name"] == "mindspore":
            cs["state"]["terminated"]["message"] = message
    return {
        "status": {
            "phase": "Failed",
            "reason": reason,
            "containerStatuses": statuses,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}],
        }
    }


class KubeletStandIn:
    """Pod-lifecycle driver for e2e tests; ``cluster`` is anything with ``kubectl()``."""

    def __init__(self, cluster: Kubectl, poll_interval: float = 0.1) -> None:
        self._cluster = cluster
        self._poll = poll_interval

    def get(self, namespace: str, name: str) -> JSON:
        out = self._cluster.kubectl("get", "pod", "-n", namespace, name, "-o", "json")
        pod: JSON = json.loads(out.stdout)
        return pod

    def wait_for(self, namespace: str, name: str, phase: str, timeout: float = 30) -> JSON:
        """Wait until the pod exists and is in ``phase``; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        seen = "absent"
        while time.monotonic() < deadline:
            proc = self._cluster.kubectl(
                "get", "pod", "-n", namespace, name, "-o", "json", check=False
            )
            if proc.returncode == 0:
                pod: JSON = json.loads(proc.stdout)
                seen = pod.get("status", {}).get("phase", "")
                if seen == phase:
                    return pod
            time.sleep(self._poll)
        raise TimeoutError(f"pod {namespace}/{name} not {phase} within {timeout}s (was {seen!r})")

    def run(self, namespace: str, name: str, timeout: float = 30) -> JSON:
        """Wait until kwok has scheduled and started the pod; return it."""
        return self.wait_for(namespace, name, "Running", timeout)

    def _patch_status(self, namespace: str, name: str, status: JSON) -> JSON:
        out = self._cluster.kubectl(
            "patch", "pod", "-n", namespace, name, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}), "-o", "json",
        )  # fmt: skip
        pod: JSON = json.loads(out.stdout)
        return pod

    def succeed(self, namespace: str, name: str) -> JSON:
        """Every container exits 0; the pod becomes Succeeded."""
        pod = self.get(namespace, name)
        return self._patch_status(namespace, name, succeeded_status(pod)["status"])

    def fail(
        self,
        namespace: str,
        name: str,
        exit_code: int = 1,
        reason: str = "Error",
        message: str | None = None,
    ) -> JSON:
        """Every container exits with ``exit_code``; the pod becomes Failed. ``message``:
        the ``mindspore`` container's termination message."""
        pod = self.get(namespace, name)
        status = failed_status(pod, exit_code, reason, message)["status"]
        return self._patch_status(namespace, name, status)

    def restart(self, namespace: str, name: str, exit_code: int = 1, times: int = 1) -> JSON:
        """Containers exited with ``exit_code`` and were restarted ``times`` times in place."""
        pod = self.get(namespace, name)
        now = _now()
        statuses = []
        old = {c["name"]: c for c in pod.get("status", {}).get("containerStatuses", [])}
        for c in pod["spec"]["containers"]:
            prev = old.get(c["name"], {})
            statuses.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": prev.get("restartCount", 0) + times,
                    "state": {"running": {"startedAt": now}},
                    "lastState": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": "Error",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
            )
        return self._patch_status(
            namespace, name, {"phase": "Running", "containerStatuses": statuses}
        )
