"""MSJobClientSync runs on its own loop thread, so it works under a running loop (Jupyter)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from msop.kube.errors import ApiUnavailable
from msop.sdk import MSJobClientSync, MSJobValidationError, dataparallel_job
from testbed.ports import free_port

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:PORT"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ns}}]
current-context: x
"""


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.replace("PORT", str(free_port())))
    return path


async def test_blocking_calls_work_while_a_loop_is_running(kubeconfig: Path) -> None:
    asyncio.get_running_loop()  # as in a notebook cell
    with MSJobClientSync(kubeconfig, namespace="team") as client:
        assert client.namespace == "team"
        with pytest.raises(MSJobValidationError):
            client.create(dataparallel_job("Bad_Name", "img", "x"))
        with pytest.raises(ApiUnavailable):
            client.get("j")  # nobody listens: the request really went out
        with pytest.raises(ApiUnavailable):
            client.list()
    assert "msop-sdk" not in {t.name for t in threading.enumerate()}  # the loop thread is gone
    client.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        client.get("j")
