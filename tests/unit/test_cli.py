"""`msop` command-line behaviour that needs no cluster: versions, flag errors, startup errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from msop import __version__
from msop.cli import build_parser, parse_args
from tests.support.parsers import subcommands


def msop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "msop.cli", *args], capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip


def test_version() -> None:
    out = msop("version")
    assert out.returncode == 0 and out.stdout.strip() == f"msop {__version__}"
    out = msop("--version")  # as every command line tool answers
    assert out.returncode == 0 and out.stdout.strip() == f"msop {__version__}"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--max-concurrent-reconciles", "0"],
        ["run", "--kube-api-qps", "nan"],
        ["run", "--kube-api-burst", "-1"],
        ["run", "--log-format", "xml"],
        ["run", "--progress-port", "70000"],
        ["run", "--progress-port", "http"],
        ["run", "--progress-interval", "0"],
        ["run", "--metrics-secure=maybe"],
        ["run", "--bogus"],
        [],
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str]) -> None:
    out = msop(*args)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "error:" in out.stderr and "Traceback" not in out.stderr


def test_unreachable_api_server_is_one_line_and_exit_1(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1',"
        " insecure-skip-tls-verify: true}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "users: [{name: x, user: {token: t}}]\n"
    )
    out = msop("run", "--kubeconfig", str(kubeconfig), "--metrics-bind-address", "0",
               "--health-probe-bind-address", "0")  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.strip().startswith("msop: error: cannot reach the API server")
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_every_flag_has_an_env_var_and_a_default_in_help() -> None:
    parser = build_parser()
    run = subcommands(parser)["run"]
    for action in run._actions:
        if action.dest in ("help",):
            continue
        assert "[env " in (action.help or ""), action.dest
    text = run.format_help()
    assert "(default: :8080)" in text and "(default: :8081)" in text


def test_flags_read_their_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MSOP_MAX_CONCURRENT_RECONCILES", "7")
    monkeypatch.setenv("MSOP_LEADER_ELECT", "true")
    monkeypatch.setenv("MSOP_NAMESPACES", "a,b")
    monkeypatch.setenv("MSOP_PROGRESS_PORT", "0")
    monkeypatch.setenv("MSOP_PROGRESS_INTERVAL", "2.5")
    args = parse_args(["run"])
    assert args.max_concurrent_reconciles == 7 and args.leader_elect
    assert (args.progress_port, args.progress_interval) == (0, 2.5)
    assert args.namespaces == ["a", "b"]
    args = parse_args(["run", "--max-concurrent-reconciles", "3", "--namespace", "c"])
    assert args.max_concurrent_reconciles == 3
    assert args.namespaces == ["c"]  # the command line wins over the variable


def test_metrics_are_secure_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MSOP_METRICS_SECURE", raising=False)
    assert parse_args(["run"]).metrics_secure is True
    assert parse_args(["run", "--metrics-secure"]).metrics_secure is True
    assert parse_args(["run", "--metrics-secure=true"]).metrics_secure is True
    assert parse_args(["run", "--metrics-secure=false"]).metrics_secure is False
    assert parse_args(["run", "--metrics-secure=False", "--leader-elect"]).metrics_secure is False
    assert parse_args(["run", "--metrics-secure", "--leader-elect"]).leader_elect
    assert parse_args(["run"]).metrics_cert_dir is None
    monkeypatch.setenv("MSOP_METRICS_SECURE", "false")
    assert parse_args(["run"]).metrics_secure is False
    assert parse_args(["run", "--metrics-secure"]).metrics_secure is True  # the flag wins


def test_a_misspelt_metrics_secure_variable_does_not_turn_security_off() -> None:
    import os

    out = msop("run", env={**os.environ, "MSOP_METRICS_SECURE": "flase"})
    assert out.returncode == 2 and "--metrics-secure" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_cert_dir_without_secure_metrics_is_a_startup_error() -> None:
    out = msop("run", "--metrics-secure=false", "--metrics-cert-dir", "/certs")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "msop: error: --metrics-cert-dir needs --metrics-secure (it is false)"
    )


def test_no_client_side_limit_by_default_and_client_go_semantics_when_set() -> None:
    args = parse_args(["run"])
    assert (args.kube_api_qps, args.kube_api_burst) == (-1, 0)  # APF shapes the traffic
    args = parse_args(["run", "--kube-api-qps", "0"])  # client-go's default, 5/s burst 10
    assert (args.kube_api_qps, args.kube_api_burst) == (0, 0)
    args = parse_args(["run", "--kube-api-qps", "50", "--kube-api-burst", "100"])
    assert (args.kube_api_qps, args.kube_api_burst) == (50, 100)


def test_a_bad_environment_value_is_a_one_line_usage_error() -> None:
    import os

    out = msop("run", env={**os.environ, "MSOP_KUBE_API_QPS": "fast"})
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert "--kube-api-qps" in out.stderr


def test_an_unreachable_api_server_is_one_readable_line(tmp_path: Path) -> None:
    # Port 1 on loopback: nothing listens there; the connection is refused at once.
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: x, user: u, namespace: ns}}]\n"
    )
    out = msop("list", "--kubeconfig", str(config))
    assert out.returncode == 1
    assert out.stderr.startswith(
        "msop: error: cannot reach the API server: GET "
        "/apis/mindspore.gitee.com/v1/namespaces/ns/msjobs: Cannot connect to host 127.0.0.1:1"
    ), out.stderr
    assert "Error(" not in out.stderr and out.stderr.count("\n") == 1  # no repr, one line
