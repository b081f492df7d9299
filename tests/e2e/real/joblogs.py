"""The logs of every container of a job's pods, kept for a test's failure message.

A MindSpore job's pods are gone soon after it fails: ``cleanPodPolicy: Running`` deletes
the ones still running (often the Scheduler and the surviving Workers, whose logs say why
the job failed). So ``JobLogs`` follows each container from the moment it starts
(``kubectl logs -f``), keeping its last lines, and ``JobLogs.tail()`` gives them with
each container's last known state, whether or not the pod still exists.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from testbed.realnode import RealCluster

JSON = dict[str, Any]


@dataclass
class _Followed:
    """One run of one container, the ``seq``-th seen (a pod recreated under the same name,
    or a restarted container, is a new run)."""

    seq: int
    pod: str
    uid: str
    container: str
    proc: subprocess.Popen[str]
    lines: deque[str]
    state: JSON = field(default_factory=dict)
    deleted: bool = False
    reader: threading.Thread | None = None


class JobLogs:
    """Follows the logs of the pods labelled with ``job`` in ``ns`` while in a ``with``.

    A poller lists the pods every ``interval`` seconds and starts one ``kubectl logs -f``
    per container run (a restarted container is a new run, so the previous one's lines
    are kept too). ``tail()`` never raises; kubectl's own errors show in the lines.
    """

    def __init__(
        self, cluster: RealCluster, ns: str, job: str, lines: int = 40, interval: float = 2.0
    ) -> None:
        self.cluster, self.ns, self.job = cluster, ns, job
        self.max_lines, self.interval = lines, interval
        self._runs: dict[tuple[str, str, str, int], _Followed] = {}
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name=f"logs-{job}", daemon=True)

    def __enter__(self) -> JobLogs:
        self._poller.start()
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._poller.join(timeout=10)
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            if run.proc.poll() is None:
                run.proc.terminate()
            try:
                run.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                run.proc.kill()
                run.proc.wait()
            if run.reader is not None:
                run.reader.join(timeout=5)

    def tail(self) -> str:
        """The last lines of every container run seen, by pod, then oldest run first."""
        self._refresh()
        with self._lock:
            runs = sorted(self._runs.values(), key=lambda r: (r.pod, r.container, r.seq))
        for r in runs:  # let a finished container's last lines arrive
            if "terminated" in r.state and r.reader is not None:
                r.reader.join(timeout=5)
        latest = {(r.pod, r.container): r.seq for r in runs}
        parts = []
        for r in runs:
            which = "current" if latest[(r.pod, r.container)] == r.seq else "previous"
            seen = describe(r.state) + (", pod deleted since" if r.deleted else "")
            header = f"--- {r.pod}/{r.container} ({which}; last seen {seen}) ---"
            parts.append("\n".join([header, *list(r.lines)]))
        return "\n".join(parts) if parts else f"(no container of a {self.job} pod ever started)"

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self._refresh()

    def _refresh(self) -> None:
        try:
            proc = self.cluster.kubectl(
                "get", "pods", "-n", self.ns, "-l", f"training.kubeflow.org/job-name={self.job}",
                "-o", "json", check=False, timeout=30,
            )  # fmt: skip
            pods: list[JSON] = json.loads(proc.stdout)["items"] if proc.returncode == 0 else []
        except (subprocess.SubprocessError, ValueError, KeyError):
            return
        uids = {p["metadata"]["uid"] for p in pods}
        with self._lock:
            for followed in self._runs.values():
                followed.deleted = followed.uid not in uids
        for pod in pods:
            meta = pod["metadata"]
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                state: JSON = cs.get("state") or {}
                key = (meta["name"], meta["uid"], cs["name"], int(cs.get("restartCount", 0)))
                with self._lock:
                    previous = self._runs.get((*key[:3], key[3] - 1))
                    if previous is not None and cs.get("lastState"):
                        previous.state = cs["lastState"]
                    run = self._runs.get(key)
                    if run is not None:
                        run.state = state
                        continue
                    if not ({"running", "terminated"} & state.keys()) or self._stop.is_set():
                        continue
                    self._runs[key] = self._follow(meta["name"], meta["uid"], cs["name"], state)

    def _follow(self, pod: str, uid: str, container: str, state: JSON) -> _Followed:
        cmd = [
            self.cluster.binary("kubectl"), "--kubeconfig", str(self.cluster.kubeconfig),
            "logs", "-f", "-n", self.ns, pod, "-c", container,
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        lines: deque[str] = deque(maxlen=self.max_lines)
        run = _Followed(next(self._seq), pod, uid, container, proc, lines, state)
        run.reader = threading.Thread(target=self._read, args=(run,), daemon=True)
        run.reader.start()
        return run

    @staticmethod
    def _read(run: _Followed) -> None:
        assert run.proc.stdout is not None
        for line in run.proc.stdout:
            run.lines.append(line.rstrip("\n"))


def describe(state: JSON) -> str:
    """``terminated exitCode=1 reason=Error`` from a containerStatus ``state``."""
    if not state:
        return "state unknown"
    kind, info = next(iter(state.items()))
    details = " ".join(f"{k}={info[k]}" for k in ("exitCode", "reason") if k in (info or {}))
    return f"{kind} {details}".strip()
