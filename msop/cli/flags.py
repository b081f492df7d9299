"""The flags of every ``msop`` command, and how they are parsed.

``msop run`` is the operator process; ``msop version`` prints the version. Every flag
of ``msop run`` can also be set by an environment variable (shown in ``--help``); a flag
on the command line wins over the variable. Errors are one line on stderr and a
non-zero exit: 2 for bad flags, 1 for anything else (unreachable API server, missing
CRD, lost leader election).

The job commands (:data:`JOB_COMMANDS`, run by :mod:`msop.cli.jobs`) take kubectl's
``--kubeconfig``, ``--context`` and ``-n/--namespace``, and exit with :data:`EXIT_CODES`.
The same parser, named ``kubectl msjob``, serves the kubectl plugin.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from msop import __version__
from msop.api import constants as c
from msop.msjob.settings import Settings


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def _env_bool(name: str) -> bool:
    return (os.environ.get(name) or "").lower() in ("1", "true", "yes", "on")


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _boolean(value: str) -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off; any case), as ``--flag=false`` spells
    it; anything else is refused, so that a typo never turns a safety off."""
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"not a boolean (true or false): {value!r}")


def _positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def _non_negative_int(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _number(value: str) -> float:
    f = float(value)
    if math.isnan(f) or math.isinf(f):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {value}")
    return f


def _lease_ref(value: str) -> str:
    if value and (value.count("/") != 1 or "" in value.split("/")):
        raise argparse.ArgumentTypeError(f"not <namespace>/<name>: {value!r}")
    return value


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port < 65536:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {value}")
    return port


def _positive_float(value: str) -> float:
    f = float(value)
    if f <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {f}")
    return f


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_DURATION_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(value: str) -> float:
    """Seconds of a kubectl-style duration: ``600s``, ``10m``, ``1h30m``, ``500ms``; a bare
    number is seconds. Must be > 0."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise argparse.ArgumentTypeError(
                f"not a duration (600s, 10m, 1h30m): {value!r}"
            ) from None
        seconds = sum(float(n) * _DURATION_UNIT[u] for n, u in parts)
    if not seconds > 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"must be a duration > 0, got {value!r}")
    return seconds


def _duration_or_off(value: str) -> float:
    """:func:`_duration`, or 0 (``0``, ``0s``): off."""
    if value.strip() in ("0", "0s"):
        return 0.0
    return _duration(value)


def _node_lost_after(value: str) -> float | None:
    """:func:`_duration`, 0 (``0``, ``0s``: at once), or ``off`` (None)."""
    text = value.strip()
    if text == "off":
        return None
    if text in ("0", "0s"):
        return 0.0
    return _duration(value)


def _replica_type(value: str) -> str:
    rtype = c.canonical_replica_type(value)
    if rtype is None:
        raise argparse.ArgumentTypeError(
            f"not a replica type ({', '.join(c.REPLICA_TYPES)}): {value!r}"
        )
    return rtype


#: The conditions ``wait --for`` accepts.
WAIT_CONDITIONS: tuple[str, ...] = (
    c.CREATED, c.RUNNING, c.SUCCEEDED, c.FAILED, c.RESTARTING, c.SUSPENDED, c.QUEUED,
)  # fmt: skip
_WAIT_BY_LOWER = {x.lower(): x for x in WAIT_CONDITIONS}


def _wait_condition(value: str) -> str:
    """``Succeeded``, or kubectl wait's ``condition=Succeeded``; any case."""
    name = _WAIT_BY_LOWER.get(value.removeprefix("condition=").lower())
    if name is None:
        raise argparse.ArgumentTypeError(
            f"not a condition ({', '.join(WAIT_CONDITIONS)}, or condition=<one of them>): {value!r}"
        )
    return name


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


@dataclass(frozen=True)
class EnvVar:
    """The environment variable that also sets a flag of ``msop run``."""

    name: str
    note: str = ""
    """Appended to the name in the flag's help, e.g. ``, comma-separated``."""

    def help_suffix(self) -> str:
        return f" [env {self.name}{self.note}]"


#: Each flag of ``msop run`` -> its environment variable (filled by :func:`build_parser`;
#: ``hack/gen_docs.py`` reads it for the flags reference).
RUN_ENV: dict[str, EnvVar] = {}


def _add_run(sub: Any) -> None:
    # Numeric defaults are the environment's strings: argparse converts and checks a
    # string default with the flag's type, so a bad variable is a one-line usage error.
    run = sub.add_parser(
        "run",
        help="run the operator",
        description="Run the MSJob operator. Each flag can be set by the environment "
        "variable named in its help; the command line wins.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )

    def a(flag: str, env: str, help: str, fallback: str | None = None, **kwargs: Any) -> None:
        """Add ``flag``, which the variable ``env`` also sets (its default when present)."""
        var = EnvVar(env, ", comma-separated" if kwargs.get("action") == "append" else "")
        RUN_ENV[flag] = var
        if kwargs.get("action") == "store_true":
            default: Any = _env_bool(env)
        elif kwargs.get("type") is _boolean:
            # On by default: ``--flag`` and ``--flag=true`` turn it on, ``--flag=false`` off.
            kwargs.update(nargs="?", const=True, metavar="BOOL")
            default = _env(env, fallback)
        elif kwargs.get("action") == "append":
            default = None  # parse_args reads the variable: repeated flags replace it
        else:
            default = _env(env, fallback)
        run.add_argument(flag, default=default, help=help + var.help_suffix(), **kwargs)

    a("--kubeconfig", "KUBECONFIG", "kubeconfig file; in-cluster config when unset")
    a(
        "--namespace",
        "MSOP_NAMESPACES",
        "namespace to watch, repeatable; all namespaces when unset",
        action="append",
        dest="namespaces",
    )
    a(
        "--metrics-bind-address",
        "MSOP_METRICS_BIND_ADDRESS",
        "address of /metrics; 0 disables it",
        ":8080",
    )
    a(
        "--metrics-secure",
        "MSOP_METRICS_SECURE",
        "serve /metrics over HTTPS, only to clients whose bearer token the API server "
        "authenticates (TokenReview) and allows to get /metrics (SubjectAccessReview); "
        "--metrics-secure=false serves plain HTTP to anyone",
        "true",
        type=_boolean,
    )
    a(
        "--metrics-cert-dir",
        "MSOP_METRICS_CERT_DIR",
        "directory with tls.crt and tls.key for /metrics (a mounted Secret), loaded again "
        "when they change; a self-signed certificate made at start when unset",
    )
    a(
        "--health-probe-bind-address",
        "MSOP_HEALTH_PROBE_BIND_ADDRESS",
        "address of /healthz and /readyz; 0 disables it",
        ":8081",
    )
    a(
        "--leader-elect",
        "MSOP_LEADER_ELECT",
        "use a Lease so that only one replica reconciles",
        action="store_true",
    )
    a(
        "--leader-election-id",
        "MSOP_LEADER_ELECTION_ID",
        "name of the leader-election Lease",
        "msop.mindspore.gitee.com",
    )
    a(
        "--leader-election-namespace",
        "MSOP_LEADER_ELECTION_NAMESPACE",
        "namespace of the Lease; the pod's own namespace when unset, else 'default'",
    )
    a(
        "--leader-election-lease-duration",
        "MSOP_LEADER_ELECTION_LEASE_DURATION",
        "seconds a follower waits before taking an unrenewed Lease",
        "15",
        type=_positive_float,
    )
    a(
        "--leader-election-renew-deadline",
        "MSOP_LEADER_ELECTION_RENEW_DEADLINE",
        "seconds the leader retries renewing before it gives up",
        "10",
        type=_positive_float,
    )
    a(
        "--leader-election-retry-period",
        "MSOP_LEADER_ELECTION_RETRY_PERIOD",
        "seconds between Lease attempts",
        "2",
        type=_positive_float,
    )
    a(
        "--shards",
        "MSOP_SHARDS",
        "split the MSJobs into this many shards by a hash of their UID; each shard has a "
        "Lease (<--leader-election-id>-shard-<i>, with the leader election's namespace and "
        "timing) and each replica holds about shards/replicas of them and reconciles and "
        "watches only their jobs. Above 1 it needs --leader-elect; 1 is the single leader",
        "1",
        type=_positive_int,
    )
    a(
        "--legacy-operator-lease",
        "MSOP_LEGACY_OPERATOR_LEASE",
        "<namespace>/<name> of the Go ms-operator's leader-election Lease: while it is "
        "renewed, ms-operator runs and msop starts no controller; '' turns the check off",
        "ms-operator-system/4725f7c4.gitee.com",
        type=_lease_ref,
    )
    a(
        "--max-concurrent-reconciles",
        "MSOP_MAX_CONCURRENT_RECONCILES",
        "MSJobs reconciled in parallel",
        str(Settings.max_concurrent_reconciles),
        type=_positive_int,
    )
    a(
        "--enable-gang-scheduling",
        "MSOP_ENABLE_GANG_SCHEDULING",
        "create a Volcano PodGroup per job; its pods wait until Volcano admits the gang "
        "(the same as --gang-scheduler=volcano)",
        action="store_true",
    )
    a(
        "--gang-scheduler",
        "MSOP_GANG_SCHEDULER",
        "what places each job's pods whole or not at all: 'volcano' (a Volcano PodGroup per "
        "job), 'kubernetes' (Kubernetes' Workload API, scheduling.k8s.io: a Workload and a "
        "PodGroup per job; start-up fails if the API server does not serve it), 'none', or "
        "'auto': Volcano with --enable-gang-scheduling, else the Workload API where the API "
        "server serves it, else none (the choice is logged at start)",
        "auto",
        choices=("auto", "volcano", "kubernetes", "none"),
    )
    a(
        "--enable-kueue",
        "MSOP_ENABLE_KUEUE",
        "manage MSJobs labelled kueue.x-k8s.io/queue-name through a Kueue Workload each: "
        "their pods run only while Kueue admits it (Kueue lists MSJob.v1.mindspore.gitee.com "
        "among its externalFrameworks)",
        action="store_true",
    )
    a(
        "--multikueue-worker-lost-timeout",
        "MSOP_MULTIKUEUE_WORKER_LOST_TIMEOUT",
        "on a MultiKueue worker cluster (with --enable-kueue): once this cluster's API "
        "server has not answered msop for this long, MultiKueue's copies of jobs that were "
        "here before are held (their pods stopped, none created or restarted) until "
        "MultiKueue deletes them or --multikueue-lost-copy-hold has passed: by then the "
        "manager has given the jobs to another worker. Set it to the manager's "
        "multiKueue.workerLostTimeout or less; 0 turns it off",
        "15m",
        type=_duration_or_off,
    )
    a(
        "--multikueue-lost-copy-hold",
        "MSOP_MULTIKUEUE_LOST_COPY_HOLD",
        "how long after such an outage (--multikueue-worker-lost-timeout) a copy is held "
        "at most: the manager's reconnect backoff (at most 5m20s) plus its "
        "multiKueue.gcInterval, with a margin",
        "7m",
        type=_duration,
    )
    a(
        "--progress-port",
        "MSOP_PROGRESS_PORT",
        "port Worker 0's progress reporter (msop.integrations) is told to serve on, "
        "and polled at; 0 turns training progress off",
        str(c.DEFAULT_PROGRESS_PORT),
        type=_port,
    )
    a(
        "--restart-in-place",
        "MSOP_RESTART_IN_PLACE",
        "restart a failed restartScope: Job MSJob in place (every container of every pod "
        "restarted where it is, no pod written) where the cluster supports it "
        "(Kubernetes' RestartAllContainers rule: detected, else pods are recreated); each "
        "pod then runs msop's agent, a small sidecar from the operator's image. "
        "--restart-in-place=false recreates every pod, as ms-operator does",
        "true",
        type=_boolean,
    )
    a(
        "--restart-in-place-timeout",
        "MSOP_RESTART_IN_PLACE_TIMEOUT",
        "how long a restart in place may take (the pods' termination grace period "
        "included) before its pods are recreated instead",
        "120s",
        type=_duration,
    )
    a(
        "--node-lost-after",
        "MSOP_NODE_LOST_AFTER",
        "how long a pod's node may be not ready (Ready False or Unknown, or the "
        "node.kubernetes.io/not-ready or unreachable NoExecute taint) before the pod counts "
        "as lost, without waiting for its eviction (300s by default): a restartScope: Job "
        "cluster restarts, recreating that pod alone where it restarts in place; a pod "
        "template's own toleration of the taint is followed instead. 0: at the first "
        "sign; 'off': nodes are not watched",
        "10s",
        type=_node_lost_after,
    )
    a(
        "--agent-image",
        "MSOP_AGENT_IMAGE",
        "image of the restart-in-place agent; the operator's own image when unset (read "
        "from its pod)",
        "",
    )
    a(
        "--agent-port",
        "MSOP_AGENT_PORT",
        "port the restart-in-place agent serves on in each pod",
        "28090",
        type=_port,
    )
    a(
        "--progress-interval",
        "MSOP_PROGRESS_INTERVAL",
        "seconds between two progress polls of a job, so at most one progress write "
        "of its status per interval",
        "30",
        type=_positive_float,
    )
    a(
        "--kube-api-qps",
        "MSOP_KUBE_API_QPS",
        "client-side request rate limit of each budget: -1 (or any negative) sets none and "
        "leaves the shaping to the API server's Priority and Fairness, 0 takes client-go's "
        "default (5/s), a positive value is the limit",
        "-1",
        type=_number,
    )
    a(
        "--kube-api-burst",
        "MSOP_KUBE_API_BURST",
        "client-side request burst of each budget, when --kube-api-qps sets a limit: 0 "
        "takes client-go's default (10)",
        "0",
        type=_non_negative_int,
    )
    a(
        "--graceful-shutdown-timeout",
        "MSOP_GRACEFUL_SHUTDOWN_TIMEOUT",
        "seconds in-flight reconciles get on SIGTERM",
        "30",
        type=_positive_float,
    )
    a(
        "--watch-stall-timeout",
        "MSOP_WATCH_STALL_TIMEOUT",
        "seconds without any watch event or bookmark after which a watch counts as "
        "stuck and is restarted",
        "90",
        type=_positive_float,
    )
    a(
        "--log-format",
        "MSOP_LOG_FORMAT",
        "log line format",
        "json",
        choices=("json", "console"),
    )
    a(
        "--log-level",
        "MSOP_LOG_LEVEL",
        "minimum log level",
        "info",
        choices=("debug", "info", "warning", "error"),
    )


#: The program name of the kubectl plugin (``kubectl-msjob`` on PATH).
PLUGIN_PROG = "kubectl msjob"

#: The commands that follow and change jobs in a cluster (:mod:`msop.cli.jobs`).
JOB_COMMANDS: tuple[str, ...] = (
    "list", "status", "logs", "wait", "scale", "suspend", "resume", "delete",
)  # fmt: skip

#: How the job commands exit: the help's epilog and docs/reference/cli.md.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "success"),
    (1, "the cluster refused the request or could not be reached; for wait, the job "
        "ended in another state than the one waited for (Failed while waiting for "
        "Succeeded)"),
    (2, "bad usage (unknown flag, bad value)"),
    (3, "the job does not exist"),
    (4, "wait (or delete --wait) timed out"),
)  # fmt: skip


def exit_codes_epilog() -> str:
    """:data:`EXIT_CODES` for ``--help``, wrapped (the help keeps its lines)."""
    lines = [
        textwrap.fill(text, 78, initial_indent=f"  {code}  ", subsequent_indent=" " * 5)
        for code, text in EXIT_CODES
    ]
    return "exit codes:\n" + "\n".join(lines)


def build_parser(prog: str = "msop") -> argparse.ArgumentParser:
    """The parser of ``msop``; ``prog`` names the program in help and errors. The kubectl
    plugin (:data:`PLUGIN_PROG`) has the job commands and ``version`` only: it never runs
    the operator, and kubectl completes it through ``kubectl_complete-msjob``."""
    parser = _Parser(
        prog=prog,
        description="msop: the MindSpore MSJob operator, and the commands that follow "
        "MSJobs in a cluster",
        epilog=exit_codes_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"msop {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    plugin = prog == PLUGIN_PROG
    if not plugin:  # the kubectl plugin has the job commands only: no operator, no files
        _add_run(sub)
    sub.add_parser("version", help="print the msop version")
    if not plugin:
        _add_offline(sub)
    _add_jobs(sub)
    if plugin:  # kubectl completes a plugin through kubectl_complete-msjob (krew's way)
        return parser
    sub.add_parser(
        "completion",
        help="print a bash or zsh completion script",
        description="Print a completion script for bash or zsh, made from this parser "
        "(commands, flags, their values, and job names through 'list -o name'). bash: "
        "source <(msop completion bash); zsh: source <(msop completion zsh).",
    ).add_argument("shell", choices=("bash", "zsh"), help="the shell")
    return parser


def _kube_flags() -> argparse.ArgumentParser:
    """kubectl's flags, shared by every job command."""
    kube = argparse.ArgumentParser(add_help=False)
    kube.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, "
        "else the in-cluster service account)",
    )
    kube.add_argument(
        "--context", default=None, help="kubeconfig context (default: its current-context)"
    )
    kube.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="namespace (default: the context's namespace, else 'default')",
    )
    return kube


