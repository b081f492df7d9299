"""``msop run``'s bootstrap (msop.bootstrap), in fresh interpreters: the log lines are the
same bytes with and without it, and the operator loads fractions only when it needs it.
(kubernetes_asyncio as a lazy package: tests/unit/kube/test_k8sconfig.py.)
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
