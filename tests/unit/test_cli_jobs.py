"""The job commands of `msop` and `kubectl msjob`, without a cluster: their parsing, what
they print (pure functions of the objects), and how the SDK's errors become exit codes,
driven with a small fake that has the SDK's method names."""

from __future__ import annotations

import argparse
import asyncio
import builtins
import io
import json
import subprocess
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

import msop.cli
from msop.cli import jobs
from msop.cli.completion import completion_script
from msop.cli.flags import JOB_COMMANDS, PLUGIN_PROG, build_parser, parse_args
from msop.kube.errors import ApiError, ApiUnavailable
from msop.sdk import (
    MSJobError,
    MSJobFailedError,
    MSJobLogsError,
    MSJobNotFoundError,
    MSJobTimeoutError,
)
from tests.support.builders import NOW, T0, job, running_status
from tests.support.parsers import subcommands

JSON = dict[str, Any]


# --- parsing -----------------------------------------------------------------------------------
def test_every_job_command_takes_kubectls_flags_with_kubectls_defaults() -> None:
    for command in JOB_COMMANDS:
        extra = {"wait": ["--for", "Running"], "scale": ["--replicas", "1"]}.get(command, [])
        name = [] if command == "list" else ["j"]
        args = parse_args([command, *name, *extra])
        assert (args.kubeconfig, args.context, args.namespace) == (None, None, None), command
        args = parse_args(
            [command, *name, *extra, "--kubeconfig", "k", "--context", "c", "-n", "ns"]
        )
        assert (args.kubeconfig, args.context, args.namespace) == ("k", "c", "ns"), command


def test_list_flags() -> None:
    args = parse_args(["list"])
    assert (args.all_namespaces, args.selector, args.output) == (False, None, None)
    args = parse_args(["list", "-A", "-l", "team=nlp", "-o", "wide"])
    assert (args.all_namespaces, args.selector, args.output) == (True, "team=nlp", "wide")
    for output in ("json", "yaml", "name"):
        assert parse_args(["list", "--output", output]).output == output


def test_logs_flags_and_defaults() -> None:
    args = parse_args(["logs", "j"])
    assert (args.name, args.replica_type, args.index, args.container) == (
        "j", None, None, "mindspore",
    )  # fmt: skip
    assert (args.follow, args.previous, args.tail, args.prefix) == (False, False, None, True)
    args = parse_args(
        ["logs", "j", "--replica-type", "worker", "--index", "1", "-f", "--previous",
         "--tail", "20", "--no-prefix", "-c", "side"]
    )  # fmt: skip
    assert (args.replica_type, args.index, args.container) == ("Worker", 1, "side")
    assert (args.follow, args.previous, args.tail, args.prefix) == (True, True, 20, False)
    assert parse_args(["logs", "j", "--replica-type", "ps"]).replica_type == "PS"


@pytest.mark.parametrize(
    ("given", "condition"),
    [
        ("Succeeded", "Succeeded"),
        ("condition=Succeeded", "Succeeded"),
        ("condition=failed", "Failed"),
        ("queued", "Queued"),
        ("Suspended", "Suspended"),
        ("restarting", "Restarting"),
        ("Created", "Created"),
    ],
)
def test_wait_for_takes_a_condition_or_kubectls_condition_form(given: str, condition: str) -> None:
    assert parse_args(["wait", "j", "--for", given]).condition == condition
    assert parse_args(["wait", "j", f"--for={given}"]).condition == condition


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("600s", 600), ("10m", 600), ("1h30m", 5400), ("90", 90), ("2.5", 2.5), ("500ms", 0.5)],
)
def test_wait_timeout_is_a_kubectl_duration(given: str, seconds: float) -> None:
    assert parse_args(["wait", "j", "--for", "Running", "--timeout", given]).timeout == seconds


def test_wait_and_delete_default_to_600_seconds() -> None:
    assert parse_args(["wait", "j", "--for", "Running"]).timeout == 600
    args = parse_args(["delete", "j"])
    assert (args.wait, args.timeout) == (False, 600)
    assert parse_args(["delete", "j", "--wait", "--timeout", "1m"]).timeout == 60


