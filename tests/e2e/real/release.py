"""msop's releases on the real node: dist/ as ``make release`` writes it, the release after
it, their images in the node's containerd, and a real helm.

- :func:`build_dist` runs hack/release.py's own ``build`` (the code ``make release``
  runs) for the version pyproject.toml holds, into a directory of the tier's cache
  instead of dist/, with the image and without the wheel and sdist (nothing here
  installs them). The image is built for the release, not taken from the tier's cache:
  ``docker.io/library/msop:X.Y.Z`` with its ``org.opencontainers.image.*`` labels.
- :func:`next_release` makes the release after it, ``X.Y.(Z+1)``, without a second
  build: the image relabelled (``org.opencontainers.image.version``) and tagged with the
  new version (a new reference and a new image ID), and the chart repackaged with the
  new ``version`` and ``appVersion``. Only the msop inside is the same build.
- :func:`import_image` does what docs/tasks/install.md tells users without a registry:
  ``ctr -n k8s.io images import`` of the OCI archive, on the node's containerd.
- :class:`Helm` is the helm ``make helm`` builds (hack/helm), against the cluster's
  kubeconfig, with its cache, configuration and data in a directory of its own.

Errors: hack/release.py's ``ReleaseError``, ``ImageBuildError`` and ``ClusterStartError``
(``ctr``) propagate; helm's failures are AssertionErrors with its output.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from testbed.images import Image, ImageBuilder, OciImage, oci_archive_image
from testbed.paths import CACHE, REPO
from testbed.realnode import RealCluster

JSON = dict[str, Any]
#: The version label of the image.
VERSION_LABEL = "org.opencontainers.image.version"


@cache
def hack_release() -> ModuleType:
    """hack/release.py, loaded as a module (hack/ is not a package)."""
    spec = importlib.util.spec_from_file_location("msop_hack_release", REPO / "hack/release.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Release:
    """One version's artifacts in ``dist`` and what its image archive holds."""

    version: str
    dist: Path
    image: OciImage

    @property
    def chart(self) -> Path:
        return self.dist / f"msop-{self.version}.tgz"

    @property
    def install_yaml(self) -> Path:
        return self.dist / "install.yaml"

    @property
    def archive(self) -> Path:
        return self.dist / f"msop-{self.version}.oci.tar"

    @property
    def reference(self) -> str:
        """The image as install.yaml and the chart name it: ``msop:X.Y.Z``."""
        return f"{hack_release().IMAGE_NAME}:{self.version}"

    def mismatch(self, pod: JSON) -> str:
        """Why ``pod`` does not run this release's image ("" when it does): its container
        must name :attr:`reference` and run the image of :attr:`archive` (the kubelet's
        imageID is the image's ID, its config digest, or a digest of its manifest)."""
        name = pod["metadata"]["name"]
        (container,) = pod["spec"]["containers"]
        if container["image"] != self.reference:
            return f"{name} names {container['image']}, not {self.reference}"
        statuses = pod.get("status", {}).get("containerStatuses") or []
        image_id = statuses[0].get("imageID", "") if statuses else ""
        if not image_id:
            return f"{name} has no imageID yet"
        digest = "sha256:" + image_id.rsplit("sha256:", 1)[-1]
        if digest not in (self.image.config, self.image.manifest):
            return (
                f"{name} runs {image_id}, not the archive's image (config {self.image.config},"
                f" manifest {self.image.manifest})"
            )
        return ""


def build_dist(out: Path) -> Release:
    """``make release VERSION=v<pyproject's version>`` into ``out``, less the wheel and the
    sdist. Builds helm and kustomize first if needed (hack/helm/build.sh)."""
    release = hack_release()
    version = release.current_version()
    release.build(version, release.IMAGE_NAME, True, out=out, python_packages=False)
    return Release(version, out, oci_archive_image(out / f"msop-{version}.oci.tar"))


def next_version(version: str) -> str:
    major, minor, patch = version.split(".")
    return f"{major}.{minor}.{int(patch) + 1}"


def next_release(first: Release, out: Path, helm: Helm) -> Release:
    """The release after ``first``, in ``out``: its image (relabelled and tagged with the
    next patch version) and its chart (repackaged with that version)."""
    release = hack_release()
    version = next_version(first.version)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    archive = out / f"msop-{version}.oci.tar"
    ImageBuilder(CACHE, REPO).relabel(
        Image(first.image.ref, first.archive),
        release.image_reference(release.IMAGE_NAME, version),
        {VERSION_LABEL: version},
        archive,
    )
    repackage_chart(first.chart, version, out, helm)
    return Release(version, out, oci_archive_image(archive))


def repackage_chart(chart: Path, version: str, out: Path, helm: Helm) -> Path:
    """``chart`` (a packaged chart) with ``version`` as its version and appVersion,
    packaged again into ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(chart) as tar:
            # Extraction filters came in Python 3.11.4; Debian bookworm's 3.11.2 lacks
            # them. Our own chart, just packaged: every member is a plain file below msop/.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:
                for member in tar.getmembers():
                    if (
                        not (member.isfile() or member.isdir())
                        or member.name.startswith(("/", ".."))
                        or ".." in Path(member.name).parts
                    ):
                        raise AssertionError(f"{chart}: unexpected member {member.name}")
                tar.extractall(tmp)  # members checked above
        chart_yaml = Path(tmp) / "msop" / "Chart.yaml"
        text = chart_yaml.read_text()
        text, n = re.subn(r"^version: .*$", f"version: {version}", text, flags=re.M)
        text, m = re.subn(r"^appVersion: .*$", f'appVersion: "{version}"', text, flags=re.M)
        if (n, m) != (1, 1):
            raise AssertionError(f"{chart}: no single version and appVersion line:\n{text}")
        chart_yaml.write_text(text)
        helm("package", str(chart_yaml.parent), "--destination", str(out))
    packaged = out / f"msop-{version}.tgz"
    assert packaged.is_file(), f"helm package wrote no {packaged}"
    return packaged


def import_image(cluster: RealCluster, release: Release) -> None:
    """``ctr -n k8s.io images import`` of the release's archive (docs/tasks/install.md);
    AssertionError unless containerd then knows the image by the archive's name."""
    cluster.ctr("images", "import", str(release.archive))
    names = cluster.ctr("images", "ls", "-q").stdout.split()
    assert release.image.ref in names, (
        f"ctr images import {release.archive.name} did not name the image "
        f"{release.image.ref!r}; containerd has: {names}"
    )


@dataclass(frozen=True)
class Helm:
    """``helm`` against one cluster. Its cache, configuration and data live under
    ``home``; no proxy setting of this machine reaches it."""

    binary: Path
    kubeconfig: str
    home: Path

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        env.update(
            KUBECONFIG=self.kubeconfig,
            HELM_CACHE_HOME=str(self.home / "cache"),
            HELM_CONFIG_HOME=str(self.home / "config"),
            HELM_DATA_HOME=str(self.home / "data"),
        )
        proc = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=env,
            timeout=timeout, check=False,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed (exit {proc.returncode}):\n"
                f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
            )
        return proc


def helm_binary() -> Path:
    """The helm hack/helm/build.sh built (``make helm``), building it if needed."""
    path: Path = hack_release().release_tools() / "helm"
    return path
