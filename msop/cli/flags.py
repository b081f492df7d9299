"""The flags of every ``msop`` command, and how they are parsed.

``msop run`` is the operator process; ``msop version`` prints the version. Every flag
of ``msop run`` can also be set by an environment variable (shown in ``--help``); a flag
on the command line wins over the variable. Errors are one line on stderr and a
non-zero exit: 2 for bad flags, 1 for anything else (unreachable API server, missing
CRD, lost leader election).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
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
        "--legacy-operator-lease",
        "MSOP_LEGACY_OPERATOR_LEASE",
        "<namespace>/<name> of the Go ms-operator's leader-election Lease: while it is "
        "renewed, ms-operator runs and msop starts no controller (and stops if it is "
        "renewed again); '' turns the check off",
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
        "create a Volcano PodGroup per job; its pods wait until Volcano admits the gang",
        action="store_true",
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
        "--progress-port",
        "MSOP_PROGRESS_PORT",
        "port Worker 0's progress reporter (msop.integrations) is told to serve on, "
        "and polled at; 0 turns training progress off",
        str(c.DEFAULT_PROGRESS_PORT),
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
        "--enable-gang-scheduling), Kueue Workload (with --enable-kueue), Services and pods the "
        "operator creates for each MSJob, "
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.command == "run" and args.namespaces is None:
        # Repeated flags replace the variable instead of adding to it.
        args.namespaces = [n for n in (_env("MSOP_NAMESPACES") or "").split(",") if n]
    return args