def test_scale_suspend_resume_status_flags() -> None:
    args = parse_args(["scale", "j", "--replicas", "4", "-o", "yaml"])
    assert (args.name, args.replicas, args.output) == ("j", 4, "yaml")
    assert parse_args(["scale", "j", "--replicas", "0"]).replicas == 0
    assert parse_args(["suspend", "j"]).output is None
    assert parse_args(["resume", "j", "-o", "json"]).output == "json"
    assert parse_args(["status", "j", "-o", "json"]).output == "json"


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "j"],
        ["list", "-o", "table"],
        ["status"],
        ["status", "j", "-o", "wide"],
        ["logs", "j", "--replica-type", "Chief"],
        ["logs", "j", "--index", "-1"],
        ["logs", "j", "--tail", "x"],
        ["wait", "j"],
        ["wait", "j", "--for", "Done"],
        ["wait", "j", "--for", "delete"],
        ["wait", "j", "--for", "Running", "--timeout", "0"],
        ["wait", "j", "--for", "Running", "--timeout", "10x"],
        ["wait", "j", "--for", "Running", "--timeout", "1h30"],
        ["scale", "j"],
        ["scale", "j", "--replicas", "-1"],
        ["suspend"],
        ["delete", "j", "-o", "json"],
        ["completion", "fish"],
    ],
)
def test_bad_usage_exits_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("msop") and "error:" in err, err


def test_the_help_documents_the_exit_codes() -> None:
    parser = build_parser()
    assert "3  the job does not exist" in parser.format_help()
    wait = subcommands(parser)["wait"]
    text = wait.format_help()
    assert "4  wait (or delete --wait) timed out" in text and "exit codes:" in text


