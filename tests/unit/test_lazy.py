"""prometheus_client as a lazy package (msop.lazy), as ``msop run``'s bootstrap
(msop.bootstrap) registers it, in fresh interpreters.

The operator's metrics never run that package's ``__init__``; everything else that uses
the package still works, and the log lines are the same bytes with and without the
bootstrap. Also: the operator loads fractions only when it needs it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

from testbed.paths import REPO

#: What ``msop run`` does first (msop.cli.main).
BOOTSTRAP = "from msop import bootstrap; bootstrap.apply()"


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
        text=True, check=True, timeout=60,
    )  # fmt: skip
    return out.stdout


def test_the_operators_metrics_do_not_run_the_package_initializer() -> None:
    out = _run(
        f"""
        import json, sys
        {BOOTSTRAP}
        import msop.logs, msop.cli.run, msop.controller.health
        msop.logs.configure("json", "info")
        import structlog
        structlog.get_logger("x")
        mods = sorted(m for m in sys.modules if m.startswith(("prometheus_client", "structlog")))
        print(json.dumps(mods))
        """
    )
    mods = json.loads(out.splitlines()[-1])
    assert "prometheus_client.metrics" in mods and "structlog.stdlib" in mods
    # structlog is imported the ordinary way: as a lazy package it saved 0.1 MiB.
    for unwanted in ("prometheus_client.exposition", "prometheus_client.gc_collector"):
        assert unwanted not in mods


def test_the_rest_of_a_lazy_package_still_works() -> None:
    out = _run(
        f"""
        {BOOTSTRAP}
        import msop.logs, msop.metrics
        import prometheus_client, structlog
        from prometheus_client import generate_latest, start_http_server
        from prometheus_client.core import GaugeMetricFamily
        assert callable(start_http_server) and GaugeMetricFamily
        assert generate_latest(msop.metrics.REGISTRY) == msop.metrics.generate_latest()
        assert structlog.testing.capture_logs and structlog.PrintLogger
        assert isinstance(structlog.__version__, str)
        from structlog import *  # noqa: F403
        from prometheus_client import *  # noqa: F403
        print("ok")
        """
    )
    assert out.splitlines()[-1] == "ok"


_LOGS = """
import logging, sys
{first}
from msop import logs
import structlog
logs.configure({fmt!r}, "info")
log = structlog.get_logger("msop.test")
# One context variable: the order of several varies from run to run (contextvars' own
# iteration order), lazy or not.
with structlog.contextvars.bound_contextvars(controller="c"):
    log.info("reconciled", took=0.25, quoted='a "b"\\nc')
log.warning("no context", n=1)
logging.getLogger("aiohttp.client").warning("from %s", "stdlib")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("failed")
"""


def test_log_lines_are_the_same_with_and_without_the_bootstrap() -> None:
    for fmt in ("json", "console"):
        booted = _run(_LOGS.format(first=BOOTSTRAP, fmt=fmt))
        plain = _run(_LOGS.format(first="import structlog, prometheus_client", fmt=fmt))
        stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z")
        assert stamp.sub("T", booted) == stamp.sub("T", plain), fmt
        assert "reconciled" in booted and "ZeroDivisionError" in booted
    line = json.loads(_run(_LOGS.format(first=BOOTSTRAP, fmt="json")).splitlines()[0])
    assert line["event"] == "reconciled" and line["controller"] == "c"
    assert line["level"] == "info" and line["logger"] == "msop.test"
    assert line["timestamp"].endswith("Z")


def test_the_operator_imports_fractions_only_when_it_parses_a_quantity() -> None:
    # fractions pulls in decimal (0.4 MiB); an operator with no jobs never needs it.
    out = _run(
        f"""
        import sys
        {BOOTSTRAP}
        import msop.logs, msop.cli.run, msop.msjob.setup
        print("fractions" in sys.modules, "decimal" in sys.modules)
        from msop.msjob.desired import pod_requests
        req = pod_requests({{"containers": [{{"resources": {{"requests": {{"cpu": "500m"}}}}}}]}})
        print(req["cpu"][0] * 2 == 1, "fractions" in sys.modules)
        """
    )
    assert out.splitlines()[-2:] == ["False False", "True True"]
