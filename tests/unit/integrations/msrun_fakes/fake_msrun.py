"""A stand-in for MindSpore's msrun with its process model, for the launcher's unit tests
(the real tier runs the real one): the same flags; in the master's pod (``--master_addr``
is 127.0.0.1 here) a Scheduler with ``MS_ROLE=MS_SCHED`` and ``RANK_ID=0`` in msrun's own
process group; ``--local_worker_num`` workers, each in a session of its own
(``os.setsid``), with ``MS_ROLE=MS_WORKER``, ``DEVICE_ID`` = the local rank and
``RANK_ID`` = node rank x local workers + local rank; ``python <script>`` unless the
script is ``python``; with ``--join``, a poll of the workers every so often: on the first
one to end non-zero it logs its code, SIGKILLs every other worker's process group, waits
for the Scheduler and exits 1 with a RuntimeError, as msrun 2.10 does.

``FAKE_MSRUN_FAIL=1`` makes it fail before it starts anything (bad flags, say)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--worker_num", type=int, default=8)
    p.add_argument("--local_worker_num", type=int, default=8)
    p.add_argument("--master_addr", default="127.0.0.1")
    p.add_argument("--master_port", type=int, default=8118)
    p.add_argument("--node_rank", type=int, default=-1)
    p.add_argument("--join", default="False")
    p.add_argument("--log_dir", default="")
    p.add_argument("--cluster_time_out", type=int, default=600)
    p.add_argument("task_script")
    p.add_argument("task_script_args", nargs=argparse.REMAINDER)
    args = p.parse_args()
    if os.environ.get("FAKE_MSRUN_FAIL"):
        raise SystemExit("fake msrun: failing before it starts anything")
    cmd = [args.task_script, *args.task_script_args]
    if args.task_script not in ("python", "python3"):
        cmd = [sys.executable, *cmd]
    base = {
        **os.environ,
        "MS_WORKER_NUM": str(args.worker_num),
        "MS_SCHED_HOST": args.master_addr,
        "MS_SCHED_PORT": str(args.master_port),
    }
    print(f"fake msrun: log_dir={args.log_dir!r}", flush=True)
    scheduler = None
    if args.master_addr == "127.0.0.1":
        scheduler = subprocess.Popen(cmd, env={**base, "MS_ROLE": "MS_SCHED", "RANK_ID": "0"})
    workers = []
    for local in range(args.local_worker_num):
        env = {
            **base,
            "MS_ROLE": "MS_WORKER",
            "DEVICE_ID": str(local),
            "RANK_ID": str(args.node_rank * args.local_worker_num + local),
        }
        workers.append(subprocess.Popen(cmd, env=env, preexec_fn=os.setsid))
    if args.join != "True":
        return 0
    failed = False
    while not failed:
        codes = [w.poll() for w in workers]
        bad = [(w, code) for w, code in zip(workers, codes, strict=True) if code not in (None, 0)]
        if bad:
            print(
                f"Worker process {bad[0][0].pid} exit with exception. Error code: {bad[0][1]}.",
                file=sys.stderr,
                flush=True,
            )
            for w in workers:
                if w.poll() is None:
                    os.killpg(os.getpgid(w.pid), signal.SIGKILL)
            failed = True
        elif all(code == 0 for code in codes):
            break
        time.sleep(0.1)
    if scheduler is not None:
        scheduler.wait()
        failed = failed or scheduler.returncode != 0
    if failed:
        raise RuntimeError("Distributed job exited with exception.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
