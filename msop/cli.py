"""The ``msop`` command line: ``msop version`` and (later) ``msop run``."""

from __future__ import annotations

import argparse
import sys

from msop import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="msop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the msop version")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(f"msop {__version__}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