# --- the kubectl plugin ------------------------------------------------------------------------
def test_the_plugin_is_named_kubectl_msjob_in_usage_and_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser(PLUGIN_PROG)
    ls = subcommands(parser)["list"]
    assert ls.format_usage().startswith("usage: kubectl msjob list ")
    with pytest.raises(SystemExit) as exc:
        msop.cli.kubectl_plugin(["list", "--bogus"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("kubectl msjob: error: unrecognized arguments")


def test_the_plugin_runs_the_same_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []

    def run_job_command(args: argparse.Namespace, prog: str = "msop") -> int:
        seen.append((args.command, prog))
        return 7

    monkeypatch.setattr(jobs, "run_job_command", run_job_command)
    assert msop.cli.kubectl_plugin(["list", "-A"]) == 7
    assert msop.cli.main(["status", "j"]) == 7
    assert seen == [("list", "kubectl msjob"), ("status", "msop")]


def test_pyproject_installs_the_plugin_executable() -> None:
    import tomllib

    from testbed.paths import REPO

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-msjob"] == "msop.cli:kubectl_plugin"
    assert scripts["kubectl_complete-msjob"] == "msop.cli:kubectl_complete_plugin"
    assert scripts["msop"] == "msop.cli:main"


def test_the_plugin_has_the_job_commands_only(capsys: pytest.CaptureFixture[str]) -> None:
    # It runs with the user's credentials: it must never start a second reconciler.
    commands = set(subcommands(build_parser(PLUGIN_PROG)))
    assert commands == {*JOB_COMMANDS, "version"}
    for offline_or_operator in ("run", "render", "validate", "completion"):
        with pytest.raises(SystemExit) as exc:
            msop.cli.kubectl_plugin([offline_or_operator])
        assert exc.value.code == 2
        assert "invalid choice" in capsys.readouterr().err
    assert {"run", "render", "validate", "completion"} <= set(subcommands(build_parser()))


def test_kubectl_completes_the_plugin_through_kubectl_complete_msjob(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[list[str]] = []

    def names(flags: list[str]) -> list[str]:
        asked.append(flags)
        return ["one", "two", "other"]

    monkeypatch.setattr(msop.cli, "_job_names", names)

    def complete(*words: str) -> list[str]:
        assert msop.cli.kubectl_complete_plugin(["__complete", *words]) == 0
        return capsys.readouterr().out.splitlines()

    assert complete("s") == ["status", "scale", "suspend", ":4"]
    assert complete("") == ["version", *JOB_COMMANDS, ":4"]
    assert complete("list", "-o", "") == ["wide", "json", "yaml", "name", ":4"]
    assert complete("logs", "j", "--replica-type", "W") == ["Worker", ":4"]
    assert complete("-n", "ns", "status", "o") == ["one", "other", ":4"]
    assert asked == [["-n", "ns"]]  # the namespace typed before the command counts
    assert complete("status", "--kubeconfig", "") == [":0"]  # a file: the shell's own
    assert complete("logs", "j", "--tail", "") == [":4"]  # a number: nothing to offer
    assert "--all-namespaces" in complete("list", "--")


# --- what the commands print -------------------------------------------------------------------
def a_job(name: str = "j", namespace: str = "ns", status: JSON | None = None) -> JSON:
    made = job(status=status)
    made["metadata"].update(name=name, namespace=namespace, creationTimestamp=T0)
    return made


RESTARTED = {
    "type": "Restarting",
    "status": "False",
    "reason": "MSJobRestarting",
    "message": "MSJob ns/j is restarting because pod ns/j-worker-1 exited with code 137.\n"
    "The last output of pod ns/j-worker-1:\nepoch 3 step 10\nKilled",
    "lastUpdateTime": T0,
    "lastTransitionTime": T0,
}


def a_busy_job() -> JSON:
    """Running again after a restart, with progress, queued for a moment."""
    status = running_status(
        replicaStatuses={"Scheduler": {"active": 1}, "Worker": {"active": 2, "restarts": 1}},
        workers="2/2",
        progress={
            "percentComplete": 45, "epoch": 9, "totalEpochs": 20,
            "estimatedRemainingSeconds": 125, "metrics": [{"name": "loss", "value": 0.0213}],
        },
    )  # fmt: skip
    status["conditions"].insert(1, RESTARTED)
    return a_job(status=status)


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines()]


def test_the_table_has_kubectls_columns_and_placeholders() -> None:
    table = jobs.format_table(
        [a_busy_job(), a_job("fresh")], all_namespaces=False, wide=False, now=NOW
    )
    assert rows(table) == [
        ["NAME", "STATE", "WORKERS", "PROGRESS", "AGE"],
        ["j", "Running", "2/2", "45%", "60s"],
        ["fresh", "<none>", "<none>", "<none>", "60s"],
    ]
    # The columns are aligned: every cell starts where its header does.
    lines = table.splitlines()
    assert lines[1].index("2/2") == lines[0].index("WORKERS")


def test_all_namespaces_puts_the_namespace_first() -> None:
    table = jobs.format_table(
        [a_busy_job(), a_job("k", "other")], all_namespaces=True, wide=False, now=NOW
    )
    assert [r[:2] for r in rows(table)] == [["NAMESPACE", "NAME"], ["ns", "j"], ["other", "k"]]


def test_wide_adds_restarts_queued_and_the_latest_reason() -> None:
    queued = a_job(status={"conditions": [
        {"type": "Created", "status": "True", "reason": "MSJobCreated", "message": "m"},
        {"type": "Queued", "status": "True", "reason": "PodGroupPending", "message": "wait"},
    ]})  # fmt: skip
    placed = a_job("placed", status={"conditions": [
        {"type": "Queued", "status": "False", "reason": "PodGroupInqueue", "message": "ok"},
        {"type": "Created", "status": "True", "reason": "MSJobCreated", "message": "m"},
    ]})  # fmt: skip
    table = jobs.format_table(
        [a_busy_job(), queued, placed], all_namespaces=False, wide=True, now=NOW
    )
    assert [r[0:2] + r[5:] for r in rows(table)] == [
        ["NAME", "STATE", "RESTARTS", "QUEUED", "REASON"],
        ["j", "Running", "1", "<none>", "MSJobRunning"],
        ["j", "Queued", "0", "PodGroupPending", "PodGroupPending"],
        ["placed", "Created", "0", "<none>", "MSJobCreated"],
    ]


def test_json_and_yaml_print_a_kubectl_list() -> None:
    items = [a_busy_job(), a_job("k")]
    del items[1]["apiVersion"], items[1]["kind"]  # as a List's items may come
    for output, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        doc = load(jobs.format_list(items, output))
        assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
        assert [i["metadata"]["name"] for i in doc["items"]] == ["j", "k"]
        assert {(i["apiVersion"], i["kind"]) for i in doc["items"]} == {
            ("mindspore.gitee.com/v1", "MSJob")
        }
        assert doc["items"][0]["status"]["workers"] == "2/2"
    assert jobs.format_list(items, "name") == "j\nk\n"
    assert jobs.format_list([], "name") == ""


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "0s"), (0, "0s"), (59, "59s"), (119, "119s"), (120, "2m"), (185, "3m5s"),
        (600, "10m"), (179 * 60, "179m"), (3 * 3600, "3h"), (3 * 3600 + 120, "3h2m"),
        (8 * 3600, "8h"), (47 * 3600, "47h"), (2 * 86400 + 3600, "2d1h"), (3 * 86400, "3d"),
        (400 * 86400, "400d"), (731 * 86400, "2y1d"), (9 * 365 * 86400, "9y"),
    ],
)  # fmt: skip
def test_ages_read_as_kubectls(seconds: int, text: str) -> None:
    assert jobs.human_duration(seconds) == text


