"""The command: ``python -m msop.integrations.agent serve|barrier``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from msop.integrations.agent.barrier import barrier
from msop.integrations.agent.config import CONFIG_EXIT_CODE, ConfigError, load_config
from msop.integrations.agent.server import serve
from msop.integrations.wire import (
    AGENT_RELEASE_PATH,
    AGENT_RESTART_EXIT_CODE,
    AGENT_RESTART_PATH,
    AGENT_STATE_PATH,
    AGENT_VERSION,
    ENV_AGENT_DIR,
    ENV_AGENT_GENERATION,
    ENV_AGENT_HOLD,
    ENV_AGENT_JOB,
    ENV_AGENT_KEY,
    ENV_AGENT_PORT,
)

__all__ = ["main"]

_DESCRIPTION = f"""\
msop's restart agent for the pods of an MSJob (see the package msop.integrations.agent).

serve    the msop-agent sidecar: HTTP on ${ENV_AGENT_PORT}.
           GET  {AGENT_STATE_PATH}    {{"v", "job", "generation", "released", "waiting"}}
           POST {AGENT_RESTART_PATH}  {{"generation": G, "signature": HEX}}: if G is above the pod's
                     generation, record it, answer 202, exit {AGENT_RESTART_EXIT_CODE} (the pod's
                     RestartAllContainers rule restarts every container in place)
           POST {AGENT_RELEASE_PATH}  {{"generation": G, "signature": HEX}}: let the barrier pass
                     for every generation up to G
         signature: ECDSA P-256/SHA-256 by msop's key, r||s in 128 hex digits, over
         "msop-agent/{AGENT_VERSION} <restart|release> <job uid> <G>"; a bad one gets 403.
barrier  the msop-barrier init container: on the pod's first start exit 0 (unless
         {ENV_AGENT_HOLD}=1: the pod replaces a lost member and waits too); after a restart
         wait until msop released the pod's generation, then exit 0.

environment: {ENV_AGENT_DIR} (the shared emptyDir), {ENV_AGENT_GENERATION} (the job's
generation when the pod was made), and for serve {ENV_AGENT_PORT}, {ENV_AGENT_JOB} (the job's
UID), {ENV_AGENT_KEY} (msop's public key, 130 hex digits). A missing or bad one exits
{CONFIG_EXIT_CODE}.
"""


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m msop.integrations.agent",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serving = commands.add_parser("serve", help="run the msop-agent sidecar")
    serving.add_argument(
        "--host", help="the address to listen on (default: every address, IPv6 and IPv4)"
    )
    commands.add_parser("barrier", help="run the msop-barrier init container")
    args = parser.parse_args(argv)
    try:
        config = load_config(os.environ, serving=args.command == "serve")
    except ConfigError as exc:
        print(f"msop agent {args.command}: {exc}", file=sys.stderr, flush=True)
        return CONFIG_EXIT_CODE
    if args.command == "serve":
        return serve(config, args.host)
    return barrier(config)
