"""The flags of every ``msop`` command, and how they are parsed.

``msop run`` is the operator process; ``msop version`` prints the version. Every flag
of ``msop run`` can also be set by an environment variable (shown in ``--help``); a flag
on the command line wins over the variable. Errors are one line on stderr and a
non-zero exit: 2 for bad flags, 1 for anything else (unreachable API server, missing
CRD, lost leader election).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any, NoReturn

from msop.api import constants as c
from msop.msjob.settings import Settings


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def _env_bool(name: str) -> bool:
    return (os.environ.get(name) or "").lower() in ("1", "true", "yes", "on")


def _positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


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


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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
    a = run.add_argument
    a(
        "--kubeconfig",
        default=_env("KUBECONFIG"),
        help="kubeconfig file; in-cluster config when unset [env KUBECONFIG]",
    )
    a(
        "--namespace",
        action="append",
        dest="namespaces",
        default=None,
        help="namespace to watch, repeatable; all namespaces when unset "
        "[env MSOP_NAMESPACES, comma-separated]",
    )
    a(
        "--metrics-bind-address",
        default=_env("MSOP_METRICS_BIND_ADDRESS", ":8080"),
        help="address of /metrics; 0 disables it [env MSOP_METRICS_BIND_ADDRESS]",
    )
    a(
        "--health-probe-bind-address",
        default=_env("MSOP_HEALTH_PROBE_BIND_ADDRESS", ":8081"),
        help="address of /healthz and /readyz; 0 disables it [env MSOP_HEALTH_PROBE_BIND_ADDRESS]",
    )
    a(
        "--leader-elect",
        action="store_true",
        default=_env_bool("MSOP_LEADER_ELECT"),
        help="use a Lease so that only one replica reconciles [env MSOP_LEADER_ELECT]",
    )
    a(
        "--leader-election-id",
        default=_env("MSOP_LEADER_ELECTION_ID", "msop.mindspore.gitee.com"),
        help="name of the leader-election Lease [env MSOP_LEADER_ELECTION_ID]",
    )
    a(
        "--leader-election-namespace",
        default=_env("MSOP_LEADER_ELECTION_NAMESPACE"),
        help="namespace of the Lease; the pod's own namespace when unset, else 'default' "
        "[env MSOP_LEADER_ELECTION_NAMESPACE]",
    )
    a(
        "--leader-election-lease-duration",
        type=_positive_float,
        default=_env("MSOP_LEADER_ELECTION_LEASE_DURATION", "15"),
        help="seconds a follower waits before taking an unrenewed Lease "
        "[env MSOP_LEADER_ELECTION_LEASE_DURATION]",
    )
    a(
        "--leader-election-renew-deadline",
        type=_positive_float,
        default=_env("MSOP_LEADER_ELECTION_RENEW_DEADLINE", "10"),
        help="seconds the leader retries renewing before it gives up "
        "[env MSOP_LEADER_ELECTION_RENEW_DEADLINE]",
    )
    a(
        "--leader-election-retry-period",
        type=_positive_float,
        default=_env("MSOP_LEADER_ELECTION_RETRY_PERIOD", "2"),
        help="seconds between Lease attempts [env MSOP_LEADER_ELECTION_RETRY_PERIOD]",
    )
    a(
        "--max-concurrent-reconciles",
        type=_positive_int,
        default=_env("MSOP_MAX_CONCURRENT_RECONCILES", str(Settings.max_concurrent_reconciles)),
        help="MSJobs reconciled in parallel [env MSOP_MAX_CONCURRENT_RECONCILES]",
    )
    a(
        "--enable-gang-scheduling",
        action="store_true",
        default=_env_bool("MSOP_ENABLE_GANG_SCHEDULING"),
        help="create Volcano PodGroups and hold pods until Inqueue "
        "[env MSOP_ENABLE_GANG_SCHEDULING]",
    )
    a(
        "--progress-port",
        type=_port,
        default=_env("MSOP_PROGRESS_PORT", str(c.DEFAULT_PROGRESS_PORT)),
        help="port Worker 0's progress reporter (msop.integrations) is told to serve on, "
        "and polled at; 0 turns training progress off [env MSOP_PROGRESS_PORT]",
    )
    a(
        "--progress-interval",
        type=_positive_float,
        default=_env("MSOP_PROGRESS_INTERVAL", "30"),
        help="seconds between two progress polls of a job, so at most one progress write "
        "of its status per interval [env MSOP_PROGRESS_INTERVAL]",
    )
    a(
        "--kube-api-qps",
        type=_positive_float,
        default=_env("MSOP_KUBE_API_QPS", "50"),
        help="client-side request rate limit [env MSOP_KUBE_API_QPS]",
    )
    a(
        "--kube-api-burst",
        type=_positive_int,
        default=_env("MSOP_KUBE_API_BURST", "100"),
        help="client-side request burst [env MSOP_KUBE_API_BURST]",
    )
    a(
        "--graceful-shutdown-timeout",
        type=_positive_float,
        default=_env("MSOP_GRACEFUL_SHUTDOWN_TIMEOUT", "30"),
        help="seconds in-flight reconciles get on SIGTERM [env MSOP_GRACEFUL_SHUTDOWN_TIMEOUT]",
    )
    a(
        "--watch-stall-timeout",
        type=_positive_float,
        default=_env("MSOP_WATCH_STALL_TIMEOUT", "90"),
        help="seconds without any watch event or bookmark after which a watch counts as "
        "stuck and is restarted [env MSOP_WATCH_STALL_TIMEOUT]",
    )
    a(
        "--log-format",
        choices=("json", "console"),
        default=_env("MSOP_LOG_FORMAT", "json"),
        help="log line format [env MSOP_LOG_FORMAT]",
    )
    a("--log-level", choices=("debug", "info", "warning", "error"),
      default=_env("MSOP_LOG_LEVEL", "info"),
      help="minimum log level [env MSOP_LOG_LEVEL]")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="msop", description="msop: the MindSpore MSJob operator")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    _add_run(sub)
    sub.add_parser("version", help="print the msop version")
    _add_offline(sub)
    return parser


def _add_offline(sub: Any) -> None:
    render = sub.add_parser(
        "render",
        help="print the pods and Services the operator would create for an MSJob",
        description="Print, as multi-document YAML, the PodGroup (with "
        "--enable-gang-scheduling), Services and pods the operator creates for each MSJob, "
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
    check = sub.add_parser(
        "validate",
        help="check MSJob YAML files offline with admission's rules",
        description="Check every MSJob document of each file (other kinds are skipped). "
        "Prints 'file: path: message' per error and 'OK file' per clean file; exits 1 on "
        "any error.",
    )
    check.add_argument("-f", "--filename", action="append", required=True, dest="files",
                       help="YAML file ('-' for stdin), repeatable")  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.command == "run" and args.namespaces is None:
        # Repeated flags replace the variable instead of adding to it.
        args.namespaces = [n for n in (_env("MSOP_NAMESPACES") or "").split(",") if n]
    return args