def test_status_summarizes_state_replicas_progress_failure_times_and_events() -> None:
    events: list[JSON] = [
        {"type": "Normal", "reason": f"R{i}", "message": f"event {i}", "lastTimestamp": T0}
        for i in range(6)
    ]
    events[-1].update(type="Warning", message="restarting\nThe last output ...", count=3)
    text = jobs.format_status(a_busy_job(), events, NOW + timedelta(minutes=5))
    lines = text.splitlines()
    assert "State:         Running (MSJobRunning)" in lines
    assert "Message:       MSJob ns/j is running." in lines
    assert "Workers:       2/2 active/desired" in lines
    replicas = lines[lines.index(next(x for x in lines if x.startswith("Replicas:"))) :][:3]
    assert [x.split()[-5:] for x in replicas] == [
        ["TYPE", "ACTIVE", "SUCCEEDED", "FAILED", "RESTARTS"],
        ["Scheduler", "1", "0", "0", "0"],
        ["Worker", "2", "0", "0", "1"],
    ]
    assert "Progress:      45% epoch 9/20 ETA 2m5s loss=0.0213" in lines
    assert "Waiting:       <none>" in lines
    failure = lines.index(f"Last failure:  Restarting (MSJobRestarting) at {T0}")
    assert lines[failure + 1 : failure + 5] == [
        "               MSJob ns/j is restarting because pod ns/j-worker-1 exited with code 137.",
        "               The last output of pod ns/j-worker-1:",
        "                 epoch 3 step 10",
        "                 Killed",
    ]
    assert f"Started:       {T0} (6m ago)" in lines
    assert "Completed:     <none>" in lines and "Age:           6m" in lines
    shown = lines[lines.index("Events:") + 1 :]
    assert [x.split()[:2] for x in shown] == [
        ["TYPE", "REASON"], ["Normal", "R1"], ["Normal", "R2"], ["Normal", "R3"],
        ["Normal", "R4"], ["Warning", "R5"],
    ]  # fmt: skip
    assert shown[-1].split()[2:] == ["6m", "(x3)", "restarting"]


def test_status_of_a_queued_job_says_where_it_waits() -> None:
    status = running_status()
    status["conditions"] = [
        status["conditions"][0],
        {"type": "Queued", "status": "True", "reason": "WorkloadPending",
         "message": "couldn't assign flavors to pod set worker: insufficient quota",
         "lastTransitionTime": T0},
    ]  # fmt: skip
    text = jobs.format_status(a_job(status=status), [], NOW)
    assert (
        "Waiting:       WorkloadPending: couldn't assign flavors to pod set worker: "
        "insufficient quota"
    ) in text.splitlines()
    assert "Events:        <none>" in text.splitlines()


def test_status_of_a_failed_job_shows_its_last_output_once_and_completion() -> None:
    failed = {
        "type": "Failed", "status": "True", "reason": "MSJobFailed",
        "message": "MSJob ns/j has failed because pod ns/j-worker-0 exited with code 1.\n"
        "The last output of pod ns/j-worker-0:\nTraceback (most recent call last):\n"
        "ValueError: bad data",
        "lastTransitionTime": T0,
    }  # fmt: skip
    status = running_status(completionTime=T0)
    status["conditions"].append(failed)
    lines = jobs.format_status(a_job(status=status), None, NOW).splitlines()
    assert "State:         Failed (MSJobFailed)" in lines
    # The state's message stops where the output starts; the failure shows it, indented.
    assert (
        "Message:       MSJob ns/j has failed because pod ns/j-worker-0 exited with code 1."
    ) in lines
    assert [x.strip() for x in lines].count("ValueError: bad data") == 1
    assert "                 ValueError: bad data" in lines
    assert f"Completed:     {T0} (60s ago)" in lines
    assert "Events:        <cannot be listed>" in lines


def test_status_of_a_job_the_operator_has_not_seen() -> None:
    lines = jobs.format_status(a_job(), [], NOW).splitlines()
    assert lines[2].startswith("State:         Pending")
    assert "Last failure:  <none>" in lines and "Replicas:      <none>" in lines


def test_split_last_output() -> None:
    assert jobs.split_last_output(RESTARTED["message"]) == (
        "MSJob ns/j is restarting because pod ns/j-worker-1 exited with code 137.",
        "ns/j-worker-1",
        ["epoch 3 step 10", "Killed"],
    )
    assert jobs.split_last_output("plain") == ("plain", "", [])


