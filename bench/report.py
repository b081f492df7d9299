"""The report: targets judged against the results, and its Markdown rendering.

:func:`judge` and :func:`render_markdown` are pure (dict in, data out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """One goal from issue 7: ``value`` must be ``<= limit`` (or ``== limit``)."""

    name: str
    path: tuple[str, ...]
    limit: float
    unit: str
    exact: bool = False


TARGETS = (
    Target("burst p99 job latency", ("burst", "operator", "job_latency_s", "p99"), 2.0, "s"),
    Target("operator / raw-create time", ("burst", "ratio_operator_to_raw"), 1.3, "x"),
    Target("writes per job", ("burst", "api", "writes_per_job"), 10.0, "", exact=True),
    Target("bytes per cached pod", ("memory", "bytes_per_cached_pod"), 1536.0, "B"),
    Target("RSS with all pods cached", ("memory", "rss_mib_full_settled"), 150.0, "MiB"),
    Target(
        "CPU per job lifecycle", ("burst", "operator", "operator_cpu_ms_per_lifecycle"), 20.0, "ms"
    ),
)


def _dig(data: JSON, path: tuple[str, ...]) -> Any:
    cur: Any = data
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    return cur


def judge(results: JSON) -> list[JSON]:
    """One row per target: value, limit, met (None when not measured)."""
    rows = []
    for t in TARGETS:
        value = _dig(results, t.path)
        limit = t.limit
        if t.path[-1] == "writes_per_job":
            limit = _dig(results, (*t.path[:-1], "minimum_writes_per_job")) or limit
        met = None
        if isinstance(value, int | float):
            met = abs(value - limit) < 1e-9 if t.exact else value <= limit
        rows.append(
            {"target": t.name, "value": value, "limit": limit, "unit": t.unit, "met": met,
             "exact": t.exact}
        )  # fmt: skip
    return rows


def _fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return lines


def _server(row: JSON) -> list[Any]:
    s = row.get("server_s") or {}
    return [s.get("p50"), s.get("p99")]


def render_markdown(report: JSON) -> str:
    """The human-readable report; every number comes from ``report``."""
    env = report.get("environment", {})
    lines = [f"# msop benchmark {report.get('started', '')}", ""]
    lines.append(f"Command: `{report.get('command', '')}` (scale {report.get('scale')})")
    lines.append("")
    m = env.get("machine", {})
    v = env.get("versions", {})
    lines.append(
        f"Machine: {m.get('cores')} cores ({m.get('cpu_model', '')}), {m.get('memory_gib')} GiB; "
        f"load average before {m.get('loadavg')}, after {report.get('loadavg_after')}. "
        f"Total run {_fmt(report.get('duration_s'), 0)} s."
    )
    lines.append(
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ". "
        "The control plane (etcd, apiserver, scheduler, kwok) shares the machine."
    )
    lines += ["", "## Targets", ""]
    rows = []
    for r in report.get("targets", []):
        verdict = {True: "met", False: "MISSED", None: "not measured"}[r["met"]]
        op = "=" if r["exact"] else "≤"
        rows.append([r["target"], f"{_fmt(r['value'])} {r['unit']}", f"{op} {_fmt(r['limit'])}",
                     verdict])  # fmt: skip
    lines += _table(["target", "measured", "goal", "verdict"], rows)

    burst = report.get("burst")
    if burst:
        op, raw, api = burst["operator"], burst["raw"], burst["api"]
        lat, rlat = op["job_latency_s"], raw["job_latency_s"]
        lines += ["", "## Burst", ""]
        lines.append(
            f"{op['jobs']} MSJobs ({op['pods']} pods, {op['services']} Services) created at "
            f"once, {op['concurrency']} requests in flight; operator flags "
            f"`{' '.join(op['operator_args']) or '(defaults)'}`."
        )
        lines.append("")
        lines += _table(
            ["", "p50 s", "p90 s", "p99 s", "max s", "all objects exist s"],
            [
                ["operator (per job)", lat.get("p50"), lat.get("p90"), lat.get("p99"),
                 lat.get("max"), op["all_objects_exist_s"]],
                ["raw creates (per job)", rlat.get("p50"), rlat.get("p90"), rlat.get("p99"),
                 rlat.get("max"), raw["all_objects_exist_s"]],
            ],
        )  # fmt: skip
        lines.append("")
        lines.append(
            f"Ratio operator/raw: **{_fmt(burst['ratio_operator_to_raw'])}x**. "
            f"All jobs Running {_fmt(op['all_running_s'])} s after the burst began; "
            f"all Succeeded {_fmt(op['all_succeeded_after_completion_s'])} s after the pods "
            f"started completing ({_fmt(op['completion_patches_s'])} s to send the "
            f"{op['pods']} status patches)."
        )
        lines += ["", "## API requests of the operator (audit log, user agent `msop/`)", ""]
        lines.append(
            f"Writes per job: **{_fmt(api['writes_per_job'])}** (minimum "
            f"{_fmt(api['minimum_writes_per_job'])}: {op['pods'] // op['jobs']} pods + 1 Service "
            f"+ 3 status writes); status writes per job {_fmt(api['status_writes_per_job'])}; "
            f"Events {_fmt(api['event_writes_per_job'])} per job (not counted; "
            f"{_fmt(op.get('events_dropped'))} more dropped by the operator's bounded event "
            f"queue). GET/LIST: "
            f"{api['reads_get_list']} in total; watches: {api['watches']}."
        )
        lines.append("")
        lines += _table(
            ["verb", "resource", "count", "server p50 s", "server p99 s"],
            [[r["verb"], r["resource"], r["count"], *_server(r)] for r in api["requests"]],
        )
        if raw.get("server_latency"):
            lines += ["", "The baseline's creates, as the API server timed them:", ""]
            lines += _table(
                ["verb", "resource", "count", "server p50 s", "server p99 s"],
                [[r["verb"], r["resource"], r["count"], *_server(r)]
                 for r in raw["server_latency"]],
            )  # fmt: skip
        lines += ["", "## CPU", ""]
        lines.append(
            f"{_fmt(op['operator_cpu_s'])} s of operator CPU for {op['jobs']} lifecycles: "
            f"**{_fmt(op['operator_cpu_ms_per_lifecycle'])} ms per lifecycle**, "
            f"{_fmt(op['operator_cpu_s_per_1000_lifecycles'])} s per 1,000. "
            f"Reconciles per job: {_fmt(op.get('reconciles_per_job'))} "
            f"(by result: {op.get('reconciles')})."
        )

    mem = report.get("memory")
    if mem:
        lines += ["", "## Memory", ""]
        lines.append(
            f"{mem['pods_in_cluster']:,} pods in the cluster, {mem['cached_pods']:,} of them the "
            f"operator's, and {mem['jobs']:,} MSJobs. Bytes per cached pod "
            f"(RSS full - RSS empty, over cached pods): "
            f"**{_fmt(mem['bytes_per_cached_pod'], 0)} B**; marginal, between the first "
            f"filled level and the full cluster: "
            f"{_fmt(mem.get('marginal_bytes_per_cached_pod'), 0)} B. Both include the "
            f"MSJobs (one per {mem['cached_pods'] // max(mem['jobs'], 1)} pods) and Services "
            f"in the cache."
        )
        lines.append("")
        lines += _table(
            ["cached pods", "pods in cluster", "start → synced s", "RSS at synced MiB",
             "RSS settled MiB"],
            [[p["cached_pods"], p["pods_in_cluster"], p["seconds_to_synced"],
              p["rss_mib_at_synced"], p["rss_mib_settled"]] for p in mem["points"]],
        )  # fmt: skip
    if report.get("plots"):
        lines += ["", "## Plots", ""]
        lines += [f"![{p}]({p})" for p in report["plots"]]
    for note in report.get("notes", []):
        lines.append(f"\n> {note}")
    return "\n".join(lines) + "\n"
