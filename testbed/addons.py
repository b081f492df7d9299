"""What the harness's add-ons built from Go modules (Volcano, Kueue) share: building them
through their ``hack/<name>/build.sh``, installing their CRDs, probing their health
endpoints and reading their logs."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from testbed.cluster import Kubectl
from testbed.paths import REPO


def build(name: str, what: str) -> Path:
    """Run ``hack/<name>/build.sh`` (a build, or a cache hit); return the directory it
    prints. RuntimeError with the script's stderr tail if it fails."""
    script = REPO / "hack" / name / "build.sh"
    proc = subprocess.run([str(script)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"building {what} failed (hack/{name}/build.sh):\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def apply_crds(cluster: Kubectl, crds: Iterable[Path], timeout: float = 60) -> None:
    """Apply CRD files server-side (too large for the last-applied annotation) and wait
    until each is Established."""
    files = sorted(crds)
    for crd in files:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    for crd in files:
        cluster.kubectl(
            "wait", "--for=condition=Established", f"--timeout={int(timeout)}s", "-f", str(crd)
        )


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
