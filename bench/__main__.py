"""``python -m bench``: run the scenarios and write ``bench/results/<timestamp>/``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import burst, hybrid, memory, polling
from bench.environment import kwok_version, machine, server_version, start_cluster
from bench.plots import write_plots
from bench.pyspy import write_summary
from bench.report import (
    judge,
    judge_curve_goals,
    judge_hybrid_goals,
    judge_scale_goals,
    judge_throttled_goals,
    render_markdown,
    scale_curve,
    shard_shares,
)
from msop import __version__
from testbed.paths import REPO

#: Operator flags for the burst: as many jobs reconciled at once as the raw baseline has
#: requests in flight (--concurrency); no client-side limit, the default (the baseline has
#: none either).
DEFAULT_OPERATOR_ARGS = "--max-concurrent-reconciles {concurrency}"

#: The load scenarios of the goals under a client-side limit and of the scale goals, each on
#: a fresh cluster: (jobs at scale 1, operator flags, requests in flight of the raw baseline).
#: The raw baseline runs at 16 in flight as in the issue's side-by-side measurements; the
#: operator keeps its defaults except for the flags named.
LOAD_SCENARIOS: dict[str, tuple[int, str, int]] = {
    "n100": (100, "", 16),
    "defaults": (500, "", 16),
    "n2000": (2000, "", 16),
    "qps20": (200, "--kube-api-qps 20 --kube-api-burst 30", 16),
    "n10000": (10000, "", 16),
    "shards2": (2000, "", 16),
    "shards4": (2000, "", 16),
    "failover2": (2000, "", 16),
}

#: Operator replicas per load scenario (above 1: ``--shards`` of as many, one each).
REPLICAS = {"shards2": 2, "shards4": 4, "failover2": 2}
#: Scenarios whose last replica is SIGKILLed once the MSJobs are created (the failover).
KILL_ONE = frozenset({"failover2"})

#: Scenarios run only when asked for (``--include``): 10,000 jobs (60,000 pods and the
#: raw baseline's as many) take about 50 minutes here; the sharded ones start several
#: operators on the 2,000-job burst of n2000, to compare each replica with that one.
OPT_IN = frozenset({"n10000", "shards2", "shards4", "failover2"})


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--scale", type=float, default=float(os.environ.get("BENCH_SCALE", "1")),
                   help="multiplies the job and pod counts (1 = the issue's sizes)")  # fmt: skip
    p.add_argument("--concurrency", type=int, default=50, help="requests in flight")
    p.add_argument("--operator-args", default=DEFAULT_OPERATOR_ARGS,
                   help="extra `msop run` flags for the burst operator")  # fmt: skip
    p.add_argument("--skip", action="append", default=[],
                   choices=("burst", *LOAD_SCENARIOS, "memory", "progress", "hybrid"))  # fmt: skip
    p.add_argument("--include", action="append", default=[], choices=sorted(OPT_IN),
                   help="also run this scenario, left out by default: n10000 (10,000 jobs, "
                   "60,000 pods), shards2 and shards4 (n2000's burst against 2 or 4 "
                   "replicas splitting the jobs into as many shards), failover2 (shards2 "
                   "with one replica SIGKILLed once the MSJobs are created)")  # fmt: skip
    p.add_argument(
        "--progress-interval",
        type=float,
        default=30.0,
        help="the progress scenario's --progress-interval (the operator's default "
        "30 s is used unless another is given)",
    )
    p.add_argument("--progress-steady-only", action="store_true",
                   help="progress scenario: skip the unreachable reporters' phases")  # fmt: skip
    p.add_argument("--profile", nargs="?", const="cprofile", choices=("cprofile", "py-spy"),
                   help="profile the operator of each burst and load scenario (the first "
                   "replica): cprofile (the default; main thread, "
                   "logs/operator-<scenario>.prof) or py-spy (sampled, every thread, "
                   "logs/operator-<scenario>.pyspy.txt and a summary in "
                   "logs/operator-<scenario>.pyspy-top.txt); its CPU figures then include the "
                   "profiler's overhead")  # fmt: skip
    p.add_argument("--timeout", type=float, default=600, help="seconds per wait")
    p.add_argument("--out", type=Path, default=None, help="results directory")
    return p


def _command(args: argparse.Namespace) -> str:
    """How to repeat this run: ``make bench`` when only the scale was given."""
    argv = sys.argv[1:]
    if all(a == "--scale" or a.startswith("--scale=") or a == str(args.scale) or
           a == f"{args.scale:g}" for a in argv):  # fmt: skip
        return "make bench" + (f" BENCH_SCALE={args.scale:g}" if args.scale != 1 else "")
    return "python -m bench " + shlex.join(argv)


def _count(base: int, scale: float) -> int:
    return max(1, round(base * scale))


def _nodes_for(base_jobs: int, scale: float) -> int:
    """kwok nodes for a load scenario: its operator's pods and the raw baseline's (6 per
    job each, both kept until the end) at the harness's 2,000 pods per node, and at
    least the burst's 4."""
    pods = 2 * 6 * _count(base_jobs, scale)
    return max(4, -(-pods // 2000) + 1)


async def _summarize_profile(
    profiler: str | None, logs: Path, label: str, report: dict[str, Any]
) -> None:
    """With py-spy: summarize scenario ``label``'s profile next to it (``-top.txt``)."""
    if profiler != "py-spy":
        return
    raw = logs / burst.profile_file(label, profiler)
    top = raw.with_name(raw.name.replace(".pyspy.txt", ".pyspy-top.txt"))
    if not await asyncio.to_thread(write_summary, raw, top):
        report["notes"].append(f"py-spy wrote no profile of {label} (is ptrace permitted?)")


async def _main(args: argparse.Namespace, started: datetime) -> Path:
    out: Path = args.out
    logs = out / "logs"
    report: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "command": _command(args),
        "argv": sys.argv[1:],
        "scale": args.scale,
        "environment": {"machine": machine()},
        "notes": [],
    }
    t0 = time.monotonic()
    versions: dict[str, str] = {"msop": __version__, "python": platform.python_version()}
    tag = f"{os.getpid()}"
    if "burst" not in args.skip:
        cluster = start_cluster(f"msop-bench-burst-{tag}", nodes=_nodes_for(500, args.scale))
        try:
            versions["kubernetes"] = server_version(cluster)
            versions["kwok"] = kwok_version(cluster)
            print(f"burst: cluster up ({time.monotonic() - t0:.0f}s)", flush=True)
            report["burst"] = await burst.run(
                cluster,
                jobs=_count(500, args.scale),
                concurrency=args.concurrency,
                operator_args=shlex.split(args.operator_args.format(concurrency=args.concurrency)),
                log_dir=logs,
                wait_s=args.timeout,
                profile=args.profile,
            )
            print(f"burst: done ({time.monotonic() - t0:.0f}s)", flush=True)
            await _summarize_profile(args.profile, logs, "burst", report)
        finally:
            cluster.stop()
    for label, (base_jobs, flags, raw_concurrency) in LOAD_SCENARIOS.items():
        if label in args.skip or (label in OPT_IN and label not in args.include):
            continue
        cluster = start_cluster(
            f"msop-bench-{label}-{tag}", nodes=_nodes_for(base_jobs, args.scale)
        )
        try:
            versions.setdefault("kubernetes", server_version(cluster))
            versions.setdefault("kwok", kwok_version(cluster))
            print(f"{label}: cluster up ({time.monotonic() - t0:.0f}s)", flush=True)
            report.setdefault("load", {})[label] = await burst.run(
                cluster,
                jobs=_count(base_jobs, args.scale),
                concurrency=args.concurrency,
                operator_args=shlex.split(flags),
                log_dir=logs,
                wait_s=args.timeout,
                label=label,
                raw_concurrency=raw_concurrency,
                replicas=REPLICAS.get(label, 1),
                profile=args.profile,
                kill_one=label in KILL_ONE,
            )
            print(f"{label}: done ({time.monotonic() - t0:.0f}s)", flush=True)
            await _summarize_profile(args.profile, logs, label, report)
        finally:
            cluster.stop()
    if "memory" not in args.skip:
        cluster = start_cluster(f"msop-bench-mem-{tag}", nodes=1)
        try:
            versions.setdefault("kubernetes", server_version(cluster))
            versions.setdefault("kwok", kwok_version(cluster))
            report["memory"] = await memory.run(
                cluster, jobs=_count(2000, args.scale), concurrency=args.concurrency, log_dir=logs
            )
            print(f"memory: done ({time.monotonic() - t0:.0f}s)", flush=True)
        finally:
            cluster.stop()
    if "progress" not in args.skip:
        cluster = start_cluster(f"msop-bench-progress-{tag}", nodes=4)
        try:
            versions.setdefault("kubernetes", server_version(cluster))
            versions.setdefault("kwok", kwok_version(cluster))
            print(f"progress: cluster up ({time.monotonic() - t0:.0f}s)", flush=True)
            report["progress"] = await polling.run(
                cluster,
                jobs=_count(1000, args.scale),
                interval=args.progress_interval,
                unreachable=not args.progress_steady_only,
                log_dir=logs,
                wait_s=args.timeout,
                concurrency=args.concurrency,
            )
            print(f"progress: done ({time.monotonic() - t0:.0f}s)", flush=True)
        finally:
            cluster.stop()
    if "hybrid" not in args.skip:
        pods = max(8, _count(1000, args.scale))
        result: dict[str, Any] = {}
        for mode in hybrid.MODES:
            cluster = start_cluster(f"msop-bench-hybrid-{tag}", nodes=hybrid.nodes_for(pods))
            try:
                versions.setdefault("kubernetes", server_version(cluster))
                versions.setdefault("kwok", kwok_version(cluster))
                print(f"hybrid {mode}: cluster up ({time.monotonic() - t0:.0f}s)", flush=True)
                result[mode] = await hybrid.run(cluster, pods, mode, logs, args.timeout)
            finally:
                cluster.stop()
        result["summary"] = hybrid.summary(result)
        result["line"] = hybrid.report_line(result)
        report["hybrid"] = result
        print(result["line"], flush=True)
    report["environment"]["versions"] = versions
    report["duration_s"] = time.monotonic() - t0
    report["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    report["targets"] = judge(report)
    report["throttled_goals"] = judge_throttled_goals(report)
    report["scale_goals"] = judge_scale_goals(report)
    report["hybrid_goals"] = judge_hybrid_goals(report)
    report["curve"] = scale_curve(report)
    report["shards"] = shard_shares(report)
    report["curve_goals"] = judge_curve_goals(report)
    try:
        report["plots"] = write_plots(report, out)
    except ImportError:
        report["notes"].append("matplotlib is not installed: no plots (pip install '.[bench]')")
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(render_markdown(report))
    return out


def main() -> None:
    args = _parser().parse_args()
    started = datetime.now(UTC)
    if args.out is None:
        args.out = REPO / "bench" / "results" / started.strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    out = asyncio.run(_main(args, started))
    print((out / "report.md").read_text())
    print(f"results: {out}")


if __name__ == "__main__":
    main()