def _job_command(
    sub: Any,
    name: str,
    help: str,
    description: str,
    *,
    named: bool = True,
    output: tuple[str, ...] = ("json", "yaml"),
    output_help: str = "print the MSJob in this format instead",
) -> Any:
    cmd = sub.add_parser(
        name,
        help=help,
        description=textwrap.fill(description, 78),
        parents=[_kube_flags()],
        epilog=exit_codes_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if named:
        cmd.add_argument("name", metavar="NAME", help="the MSJob's name")
    if output:
        cmd.add_argument(
            "-o",
            "--output",
            choices=output,
            default=None,
            help=output_help,
        )
    return cmd


def _add_jobs(sub: Any) -> None:
    ls = _job_command(
        sub,
        "list",
        "list MSJobs (like kubectl get msjobs)",
        "List the MSJobs of a namespace: NAME STATE WORKERS PROGRESS AGE, NAMESPACE first "
        "with -A; -o wide adds RESTARTS, QUEUED (the reason of a True Queued condition) and "
        "the latest condition's REASON. -o json|yaml prints a kubectl List, -o name the "
        "bare names, one per line.",
        named=False,
        output=("wide", "json", "yaml", "name"),
        output_help="wide: more columns; json, yaml: a kubectl List; name: the names",
    )
    ls.add_argument(
        "-A", "--all-namespaces", action="store_true", help="list the MSJobs of every namespace"
    )
    ls.add_argument(
        "-l", "--selector", default=None, help="label selector, e.g. team=nlp,tier!=dev"
    )
    _job_command(
        sub,
        "status",
        "where an MSJob stands, and why",
        "Summarize an MSJob: its state (the latest condition, with reason and message), "
        "workers and each replica type's pods and restarts, training progress, where it "
        "waits and why (a True Queued condition), the last failure with the failed run's "
        "last output, start and completion times, and its last 5 Events. -o json|yaml "
        "prints the MSJob object.",
    )
    _add_logs(sub)
    wait = _job_command(
        sub,
        "wait",
        "wait for a condition of an MSJob",
        "Wait until the MSJob's condition is True. A live status line goes to stderr; the "
        "final state line (or, with -o, the MSJob) to stdout. Exits 1 when the job ends in "
        "another state (Failed while waiting for Succeeded), 4 on timeout.",
    )
    wait.add_argument(
        "--for",
        dest="condition",
        required=True,
        type=_wait_condition,
        metavar="CONDITION",
        help=f"one of {', '.join(WAIT_CONDITIONS)}; kubectl's condition=<name> is accepted too",
    )
    wait.add_argument(
        "--timeout",
        type=_duration,
        default="600s",
        metavar="DURATION",
        help="how long to wait: 600s, 10m, 1h30m (a bare number is seconds)",
    )
    scale = _job_command(
        sub,
        "scale",
        "set the number of Workers",
        "Set spec.msReplicaSpecs.Worker.replicas (what kubectl scale msjob/NAME does). See "
        "Scaling in the docs for what a running job does then.",
    )
    scale.add_argument(
        "--replicas", type=_non_negative_int, required=True, help="the number of Workers"
    )
    _job_command(
        sub,
        "suspend",
        "suspend an MSJob (its pods are deleted)",
        "Set spec.runPolicy.suspend: the operator deletes the job's pods and the job "
        "becomes Suspended; resume runs it again.",
    )
    _job_command(
        sub,
        "resume",
        "resume a suspended MSJob",
        "Clear spec.runPolicy.suspend: the operator creates the job's pods again.",
    )
    delete = _job_command(
        sub,
        "delete",
        "delete an MSJob and its pods",
        "Delete the MSJob; its pods and Service go with it (garbage collection). With "
        "--wait, return only once the MSJob and its pods are gone (foreground deletion), "
        "so that a job of the same name can be created at once.",
        output=(),
    )
    delete.add_argument(
        "--wait", action="store_true", help="wait until the MSJob and its pods are gone"
    )
    delete.add_argument(
        "--timeout",
        type=_duration,
        default="600s",
        metavar="DURATION",
        help="with --wait: how long to wait",
    )


def _add_logs(sub: Any) -> None:
    logs = _job_command(
        sub,
        "logs",
        "print the logs of an MSJob's pods",
        "Print the logs of every pod of the MSJob (Scheduler, PS, then Workers), or of one "
        "replica type, or of one pod (--index alone means a Worker), each line prefixed "
        "'[<pod>] '. With -f every pod is followed at once, and a pod recreated by a "
        "restart is followed again, until the job finishes.",
        output=(),
    )
    logs.add_argument(
        "--replica-type",
        type=_replica_type,
        choices=c.REPLICA_TYPES,
        default=None,
        help="only the pods of this replica type (any case)",
    )
    logs.add_argument(
        "--index",
        type=_non_negative_int,
        default=None,
        help="only the pod of this index (of --replica-type, default Worker)",
    )
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="follow every pod, across restarts, until the job finishes",
    )
    logs.add_argument(
        "--previous",
        action="store_true",
        help="the previous run of each pod: after a restart in place the run msop-agent kept, "
        "else the kubelet's previous run (kubectl logs --previous), else the failed run's "
        "last output that the job's condition keeps",
    )
    logs.add_argument(
        "--tail",
        type=_non_negative_int,
        default=None,
        help="only the last N lines of each container (default: all)",
    )
    logs.add_argument(
        "--prefix",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="prefix each line with '[<pod>] '",
    )
    logs.add_argument(
        "-c", "--container", default=c.DEFAULT_CONTAINER_NAME, help="the container of each pod"
    )


