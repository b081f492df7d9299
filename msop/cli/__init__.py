"""The ``msop`` command line: ``run`` (the operator), ``render``, ``validate``, ``version``,
the job commands (``list``, ``status``, ``logs``, ``wait``, ``scale``, ``suspend``,
``resume``, ``delete``) and ``completion``; :func:`kubectl_plugin` is the same program as
the kubectl plugin ``kubectl-msjob`` (``kubectl msjob list``).

:mod:`.flags` defines and parses the flags; :mod:`.run` is the operator process,
:mod:`.render` and :mod:`.validate` the offline commands, :mod:`.jobs` the job commands,
:mod:`.completion` the shell completion scripts. Each command imports only what it needs:
``msop validate`` and ``msop list`` never load the controller runtime. Only ``msop run``
changes its process beyond importing (the heap thresholds): it calls
:func:`msop.bootstrap.apply` first.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from msop.cli.flags import JOB_COMMANDS, PLUGIN_PROG, build_parser, parse_args

__all__ = ["build_parser", "kubectl_complete_plugin", "kubectl_plugin", "main", "parse_args"]


def kubectl_plugin(argv: Sequence[str] | None = None) -> int:
    """``kubectl-msjob``: the kubectl plugin (``kubectl msjob list``), the same commands
    as ``msop``, named ``kubectl msjob`` in help and errors."""
    return main(argv, prog=PLUGIN_PROG)


def kubectl_complete_plugin(argv: Sequence[str] | None = None) -> int:
    """``kubectl_complete-msjob``: what kubectl runs to complete ``kubectl msjob ...``
    (``kubectl_complete-msjob __complete <args> <word being typed>``): one completion a
    line, then ``:<directive>`` (cobra's protocol, which kubectl passes on)."""
    from msop.cli.completion import complete

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["__complete"]:
        args = args[1:]
    words, directive = complete(build_parser(PLUGIN_PROG), args, _job_names)
    print("\n".join([*words, f":{directive}"]))
    return 0


def _job_names(kube_flags: list[str]) -> list[str]:
    """The names of the jobs ``list`` shows with those flags; none when it fails."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["list", "-o", "name", *kube_flags], prog=PLUGIN_PROG)
    return out.getvalue().split() if code == 0 else []


def main(argv: Sequence[str] | None = None, prog: str = "msop") -> int:
    args = parse_args(argv, prog)
    if args.command in JOB_COMMANDS:
        from msop.cli.jobs import run_job_command

        return run_job_command(args, prog)
    if args.command == "completion":
        from msop.cli.completion import completion_script

        print(completion_script(build_parser(prog), args.shell), end="")
        return 0
    if args.command == "version":
        from msop import __version__

        print(f"msop {__version__}")
        return 0
    if args.command == "render":
        from msop.cli.render import RENDER_VERSION, render_files

        volcano = args.enable_gang_scheduling or args.gang_scheduler == "volcano"
        return render_files(
            args.files, args.namespace, volcano, sys.stdout, sys.stderr,
            kueue=args.enable_kueue,
            workload_api=RENDER_VERSION if args.gang_scheduler == "kubernetes" else None,
        )  # fmt: skip
    if args.command == "validate":
        from msop.cli.validate import validate_files

        return validate_files(args.files, sys.stdout)
    from msop import bootstrap

    bootstrap.apply()  # before the runtime is imported: see msop.bootstrap
    from msop import logs
    from msop.cli.run import StartupError, run_operator

    logs.configure(args.log_format, args.log_level)
    try:
        return asyncio.run(run_operator(args))
    except StartupError as e:
        print(f"msop: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
