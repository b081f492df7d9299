"""The real tier's images carry nothing of this machine.

Every image archive that the node imports is opened layer by layer:

- no certificate of this machine's own (``/usr/local/share/ca-certificates``, the CAs a
  sandbox or proxy adds) appears in any file of any layer;
- no resolver, hostname, pip or apt configuration of this machine is in it, and no
  proxy setting in the image's environment or in any file under ``etc/``.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from testbed.realnode import NodeImages

HOST_CAS = Path("/usr/local/share/ca-certificates")
#: Files of the host that would say "this machine" if they showed up in an image.
HOST_ONLY = {"etc/resolv.conf", "etc/hostname", "etc/pip.conf", "root/.config/pip/pip.conf"}
PROXY = re.compile(rb"(?i)\b(https?|no)_proxy\b|Acquire::https?::Proxy")


def pem_bodies(path: Path) -> list[bytes]:
    """The base64 lines of each certificate in a PEM file, joined (whitespace aside)."""
    text = path.read_bytes()
    blocks = re.findall(rb"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", text, re.S)
    return [b"".join(block.split()) for block in blocks]


def file_of(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    """The file ``name`` of ``archive``; the test fails if it has none."""
    found = archive.extractfile(name)
    assert found is not None, f"{name} is not a file of {archive.name!r}"
    return found


def layer_files(archive: Path) -> Iterator[tuple[str, bytes]]:
    with tarfile.open(archive) as outer:
        manifest = json.load(file_of(outer, "manifest.json"))
        for layer in manifest[0]["Layers"]:
            with tarfile.open(fileobj=file_of(outer, layer)) as inner:
                for member in inner:
                    if member.isfile():
                        data = inner.extractfile(member)
                        yield member.name.removeprefix("./"), data.read() if data else b""


def image_config(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as outer:
        manifest = json.load(file_of(outer, "manifest.json"))
        config: dict[str, Any] = json.load(file_of(outer, manifest[0]["Config"]))
        return config


@pytest.mark.parametrize("which", ["pause", "python", "operator"])
def test_image_carries_nothing_of_this_machine(images: NodeImages, which: str) -> None:
    archive = getattr(images, which).archive
    host_cas = [body for ca in sorted(HOST_CAS.glob("*.crt")) for body in pem_bodies(ca)]
    env = image_config(archive).get("config", {}).get("Env") or []
    assert not [e for e in env if PROXY.search(e.encode())], env
    found: list[str] = []
    files = 0
    for name, data in layer_files(archive):
        files += 1
        # (buildah leaves empty placeholders for the runtime to mount over: harmless.)
        if name in HOST_ONLY and data.strip():
            found.append(f"{name} is in the image: {data[:80]!r}")
        if name.startswith("etc/") and PROXY.search(data):
            found.append(f"{name} sets a proxy")
        if host_cas and b"-----BEGIN CERTIFICATE-----" in data:
            flat = b"".join(data.split())
            found += [f"{name} holds a CA of this machine" for ca in host_cas if ca in flat]
    assert files > 0
    assert not found, found