# --- the commands, on a fake client ------------------------------------------------------------
class FakeClient:
    """The SDK's methods the commands call; ``fail`` maps a method to what it raises."""

    def __init__(self, jobs_: list[JSON] | None = None, **fail: BaseException) -> None:
        self.jobs = jobs_ if jobs_ is not None else [a_busy_job()]
        self.fail = fail
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.events: list[JSON] = []
        self.log_lines = [("j-worker-0", "hello"), ("j-worker-1", "world")]
        self.gets_until_gone: int | None = None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((method, args, kwargs))
        if method in self.fail:
            raise self.fail[method]

    def _job(self, name: str, namespace: str | None) -> JSON:
        for j in self.jobs:
            if j["metadata"]["name"] == name:
                return j
        raise MSJobNotFoundError(f"MSJob {namespace}/{name} not found")

    async def list(
        self, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[JSON]:
        self._call("list", namespace, label_selector=label_selector)
        return self.jobs

    async def get(self, name: str, namespace: str | None = None) -> JSON:
        self._call("get", name, namespace)
        if self.gets_until_gone is not None:
            self.gets_until_gone -= 1
            if self.gets_until_gone < 0:
                raise MSJobNotFoundError(f"MSJob {namespace}/{name} not found")
        return self._job(name, namespace)

    async def get_events(self, name: str, namespace: str | None = None) -> builtins.list[JSON]:
        self._call("get_events", name, namespace)
        return self.events

    async def get_job_logs(
        self, name: str, namespace: str | None = None, **kw: Any
    ) -> AsyncIterator[tuple[str, str]]:
        notice = kw.pop("notice")
        self._call("get_job_logs", name, namespace, **kw)
        if kw["follow"]:
            notice("waiting for pod ns/j-worker-1: ContainerCreating")
        for item in self.log_lines:
            yield item
        if "get_job_logs_late" in self.fail:
            raise self.fail["get_job_logs_late"]

    async def wait_for_job(self, name: str, namespace: str | None = None, **kw: Any) -> JSON:
        self._call("wait_for_job", name, namespace, **kw)
        kw["stream"].write("the live line\n")
        return self._job(name, namespace)

    async def scale(self, name: str, replicas: int, namespace: str | None = None) -> JSON:
        self._call("scale", name, replicas, namespace)
        return self._job(name, namespace)

    async def suspend(self, name: str, namespace: str | None = None) -> JSON:
        self._call("suspend", name, namespace)
        job = self._job(name, namespace)
        job["spec"].setdefault("runPolicy", {})["suspend"] = True
        return job

    async def resume(self, name: str, namespace: str | None = None) -> JSON:
        self._call("resume", name, namespace)
        job = self._job(name, namespace)
        job["spec"].setdefault("runPolicy", {})["suspend"] = False
        return job

    async def delete(self, name: str, namespace: str | None = None, **kw: Any) -> None:
        self._call("delete", name, namespace, **kw)
        self._job(name, namespace)


def command(argv: list[str], client: FakeClient, prog: str = "msop") -> tuple[int, str, str]:
    """Run a job command on the fake; (exit code, stdout, stderr)."""
    args = parse_args(argv, prog)
    if args.namespace is None:
        args.namespace = "ns"  # what run_job_command resolves from the kubeconfig
    out, err = io.StringIO(), io.StringIO()
    console = jobs.Console(out=out, err=err, now=lambda: NOW)
    code = asyncio.run(jobs.run(args, console, prog=prog, client=client))
    return code, out.getvalue(), err.getvalue()


def test_list_prints_the_table_or_the_objects() -> None:
    client = FakeClient()
    code, out, err = command(["list", "-l", "team=nlp"], client)
    assert (code, err) == (0, "")
    assert rows(out)[1] == ["j", "Running", "2/2", "45%", "60s"]
    assert client.calls == [("list", ("ns",), {"label_selector": "team=nlp"})]
    code, out, _ = command(["list", "-A", "-o", "name"], client)
    assert (code, out) == (0, "j\n")
    assert client.calls[-1][1] == ("*",)  # the SDK's "all namespaces"
    assert json.loads(command(["list", "-o", "json"], client)[1])["kind"] == "List"


def test_an_empty_list_says_so_on_stderr() -> None:
    assert command(["list"], FakeClient([])) == (0, "", "No MSJobs found in namespace ns.\n")
    assert command(["list", "-A"], FakeClient([]))[2] == "No MSJobs found.\n"
    assert command(["list", "-o", "json"], FakeClient([]))[1].startswith("{")


def test_status_prints_the_summary_or_the_object() -> None:
    code, out, _ = command(["status", "j"], FakeClient())
    assert code == 0 and out.startswith("Name:          j\nNamespace:     ns\n")
    code, out, _ = command(["status", "j", "-o", "yaml"], FakeClient())
    assert code == 0 and yaml.safe_load(out)["kind"] == "MSJob"


def test_status_without_events_permission_still_summarizes() -> None:
    client = FakeClient(get_events=ApiError(403, "Forbidden", "events is forbidden"))
    code, out, _ = command(["status", "j"], client)
    assert code == 0 and "Events:        <cannot be listed>" in out


def test_logs_prefix_each_line_with_its_pod_and_pass_the_flags_on() -> None:
    client = FakeClient()
    code, out, _ = command(["logs", "j"], client)
    assert (code, out) == (0, "[j-worker-0] hello\n[j-worker-1] world\n")
    assert client.calls[-1] == ("get_job_logs", ("j", "ns"), {
        "replica_type": None, "index": None, "container": "mindspore", "follow": False,
        "previous": False, "tail_lines": None,
    })  # fmt: skip
    code, out, err = command(
        ["logs", "j", "--index", "1", "-f", "--previous", "--tail", "5", "--no-prefix"], client
    )
    assert (code, out) == (0, "hello\nworld\n")
    assert err == "waiting for pod ns/j-worker-1: ContainerCreating\n"  # what -f waits for
    assert client.calls[-1][2] == {
        "replica_type": "Worker", "index": 1, "container": "mindspore", "follow": True,
        "previous": True, "tail_lines": 5,
    }  # fmt: skip
    command(["logs", "j", "--replica-type", "scheduler", "-c", "sidecar"], client)
    assert client.calls[-1][2]["replica_type"] == "Scheduler"
    assert client.calls[-1][2]["container"] == "sidecar"


def test_logs_that_cannot_be_read_exit_1_after_what_was_read() -> None:
    client = FakeClient(
        get_job_logs_late=MSJobLogsError("pod ns/j-worker-1: 400 container not found")
    )
    code, out, err = command(["logs", "j"], client)
    assert code == 1 and out.count("\n") == 2
    assert err == "msop: error: pod ns/j-worker-1: 400 container not found\n"


def test_wait_draws_the_line_on_stderr_and_prints_the_final_state() -> None:
    client = FakeClient()
    code, out, err = command(["wait", "j", "--for=condition=Running", "--timeout", "2m"], client)
    assert code == 0
    assert out == "ns/j Running | Scheduler active=1 succeeded=0 failed=0 | Worker active=2 " \
        "succeeded=0 failed=0 | 45% epoch 9/20 ETA 2m5s loss=0.0213\n"  # fmt: skip
    method, args, kwargs = client.calls[-1]
    assert (method, args) == ("wait_for_job", ("j", "ns"))
    assert (kwargs["conditions"], kwargs["timeout"]) == (("Running",), 120)
    assert kwargs["progress"] is True
    assert err == "the live line\n"  # the SDK's line goes to stderr, stdout stays clean


def test_scale_suspend_resume_say_what_they_did() -> None:
    client = FakeClient()
    assert command(["scale", "j", "--replicas", "4"], client)[:2] == (
        0, "msjob.mindspore.gitee.com/j scaled\n",
    )  # fmt: skip
    assert client.calls[-1] == ("scale", ("j", 4, "ns"), {})
    assert command(["suspend", "j"], client)[1] == "msjob.mindspore.gitee.com/j suspended\n"
    assert command(["resume", "j"], client)[1] == "msjob.mindspore.gitee.com/j resumed\n"
    assert [c[0] for c in client.calls[-4:]] == ["get", "suspend", "get", "resume"]
    assert json.loads(command(["resume", "j", "-o", "json"], client)[1])["metadata"]["name"] == "j"


def test_resume_of_a_job_that_is_not_suspended_changes_nothing_and_says_so() -> None:
    client = FakeClient()
    code, out, _ = command(["resume", "j"], client)
    assert (code, out) == (0, "msjob.mindspore.gitee.com/j is already not suspended (no change)\n")
    assert "resume" not in [c[0] for c in client.calls]
    command(["suspend", "j"], client)
    code, out, _ = command(["suspend", "j"], client)
    assert (code, out) == (0, "msjob.mindspore.gitee.com/j is already suspended (no change)\n")
    assert [c[0] for c in client.calls].count("suspend") == 1


def test_delete_and_delete_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "DELETE_POLL_SECONDS", 0)
    client = FakeClient()
    code, out, _ = command(["delete", "j"], client)
    assert (code, out) == (0, 'msjob.mindspore.gitee.com "j" deleted\n')
    assert client.calls == [("delete", ("j", "ns"), {"propagation_policy": "Background"})]
    client = FakeClient()
    client.gets_until_gone = 3
    assert command(["delete", "j", "--wait"], client)[0] == 0
    assert client.calls[0] == ("delete", ("j", "ns"), {"propagation_policy": "Foreground"})
    assert [c[0] for c in client.calls[1:]] == ["get"] * 4  # until the 4th says gone


