#!/usr/bin/env python3
"""msop's version and release: one version, written in pyproject.toml, stamped everywhere.

The package version in pyproject.toml is the one source. Three tracked files repeat it,
because the tools that read them cannot look it up: the chart's ``version`` and
``appVersion`` (charts/msop/Chart.yaml) and the image tag of config/ (the ``images:``
entry of config/manager/kustomization.yaml). ``bump`` writes all of them; the unit tests
fail when they disagree (tests/unit/test_release.py).

    hack/release.py version              print the version
    hack/release.py bump vX.Y.Z          write X.Y.Z into pyproject.toml, the chart, config/
    hack/release.py check [vX.Y.Z]       exit 1 unless every file says the same (and X.Y.Z)
    hack/release.py build vX.Y.Z [--image REPO] [--no-image]
                                         write dist/ (make release)

``build`` refuses a version other than the one written (bump and commit first), then
empties dist/ and writes into it:

- ``msop-X.Y.Z.oci.tar``: the operator image (the repository's Dockerfile, built offline
  with buildah by testbed.images, as the real-node tier builds it), tagged
  ``REPO:X.Y.Z`` and labelled ``org.opencontainers.image.{title,description,version,
  revision,created,licenses}``; needs root, buildah and mmdebstrap (make realnode-deps);
- ``install.yaml``: config/default in one file, the image set to ``REPO:X.Y.Z``;
- ``msop-X.Y.Z.tgz``: ``helm package`` of charts/msop (image.repository set to REPO);
- the wheel and the sdist (``python -m build``);
- ``SHA256SUMS`` of all of them (``sha256sum -c SHA256SUMS`` checks it).

helm and kustomize come from hack/helm/build.sh (built from their Go modules).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
CHART = ROOT / "charts" / "msop"
CHART_YAML = CHART / "Chart.yaml"
MANAGER_KUSTOMIZATION = ROOT / "config" / "manager" / "kustomization.yaml"
DEFAULT = ROOT / "config" / "default"
DIST = ROOT / "dist"

#: The image's name in config/ (manager.yaml) and in the chart's values.
IMAGE_NAME = "msop"

_SEMVER = re.compile(r"v?(\d+\.\d+\.\d+)")
#: Each tracked line that holds the version: file -> (pattern, replacement template).
_STAMPS: dict[Path, tuple[tuple[re.Pattern[str], str], ...]] = {
    PYPROJECT: ((re.compile(r'^version = "(.*)"$', re.M), 'version = "{v}"'),),
    CHART_YAML: (
        (re.compile(r"^version: (.*)$", re.M), "version: {v}"),
        (re.compile(r'^appVersion: "(.*)"$', re.M), 'appVersion: "{v}"'),
    ),
    MANAGER_KUSTOMIZATION: ((re.compile(r'^    newTag: "(.*)"$', re.M), '    newTag: "{v}"'),),
}


class ReleaseError(Exception):
    """A version that is not X.Y.Z, files that disagree, or a failed build step."""


def parse_version(text: str) -> str:
    """``vX.Y.Z`` or ``X.Y.Z`` -> ``X.Y.Z``. Only plain X.Y.Z: the one string must be a
    Python version (PEP 440), a chart version (SemVer) and an image tag at once."""
    m = _SEMVER.fullmatch(text.strip())
    if m is None:
        raise ReleaseError(f"not a version vX.Y.Z: {text!r}")
    return m.group(1)


def stamped_versions() -> dict[str, str]:
    """``"<file>: <line>"`` -> the version each tracked stamp says."""
    found: dict[str, str] = {}
    for path, stamps in _STAMPS.items():
        text = path.read_text()
        for pattern, _ in stamps:
            matches = pattern.findall(text)
            if len(matches) != 1:
                raise ReleaseError(
                    f"{path.relative_to(ROOT)}: expected one line matching {pattern.pattern}"
                )
            found[f"{path.relative_to(ROOT)}: {pattern.pattern}"] = matches[0]
    return found


def current_version() -> str:
    """The version in pyproject.toml (the source), after checking that the others agree."""
    versions = stamped_versions()
    if len(set(versions.values())) != 1:
        lines = "\n".join(f"  {k} -> {v}" for k, v in versions.items())
        raise ReleaseError(f"the version differs between files (run make bump):\n{lines}")
    return next(iter(versions.values()))


def bump(version: str) -> list[Path]:
    """Write ``version`` into every stamp; returns the files changed."""
    changed = []
    for path, stamps in _STAMPS.items():
        text = path.read_text()
        new = text
        for pattern, template in stamps:
            new = pattern.sub(template.format(v=version), new)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def release_tools() -> Path:
    """The directory of helm and kustomize (hack/helm/build.sh builds them once)."""
    proc = subprocess.run(
        [str(ROOT / "hack" / "helm" / "build.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise ReleaseError(f"hack/helm/build.sh failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _run(argv: Sequence[str], what: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, cwd=cwd, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise ReleaseError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}")
    return proc.stdout


def install_yaml(image: str, tools: Path | None = None) -> str:
    """config/default in one multi-document YAML, with the operator image set to ``image``
    (``repository:tag``): what ``kubectl apply -k`` of an overlay with that ``images:``
    entry installs."""
    repository, _, tag = image.rpartition(":")
    kustomize = (tools or release_tools()) / "kustomize"
    with tempfile.TemporaryDirectory() as tmp:
        overlay = Path(tmp)
        (overlay / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\n"
            f"resources:\n  - {os.path.relpath(DEFAULT, overlay)}\n"
            f'images:\n  - name: {IMAGE_NAME}\n    newName: {repository}\n    newTag: "{tag}"\n'
        )
        return _run([str(kustomize), "build", str(overlay)], "kustomize build")


def package_chart(dest: Path, repository: str, tools: Path | None = None) -> Path:
    """``helm package`` of charts/msop into ``dest``, its image.repository set to
    ``repository`` (the tag is the chart's appVersion)."""
    helm = (tools or release_tools()) / "helm"
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "msop"
        shutil.copytree(CHART, chart)
        values = chart / "values.yaml"
        text, n = re.subn(
            rf"^  repository: {IMAGE_NAME}$", f"  repository: {repository}", values.read_text(),
            count=1, flags=re.M,
        )  # fmt: skip
        if n != 1:
            raise ReleaseError("charts/msop/values.yaml: no line '  repository: msop'")
        values.write_text(text)
        _run([str(helm), "lint", "--strict", str(chart)], "helm lint")
        out = _run([str(helm), "package", str(chart), "--destination", str(dest)], "helm package")
    return Path(out.strip().rsplit(": ", 1)[-1])


def image_reference(repository: str, version: str) -> str:
    """``repository:version``, the repository fully qualified as the kubelet resolves it
    (``msop`` -> ``docker.io/library/msop``), so that the archive imports under the name
    that install.yaml's short one means."""
    first = repository.split("/", 1)[0]
    if "/" not in repository:
        repository = f"docker.io/library/{repository}"
    elif "." not in first and ":" not in first and first != "localhost":
        repository = f"docker.io/{repository}"
    return f"{repository}:{version}"


def _git(*args: str) -> str:
    return _run(["git", *args], "git", cwd=ROOT).strip()


def oci_labels(version: str) -> dict[str, str]:
    """The image's org.opencontainers.image.* labels; ``created`` is the commit's time, so
    that building the same commit again labels it the same."""
    created = datetime.datetime.fromisoformat(_git("log", "-1", "--format=%cI"))
    return {
        "org.opencontainers.image.title": "msop",
        "org.opencontainers.image.description": "msop, the MindSpore training-job operator",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": _git("rev-parse", "HEAD"),
        "org.opencontainers.image.created": created.astimezone(datetime.UTC).isoformat(),
        "org.opencontainers.image.licenses": "Apache-2.0",
    }


def build_image(version: str, repository: str, out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from testbed.images import ImageBuilder
    from testbed.paths import CACHE

    builder = ImageBuilder(CACHE, ROOT)
    base = builder.python_base()
    builder.release_operator(base, image_reference(repository, version), oci_labels(version), out)


def sha256sums(directory: Path) -> str:
    lines = []
    for path in sorted(p for p in directory.iterdir() if p.is_file() and p.name != "SHA256SUMS"):
        lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n")
    return "".join(lines)


def build(
    version: str,
    repository: str,
    with_image: bool,
    *,
    out: Path = DIST,
    python_packages: bool = True,
) -> list[Path]:
    """Write dist/ (or ``out``) for ``version`` (which must be the written one); returns its
    files. ``python_packages=False`` leaves out the wheel and the sdist (the real-node
    tests build the rest with this function, and install nothing from Python packages)."""
    written = current_version()
    if version != written:
        raise ReleaseError(
            f"pyproject.toml says {written}, not {version}: run `make bump VERSION=v{version}` "
            "and commit first"
        )
    if _git("status", "--porcelain", "--untracked-files=no"):
        print("release: warning: tracked files have changes; the labels name HEAD", file=sys.stderr)
    tools = release_tools()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    image = f"{repository}:{version}"
    (out / "install.yaml").write_text(
        f"# msop {version}: kubectl apply --server-side -f install.yaml\n"
        + install_yaml(image, tools)
    )
    package_chart(out, repository, tools)
    if python_packages:
        _run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out),
              str(ROOT)], "python -m build")  # fmt: skip
    if with_image:
        build_image(version, repository, out / f"msop-{version}.oci.tar")
    (out / "SHA256SUMS").write_text(sha256sums(out))
    return sorted(out.iterdir())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the version")
    b = sub.add_parser("bump", help="write the version into every file that holds it")
    b.add_argument("version")
    c = sub.add_parser("check", help="exit 1 unless every file says the same version")
    c.add_argument("version", nargs="?")
    r = sub.add_parser("build", help="write dist/")
    r.add_argument("version")
    r.add_argument("--image", default=IMAGE_NAME, help="the image repository (default: msop)")
    r.add_argument("--no-image", action="store_true", help="leave the OCI image out")
    args = parser.parse_args(argv)
    try:
        if args.command == "version":
            print(current_version())
        elif args.command == "bump":
            version = parse_version(args.version)
            for path in bump(version):
                print(f"wrote {version} into {path.relative_to(ROOT)}")
            current_version()
        elif args.command == "check":
            version = current_version()
            if args.version and parse_version(args.version) != version:
                raise ReleaseError(f"the files say {version}, not {args.version}")
            print(version)
        else:
            for path in build(parse_version(args.version), args.image, not args.no_image):
                print(f"dist/{path.name}")
    except ReleaseError as e:
        print(f"release: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