def _add_offline(sub: Any) -> None:
    render = sub.add_parser(
        "render",
        help="print the pods and Services the operator would create for an MSJob",
        description="Print, as multi-document YAML, the PodGroup (with "
        "--enable-gang-scheduling), the Workload and PodGroup of Kubernetes' Workload API "
        "(with --gang-scheduler=kubernetes), Kueue Workload (with --enable-kueue), Services "
        "and pods the operator creates for each MSJob, "
        "computed offline by the operator's own planner. Cluster-assigned values are "
        "placeholders: the MSJob uid '<msjob-uid>' in ownerReferences and the Scheduler "
        "Service ClusterIP '<scheduler-service-cluster-ip>' in MS_SCHED_HOST. Invalid jobs "
        "print admission's field errors ('file: path: message') and exit 1.",
    )
    render.add_argument("-f", "--filename", action="append", required=True, dest="files",
                        help="MSJob YAML file ('-' for stdin), repeatable")  # fmt: skip
    render.add_argument("-n", "--namespace", default=None,
                        help="namespace (default: the job's own, else 'default')")  # fmt: skip
    render.add_argument("--enable-gang-scheduling", action="store_true",
                        help="render as an operator run with --enable-gang-scheduling")  # fmt: skip
    render.add_argument("--gang-scheduler", choices=("none", "volcano", "kubernetes"),
                        default="none",
                        help="render as an operator run with --gang-scheduler (kubernetes: "
                        "the Workload API's v1alpha2, which Kubernetes 1.36 serves)")  # fmt: skip
    render.add_argument("--enable-kueue", action="store_true",
                        help="render as an operator run with --enable-kueue")  # fmt: skip
    check = sub.add_parser(
        "validate",
        help="check MSJob YAML files offline with admission's rules",
        description="Check every MSJob document of each file (other kinds are skipped). "
        "Prints 'file: path: message' per error and 'OK file' per clean file; exits 1 on "
        "any error.",
    )
    check.add_argument("-f", "--filename", action="append", required=True, dest="files",
                       help="YAML file ('-' for stdin), repeatable")  # fmt: skip


def parse_args(argv: Sequence[str] | None = None, prog: str = "msop") -> argparse.Namespace:
    args = build_parser(prog).parse_args(argv)
    if args.command == "run" and args.namespaces is None:
        # Repeated flags replace the variable instead of adding to it.
        args.namespaces = [n for n in (_env("MSOP_NAMESPACES") or "").split(",") if n]
    return args
