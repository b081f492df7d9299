"""``msop run``'s process-level settings (msop.bootstrap), each checked in a fresh
interpreter: importing the SDK, the API or the integrations applies none of them, and the
operator's entry point applies all of them.

What is checked: no lazy package (msop.lazy's, or the standard library's
``importlib.util._LazyModule``) in ``sys.modules``; that ``ssl``, aiohttp's default TLS
contexts and frozenlist are left as they are; glibc's mmap threshold, read from how the
heap serves an allocation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from testbed.paths import REPO

#: Prints, as JSON, what the settings of msop.bootstrap change in this process. Run
#: after the code under test; ``ORIGINAL_LOAD_DEFAULT_CERTS`` is taken before it.
_PROBE = """
import ctypes, importlib.util, json, os, platform, ssl, sys

def lazy_modules():
    out = []
    for name, module in list(sys.modules.items()):
        hook = getattr(module, "__dict__", {}).get("__getattr__")
        if isinstance(module, importlib.util._LazyModule) or (
            getattr(hook, "__module__", None) == "msop.lazy"
        ):
            out.append(name)
    return sorted(out)

def mmap_threshold():
    # glibc raises its mmap threshold to the size of each mmapped chunk freed (up to
    # 32 MiB), unless mallopt fixed it: after freeing 16 MiB, 8 MiB comes from the heap
    # ("dynamic"), or has a mapping of its own when the threshold is fixed below that
    # ("fixed"; the heap has no free 8 MiB then: its top is trimmed beyond 1 MiB).
    if platform.libc_ver()[0] != "glibc":
        return None
    fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
              "uordblks", "fordblks", "keepcost")
    class MallInfo2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in fields]
    libc = ctypes.CDLL("libc.so.6")
    if not hasattr(libc, "mallinfo2"):  # glibc < 2.33
        return None
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(16 << 20))
    before = libc.mallinfo2().hblks
    probe = libc.malloc(8 << 20)
    mapped = libc.mallinfo2().hblks > before
    libc.free(probe)
    return "fixed" if mapped else "dynamic"

def aiohttp_default_context():
    connector = sys.modules.get("aiohttp.connector")
    if connector is None:
        return None, None
    context = connector._SSL_CONTEXT_VERIFIED
    return context.cert_store_stats()["x509_ca"], context.verify_mode == ssl.CERT_REQUIRED

frozenlist = sys.modules.get("frozenlist")
aiohttp_cas, aiohttp_verifies = aiohttp_default_context()
print(json.dumps({
    "lazy": lazy_modules(),
    "load_default_certs": ssl.SSLContext.load_default_certs is ORIGINAL_LOAD_DEFAULT_CERTS,
    "aiohttp_cas": aiohttp_cas,
    "aiohttp_verifies": aiohttp_verifies,
    "system_cas": ssl.create_default_context().cert_store_stats()["x509_ca"],
    "frozenlist_env": os.environ.get("FROZENLIST_NO_EXTENSIONS"),
    "frozenlist": frozenlist and frozenlist.FrozenList.__module__,
    "libstdc++": "libstdc++" in open("/proc/self/maps").read(),
    "mmap_threshold": mmap_threshold(),
    "bootstrap": "msop.bootstrap" in sys.modules,
}))
"""


def _probe(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter whose environment sets none of the settings."""
    script = (
        "import ssl\nORIGINAL_LOAD_DEFAULT_CERTS = ssl.SSLContext.load_default_certs\n"
        + textwrap.dedent(code)
        + _PROBE
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "FROZENLIST_NO_EXTENSIONS" and not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))
    }
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60,
        cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize(
    "imports",
    ["msop.sdk, msop.sdk.render, msop.sdk.sync", "msop.api, msop.api.report", "msop.integrations"],
)
def test_importing_a_library_layer_changes_nothing_in_the_host_process(imports: str) -> None:
    # A notebook with the SDK, a training pod with the integrations: their own imports
    # of prometheus_client, structlog, aiohttp, ssl and the heap stay as they were.
    result = _probe(f"import {imports}")
    assert result["lazy"] == []
    assert result["load_default_certs"] is True
    if result["aiohttp_cas"] is not None:  # the SDK imports aiohttp: CAs as usual
        assert result["aiohttp_cas"] == result["system_cas"]
    assert result["frozenlist_env"] is None
    assert result["frozenlist"] in (None, "frozenlist._frozenlist")
    assert result["mmap_threshold"] in ("dynamic", None)
    assert result["bootstrap"] is False


def test_without_the_bootstrap_msop_metrics_use_prometheus_client_as_it_is() -> None:
    # Without the bootstrap, msop's metric modules import prometheus_client the ordinary
    # way, whoever imported it first.
    out = _probe(
        """
        import prometheus_client, structlog
        import msop.sdk, msop.metrics
        assert prometheus_client.Counter is msop.metrics.Counter
        assert msop.metrics.generate_latest() == prometheus_client.generate_latest(
            msop.metrics.REGISTRY
        )
        """
    )
    assert out["lazy"] == []


def test_msop_run_applies_every_setting_first() -> None:
    # msop run's entry point, as far as loading a kubeconfig that does not exist.
    result = _probe(
        """
        from msop.cli import main
        assert main(["run", "--kubeconfig", "/nonexistent", "--log-level", "error"]) == 1
        """
    )
    assert result["bootstrap"] is True
    # Only the heap thresholds: the tricks that saved about 1 MiB of idle memory each
    # (prometheus_client as a lazy package, frozenlist's pure-Python build, aiohttp's
    # default TLS contexts without CAs) are gone.
    assert "prometheus_client" not in result["lazy"]
    assert result["load_default_certs"] is True
    assert result["aiohttp_cas"] == result["system_cas"]
    assert result["frozenlist_env"] is None
    assert result["frozenlist"] in (None, "frozenlist._frozenlist")
    assert result["mmap_threshold"] in ("fixed", None)


def test_applying_twice_changes_nothing_more() -> None:
    result = _probe(
        """
        from msop import bootstrap, malloc
        bootstrap.apply()
        bootstrap.apply()
        """
    )
    assert result["lazy"] == []
    assert result["mmap_threshold"] in ("fixed", None)