def test_delete_wait_times_out_with_4(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "DELETE_POLL_SECONDS", 0.001)
    code, _, err = command(["delete", "j", "--wait", "--timeout", "10ms"], FakeClient())
    assert code == 4
    assert err == "msop: error: MSJob ns/j still exists after 0.01s\n"


FAILED = a_job(status={"conditions": [{"type": "Failed", "status": "True"}]})


@pytest.mark.parametrize(
    ("method", "error", "code", "line"),
    [
        ("get", MSJobNotFoundError("MSJob ns/j not found"), 3, "MSJob ns/j not found"),
        ("wait_for_job", MSJobNotFoundError("MSJob ns/j was deleted"), 3,
         "MSJob ns/j was deleted"),
        ("wait_for_job",
         MSJobTimeoutError("MSJob ns/j: timed out after 600s waiting for Succeeded", None), 4,
         "MSJob ns/j: timed out after 600s waiting for Succeeded"),
        ("wait_for_job", MSJobFailedError(FAILED, "MSJobFailed", "it failed.\nThe last output"
         " of pod ns/j-worker-0:\nboom"), 1,
         "MSJob ns/j failed (MSJobFailed): it failed. (the whole message: msop status j)"),
        ("wait_for_job", MSJobError("MSJob ns/j Succeeded without reaching Running"), 1,
         "MSJob ns/j Succeeded without reaching Running"),
        ("get", ApiError(403, "Forbidden", "msjobs is forbidden: User x"), 1,
         "403 Forbidden: msjobs is forbidden: User x"),
        ("get", ApiUnavailable("connection refused"), 1,
         "cannot reach the API server: connection refused"),
        ("scale", MSJobNotFoundError("MSJob ns/j not found"), 3, "MSJob ns/j not found"),
        ("suspend", ApiError(422, "Invalid", "spec: bad"), 1, "422 Invalid: spec: bad"),
        ("delete", MSJobNotFoundError("MSJob ns/j not found"), 3, "MSJob ns/j not found"),
        ("get_job_logs", MSJobNotFoundError("MSJob ns/j not found"), 3, "MSJob ns/j not found"),
        ("list", ApiError(404, "NotFound", "the server could not find the requested resource"),
         1, "the MSJob CRD (msjobs.mindspore.gitee.com) is not installed in this cluster"),
    ],
)  # fmt: skip
def test_sdk_errors_become_exit_codes_and_one_line(
    method: str, error: BaseException, code: int, line: str
) -> None:
    argv = {
        "get": ["status", "j"], "wait_for_job": ["wait", "j", "--for", "Succeeded"],
        "scale": ["scale", "j", "--replicas", "2"], "suspend": ["suspend", "j"],
        "delete": ["delete", "j"], "get_job_logs": ["logs", "j"], "list": ["list"],
    }[method]  # fmt: skip
    got, out, err = command(argv, FakeClient(None, **{method: error}))
    assert (got, out) == (code, "")
    assert err == f"msop: error: {line}\n"
    got, _, err = command(argv, FakeClient(None, **{method: error}), prog=PLUGIN_PROG)
    assert got == code and err.startswith("kubectl msjob: error: ")


