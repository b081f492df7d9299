"""PNG plots of a report (matplotlib, the ``bench`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.stats import cdf

JSON = dict[str, Any]


def write_plots(report: JSON, out: Path) -> list[str]:
    """Write ``latency_cdf.png`` and ``memory.png`` when their data exists; return the
    file names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    burst = report.get("burst")
    if burst:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, data in (("operator", burst["operator"]), ("raw creates", burst["raw"])):
            xs, ys = cdf(data["job_latencies"])
            ax.step(xs, ys, where="post", label=label)
        ax.axvline(2.0, color="grey", linestyle="--", linewidth=1, label="target p99 2 s")
        ax.set_xlabel("seconds from job creation to all its pods and its Service")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"Burst of {burst['operator']['jobs']} MSJobs: latency CDF")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "latency_cdf.png", dpi=100)
        plt.close(fig)
        written.append("latency_cdf.png")
    mem = report.get("memory")
    if mem:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        xs = [p["cached_pods"] for p in mem["points"]]
        ax.plot(xs, [p["rss_mib_at_synced"] for p in mem["points"]], "o-", label="at synced")
        ax.plot(xs, [p["rss_mib_settled"] for p in mem["points"]], "s-", label="settled")
        ax.axhline(150, color="grey", linestyle="--", linewidth=1, label="target 150 MiB")
        ax.set_xlabel("pods in the operator's cache (as many unrelated pods not cached)")
        ax.set_ylabel("operator RSS (MiB)")
        ax.set_title("Operator memory against cached pods")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "memory.png", dpi=100)
        plt.close(fig)
        written.append("memory.png")
    return written
