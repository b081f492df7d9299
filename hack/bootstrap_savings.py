#!/usr/bin/env python3
"""What each of ``msop run``'s process-level settings (msop/bootstrap.py) saves.

    .venv/bin/python hack/bootstrap_savings.py [--runs 5] [--startup-runs 31]

Runs ``msop run`` with every setting and with each one left out, the variants taking
turns, and prints the medians and each variant's difference from "all":

- **startup CPU**: ``msop run --kubeconfig /nonexistent`` (its whole startup up to
  reading the kubeconfig: the settings, the imports, logging, the process metrics,
  kubernetes_asyncio's config package); the CPU milliseconds of the process, read when
  it returns. The minimum is the steadiest figure on a busy machine.
- **idle RSS**: ``msop run`` against an empty API server of this script's own (TLS on
  127.0.0.1, lists empty, watches silent; no cluster), read 5 s after ``/readyz`` first
  answers 200 (caches synced), as ``make bench`` reads the idle RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: Code run before ``msop.cli.main``, leaving one setting out.
VARIANTS = {
    "all": "",
    "no heap thresholds": "import msop.malloc as m; m.limit_heap_growth = lambda: False",
    "no lazy kubernetes_asyncio": "import kubernetes_asyncio.config",
}


def serve(port: int, cert: str, key: str) -> None:
    """The empty API server: lists are empty, watches stay open, GETs of one object are
    404, creates are echoed."""
    import ssl

    from aiohttp import web

    def status(code: int) -> web.Response:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
        return web.json_response(body, status=code)

    async def handle(req: web.Request) -> web.StreamResponse:
        if req.path in ("/readyz", "/healthz", "/livez"):
            return web.Response(text="ok")
        parts = [p for p in req.path.split("/") if p]
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            rest = rest[2:]
        if req.method == "POST":
            obj = await req.json()
            obj.setdefault("metadata", {}).update(resourceVersion="2", uid="u")
            return web.json_response(obj, status=201)
        if req.method != "GET" or len(rest) != 1:
            return status(404)
        if req.query.get("watch") in ("true", "1"):
            resp = web.StreamResponse()
            await resp.prepare(req)
            await asyncio.sleep(float(req.query.get("timeoutSeconds", "3600")))
            return resp
        items: dict[str, Any] = {"kind": "List", "apiVersion": "v1", "items": []}
        return web.json_response({**items, "metadata": {"resourceVersion": "1"}})

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    web.run_app(
        app, host="127.0.0.1", port=port, ssl_context=ctx, print=None, access_log=None,
        shutdown_timeout=0.5,
    )  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def proc_sample(pid: int) -> float:
    """VmRSS of ``pid``, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FROZENLIST_NO_EXTENSIONS"}
    env["PYTHONPATH"] = str(REPO)
    return env


def startup_cpu(preamble: str) -> float:
    """CPU ms of ``msop run`` up to reading a kubeconfig that does not exist."""
    code = (
        f"import sys, time\n{preamble}\nfrom msop.cli import main\n"
        "rc = main(['run', '--kubeconfig', '/nonexistent', '--log-level', 'error'])\n"
        "assert rc == 1, rc\nprint(time.process_time() * 1000)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True,
        cwd=tempfile.gettempdir(),
    )  # fmt: skip
    return float(out.stdout.split()[-1])


def idle_rss(preamble: str, kubeconfig: Path, log: Path) -> float:
    """Idle RSS MiB of one ``msop run`` against the empty API server."""
    health, metrics = free_port(), free_port()
    code = f"import sys\n{preamble}\nfrom msop.cli import main\nsys.exit(main(sys.argv[1:]))"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "run", "--kubeconfig", str(kubeconfig),
             "--metrics-bind-address", f"127.0.0.1:{metrics}",
             "--health-probe-bind-address", f"127.0.0.1:{health}"],
            env=_env(), stdout=out, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir(),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"msop run did not get ready:\n{log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=1):
                    break
            except OSError:
                time.sleep(0.02)
        time.sleep(5)
        return proc_sample(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="idle runs of each variant")
    parser.add_argument("--startup-runs", type=int, default=31, help="startup runs of each")
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "CERT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(int(args.serve[0]), args.serve[1], args.serve[2])
        return
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.startup_runs):
        for name, preamble in VARIANTS.items():
            cpu[name].append(startup_cpu(preamble))
    rss: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"),
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True,
        )  # fmt: skip
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port), str(d / "cert.pem"),
             str(d / "key.pem")],
        )  # fmt: skip
        ca = base64.b64encode((d / "cert.pem").read_bytes()).decode()
        cluster = {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": ca}
        (d / "kubeconfig").write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "x",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        }))  # fmt: skip
        try:
            time.sleep(2)
            for _ in range(args.runs):
                for name, preamble in VARIANTS.items():
                    rss[name].append(idle_rss(preamble, d / "kubeconfig", d / "msop.log"))
        finally:
            server.kill()
            server.wait()
    base = (min(cpu["all"]), statistics.median(cpu["all"]), statistics.median(rss["all"]))
    print(f"{'':28} {'startup CPU ms: min':>20} {'median':>13} {'idle RSS MiB':>17}")
    for name in VARIANTS:
        row = (min(cpu[name]), statistics.median(cpu[name]), statistics.median(rss[name]))
        print(
            f"{name:28} {row[0]:13.0f} ({row[0] - base[0]:+4.0f})"
            f" {row[1]:6.0f} ({row[1] - base[1]:+4.0f}) {row[2]:9.2f} ({row[2] - base[2]:+5.2f})"
        )
    print(
        f"{args.startup_runs} startup and {args.runs} idle runs of each;"
        f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
