"""The agent's configuration, from its environment (the variables of
:mod:`msop.integrations.wire`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from msop.integrations import signature
from msop.integrations.wire import (
    DEFAULT_STOP_GRACE,
    ENV_AGENT_DIR,
    ENV_AGENT_GENERATION,
    ENV_AGENT_HOLD,
    ENV_AGENT_JOB,
    ENV_AGENT_KEY,
    ENV_AGENT_PORT,
    ENV_AGENT_STOP_GRACE,
    MAX_GENERATION,
    valid_job_uid,
)

__all__ = ["CONFIG_EXIT_CODE", "Config", "ConfigError", "load_config"]

CONFIG_EXIT_CODE: Final = 2
"""A missing or invalid environment variable: not the reserved restart code."""
HEX: Final = frozenset("0123456789abcdefABCDEF")


class ConfigError(Exception):
    """A missing or invalid environment variable; the message is one line."""


@dataclass(frozen=True)
class Config:
    """The agent's environment. ``job``, ``key`` and ``port`` only ``serve`` needs."""

    directory: Path
    generation: int
    job: str = ""
    key: bytes = b""
    port: int = 0
    hold: bool = False
    """The pod replaces a lost member: its first start waits for the release as well."""
    stop_grace: float = DEFAULT_STOP_GRACE
    """Seconds the training's run has after its SIGTERM when msop restarts the pod."""


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise ConfigError(f"{name} is not set")
    return value


def _digits(env: Mapping[str, str], name: str, limit: int) -> int:
    text = _required(env, name)
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= limit):
        raise ConfigError(f"{name}={text!r} is not an integer in [0, {limit}]")
    return int(text)


def _directory(env: Mapping[str, str]) -> Path:
    path = Path(_required(env, ENV_AGENT_DIR))
    if not path.is_dir():
        raise ConfigError(f"{ENV_AGENT_DIR}={str(path)!r} is not a directory")
    return path


def _port(env: Mapping[str, str]) -> int:
    port = _digits(env, ENV_AGENT_PORT, 65535)
    if port == 0:
        raise ConfigError(f"{ENV_AGENT_PORT}=0: the agent needs a fixed port")
    return port


def _job(env: Mapping[str, str]) -> str:
    job = _required(env, ENV_AGENT_JOB)
    if not valid_job_uid(job):
        raise ConfigError(f"{ENV_AGENT_JOB}={job!r} is not a job UID")
    return job


def _key(env: Mapping[str, str]) -> bytes:
    text = _required(env, ENV_AGENT_KEY)
    key = bytes.fromhex(text) if set(text) <= HEX and len(text) % 2 == 0 else b""
    if not signature.is_public_key(key):
        raise ConfigError(
            f"{ENV_AGENT_KEY} is not a P-256 public key (130 hex digits of an uncompressed point)"
        )
    return key


def _stop_grace(env: Mapping[str, str]) -> float:
    text = env.get(ENV_AGENT_STOP_GRACE, "")
    if not text:
        return DEFAULT_STOP_GRACE
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise ConfigError(f"{ENV_AGENT_STOP_GRACE}={text!r} is not a whole number of seconds")
    return float(text)


def load_config(env: Mapping[str, str], *, serving: bool) -> Config:
    """The configuration from ``env``; ConfigError names the first variable that is wrong."""
    directory = _directory(env)
    generation = _digits(env, ENV_AGENT_GENERATION, MAX_GENERATION)
    hold = env.get(ENV_AGENT_HOLD) == "1"
    if not serving:
        return Config(directory, generation, hold=hold)
    return Config(
        directory,
        generation,
        job=_job(env),
        key=_key(env),
        port=_port(env),
        hold=hold,
        stop_grace=_stop_grace(env),
    )
