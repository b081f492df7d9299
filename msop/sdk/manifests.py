"""Reading MSJobs from what users hand us: dicts, YAML text or files.

Pure functions over plain dicts. YAML parse errors surface as ``yaml.YAMLError``.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from msop.api import constants as c
from msop.kube.objects import JSON


def load_documents(text: str) -> Iterator[Any]:
    """Every non-empty document of a (multi-document) YAML text, in order."""
    for doc in yaml.safe_load_all(text):
        if doc is not None:
            yield doc


def is_msjob(doc: Any) -> bool:
    return isinstance(doc, Mapping) and doc.get("kind") == c.KIND


def read_msjobs(path: str) -> list[JSON]:
    """The MSJob documents of a YAML file (``-`` reads stdin); other kinds are skipped.
    Raises OSError or yaml.YAMLError."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return [d for d in load_documents(text) if is_msjob(d)]


def load_job(source: Mapping[str, Any] | str | Path) -> JSON:
    """One MSJob from a dict (deep-copied), YAML text, or a file path.

    A ``str`` is YAML text when it contains a newline or a ``:``, else a file path. The
    text must hold exactly one MSJob (other kinds are ignored). Raises ValueError when it
    holds none or several, OSError when the file cannot be read.
    """
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    if isinstance(source, Path) or ("\n" not in source and ":" not in source):
        text = Path(source).read_text()
    else:
        text = source
    docs = list(load_documents(text))
    jobs = [d for d in docs if is_msjob(d)]
    if len(docs) == 1 and isinstance(docs[0], dict) and not jobs:
        return docs[0]  # let validation say what is wrong with it
    if len(jobs) != 1:
        raise ValueError(f"expected exactly one MSJob document, found {len(jobs)}")
    job: JSON = jobs[0]
    return job
