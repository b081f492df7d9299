"""The ``msop`` command line: ``run`` (the operator), ``render``, ``validate``, ``version``.

:mod:`.flags` defines and parses the flags; :mod:`.run` is the operator process,
:mod:`.render` and :mod:`.validate` the offline commands. Each command imports only what
it needs: ``msop validate`` never loads the controller runtime.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence

from msop import __version__
from msop.cli.flags import build_parser, parse_args

__all__ = ["build_parser", "lean_imports", "main", "parse_args"]


def lean_imports() -> None:
    """Choose the lighter builds of aiohttp's helpers, before aiohttp is imported.

    frozenlist (aiohttp's lists of signal handlers, never on a hot path here) is built
    as C++: its extension maps libstdc++, 0.8 MiB of the idle operator's RSS for nothing.
    Its pure-Python build behaves the same. An explicit setting in the environment wins.
    """
    os.environ.setdefault("FROZENLIST_NO_EXTENSIONS", "1")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "version":
        print(f"msop {__version__}")
        return 0
    if args.command == "render":
        from msop.cli.render import render_files

        return render_files(
            args.files, args.namespace, args.enable_gang_scheduling, sys.stdout, sys.stderr,
            kueue=args.enable_kueue,
        )  # fmt: skip
    if args.command == "validate":
        from msop.cli.validate import validate_files

        return validate_files(args.files, sys.stdout)
    from msop import logs, malloc

    malloc.limit_heap_growth()  # before any list page is parsed
    lean_imports()
    from msop.cli.run import StartupError, run_operator

    logs.configure(args.log_format, args.log_level)
    try:
        return asyncio.run(run_operator(args))
    except StartupError as e:
        print(f"msop: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