def test_exit_codes_match_the_documented_ones() -> None:
    from msop.cli.flags import EXIT_CODES

    assert [code for code, _ in EXIT_CODES] == [0, 1, 2, 3, 4]
    assert jobs.exit_code(MSJobNotFoundError("x")) == 3
    assert jobs.exit_code(MSJobTimeoutError("x", None)) == 4
    assert jobs.exit_code(MSJobFailedError(FAILED, "r", "m")) == 1
    assert jobs.exit_code(ApiUnavailable("x")) == 1


# --- kubeconfig and namespace ------------------------------------------------------------------
KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: a
contexts:
- {name: a, context: {cluster: x, user: x, namespace: team-a}}
- {name: b, context: {cluster: x, user: x}}
"""


def test_the_namespace_is_the_contexts_else_default(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    assert jobs.namespace_of_context(str(path), None) == "team-a"
    assert jobs.namespace_of_context(str(path), "b") == "default"
    assert jobs.namespace_of_context(str(path), "missing") == "default"
    assert jobs.namespace_of_context(str(tmp_path / "absent"), None) == "default"
    sa = tmp_path / "namespace"
    assert jobs.namespace_of_context(None, None, sa) == "default"
    sa.write_text("in-pod\n")
    assert jobs.namespace_of_context(None, None, sa) == "in-pod"


def test_the_kubeconfig_is_the_flag_else_kubeconfig_else_home(tmp_path: Path) -> None:
    env = {"KUBECONFIG": "/a/one:/b/two"}
    assert jobs.kubeconfig_path("/flag", env, tmp_path) == "/flag"
    assert jobs.kubeconfig_path(None, env, tmp_path) == "/a/one"
    assert jobs.kubeconfig_path(None, {}, tmp_path) is None  # in a pod
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(KUBECONFIG)
    assert jobs.kubeconfig_path(None, {}, tmp_path) == str(tmp_path / ".kube" / "config")


def test_a_kubeconfig_that_does_not_load_is_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n")
    args = parse_args(["list", "--kubeconfig", str(path)])
    out, err = io.StringIO(), io.StringIO()
    code = asyncio.run(jobs.run(args, jobs.Console(out=out, err=err)))
    assert code == 1 and out.getvalue() == ""
    assert err.getvalue().startswith(f"msop: error: cannot load the kubeconfig {path}: ")
    assert len(err.getvalue().splitlines()) == 1


# --- shell completion --------------------------------------------------------------------------
def complete(script: str, line: str, program: str = "msop") -> list[str]:
    """What bash offers for ``line`` (the word being typed is its last one)."""
    words = line.split(" ")
    code = (
        f"{script}\n"
        f"{program}() {{ printf 'one\\ntwo\\n'; }}\n"  # stands in for `list -o name`
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        f"_{program.replace('-', '_')}\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_bash_completion_completes_commands_flags_values_and_job_names() -> None:
    script = completion_script(build_parser(), "bash")
    assert complete(script, "msop s") == ["status", "scale", "suspend"]
    assert "--all-namespaces" in complete(script, "msop list --")
    assert complete(script, "msop list -o ") == ["wide", "json", "yaml", "name"]
    assert complete(script, "msop logs j --replica-type ") == ["Scheduler", "PS", "Worker"]
    assert complete(script, "msop wait -n ns ") == ["one", "two"]
    assert complete(script, "msop completion ") == ["bash", "zsh"]
    assert complete(script, "msop logs j --tail ") == []


def test_the_plugins_completion_names_its_executable() -> None:
    script = completion_script(build_parser(PLUGIN_PROG), "bash")
    assert "complete -F _kubectl_msjob kubectl-msjob" in script
    assert complete(script, "kubectl-msjob status ", "kubectl-msjob") == ["one", "two"]
    zsh = completion_script(build_parser(), "zsh")
    assert "bashcompinit" in zsh and zsh.splitlines()[1] == "#compdef msop"


def test_completion_command_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert msop.cli.main(["completion", "bash"]) == 0
    assert capsys.readouterr().out == completion_script(build_parser(), "bash")


def test_status_shows_the_last_checkpoint_and_where_a_suspended_job_resumes() -> None:
    saved = {"step": 15, "epoch": 1, "path": "/ckpt/step-15.ckpt", "time": T0}
    status = running_status(progress={"step": 15, "lastReportTime": T0, "lastCheckpoint": saved})
    lines = jobs.format_status(a_job(status=status), [], NOW).splitlines()
    assert f"Checkpoint:    step 15 (epoch 1) at {T0}" in lines
    assert not any(x.startswith("Resumes from:") for x in lines)  # it runs
    status["conditions"].append({"type": "Suspended", "status": "True", "reason": "MSJobSuspended",
                                 "lastTransitionTime": T0})  # fmt: skip
    lines = jobs.format_status(a_job(status=status), [], NOW).splitlines()
    assert f"Resumes from:  step 15 (epoch 1) at {T0}" in lines
    assert "Checkpoint:    <none>" in jobs.format_status(a_job(), [], NOW).splitlines()
