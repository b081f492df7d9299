"""Container images for the real-node tier, built offline and cached by their inputs.

There is no registry here: every image the real node runs is built on this machine and
imported into its containerd.

- ``pause``: the pod sandbox, a static C program (``hack/realnode/pause.c``).
- ``python``: a Debian bookworm base made with ``mmdebstrap`` (python3, venv, pip),
  tagged with the name the Dockerfile's ``PYTHON_IMAGE`` uses, so the Dockerfile builds
  on it unchanged. It is also the image the e2e MSJobs run (it has ``sh`` and Python).
- ``operator``: ``buildah bud`` of the repository's ``Dockerfile`` as it is, with no
  network: pip installs from a wheelhouse that the host's pip fills first
  (``--build-arg PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheelhouse``, the wheelhouse mounted
  read-only).
- ``mindspore``: ``buildah bud`` of ``examples/mindspore/Dockerfile`` the same way, from a
  wheelhouse of ``examples/mindspore/requirements.txt`` (MindSpore for CPU, about 830 MB
  of wheels; the image is about 3 GB).

Nothing of this machine goes into an image: mmdebstrap's copies of the host's
``/etc/resolv.conf`` and ``/etc/hostname`` are removed, no proxy variable is passed to a
build, and the host's pip configuration is used only by the host's own ``pip download``.

Each image is written once as a docker-archive tar named by a hash of its inputs under
``<cache>/images/``; ``ctr images import`` takes it as it is. Errors: ImageBuildError,
with the failing command and the tail of its output.

``release_operator`` builds the operator image the same way for ``make release``
(hack/release.py), tagged with the release's version and OCI labels, and writes it as an
OCI archive. ``relabel`` makes another image of one such archive (new labels, new
reference), and ``oci_archive_image`` reads an OCI archive's digests and labels: the real
tier's release tests (tests/e2e/real/test_release.py) use both.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.paths import REPO

#: The Dockerfile's default ``PYTHON_IMAGE``; the Debian base is tagged with it.
PYTHON_IMAGE = "docker.io/library/python:3.11.11-slim-bookworm"
PAUSE_IMAGE = "docker.io/msop-e2e/pause:3.10"
OPERATORREPOSITORY = "docker.io/library/msop"

MINDSPOREREPOSITORY = "docker.io/msop-e2e/mindspore-cpu"

#: Debian packages of the Python base (and of the e2e pods that run it). libgomp1 is
#: what MindSpore needs beyond python:slim; having it here lets the MindSpore image build
#: offline (its Dockerfile installs it only when it is missing).
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3", "libgomp1")
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"

IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Bump when a recipe below changes in a way its inputs do not show.
RECIPE_VERSION = "1"


class ImageBuildError(RuntimeError):
    """An image build step failed; the message has the command and its output tail."""


@dataclass(frozen=True)
class Image:
    """A built image: its archive on disk and the reference it is tagged with."""

    ref: str
    archive: Path


@dataclass(frozen=True)
class OciImage:
    """What an OCI archive (``buildah push oci-archive:``) holds: its one image's manifest
    digest, configuration digest (the image ID) and labels, and the reference it names."""

    ref: str
    manifest: str
    config: str
    labels: Mapping[str, str]


def oci_archive_image(archive: Path) -> OciImage:
    """Read ``archive``'s ``index.json``, its one manifest and that manifest's config.
    Raises ImageBuildError when the archive is not an OCI archive of one image."""
    try:
        with tarfile.open(archive) as tar:
            members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}

            def read(name: str) -> dict[str, object]:
                f = tar.extractfile(members[name])
                assert f is not None
                doc: dict[str, object] = json.load(f)
                return doc

            def blob(digest: str) -> dict[str, object]:
                return read("blobs/" + digest.replace(":", "/", 1))

            manifests = read("index.json").get("manifests")
            if not isinstance(manifests, list) or len(manifests) != 1:
                raise ImageBuildError(f"{archive}: not one image in index.json: {manifests!r}")
            (desc,) = manifests
            manifest = blob(str(desc["digest"]))
            config_desc = manifest["config"]
            assert isinstance(config_desc, dict)
            config = blob(str(config_desc["digest"]))
    except (OSError, KeyError, ValueError, tarfile.TarError) as e:
        raise ImageBuildError(f"{archive}: not a readable OCI archive: {e!r}") from e
    inner = config.get("config")
    labels = (inner.get("Labels") if isinstance(inner, dict) else None) or {}
    annotations = desc.get("annotations") or {}
    return OciImage(
        ref=str(annotations.get("org.opencontainers.image.ref.name", "")),
        manifest=str(desc["digest"]),
        config=str(config_desc["digest"]),
        labels={str(k): str(v) for k, v in labels.items()},
    )


def _run(argv: Sequence[str], what: str) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=_build_environment())
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-25:]
        raise ImageBuildError(
            f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n" + "\n".join(tail)
        )
    return proc.stdout


def _build_environment() -> dict[str, str]:
    """This process's environment without proxy settings, so no build step sees them."""
    return {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}


def _digest(parts: Iterable[bytes | str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _tree_files(root: Path, patterns: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for pattern in patterns:
        files.extend(p for p in root.glob(pattern) if p.is_file() and "__pycache__" not in p.parts)
    return sorted(set(files))


class ImageBuilder:
    """Builds (or finds in the cache) the real tier's images. Needs root, buildah,
    mmdebstrap and gcc (``hack/realnode/ensure-packages.sh`` installs them)."""

    def __init__(self, cache_dir: Path, repo: Path = REPO) -> None:
        self.cache = cache_dir.resolve() / "images"
        self.repo = repo
        self.storage = cache_dir.resolve() / "buildah"

    def _buildah(self, *args: str, what: str, offline: bool = False) -> str:
        # offline: in a new, empty network namespace (only a loopback that is down), so
        # the build cannot reach anything; chroot isolation then has no network either.
        return _run(
            [
                *(["unshare", "--net", "--"] if offline else []),
                "buildah",
                "--root", str(self.storage / "root"),
                "--runroot", str(self.storage / "run"),
                "--storage-driver", "overlay",
                *args,
            ],
            what,
        )  # fmt: skip

    def _archive(self, name: str, key: str) -> Path:
        self.cache.mkdir(parents=True, exist_ok=True)
        return self.cache / f"{name}-{key}.tar"

    def _push(self, ref: str, archive: Path, transport: str) -> None:
        """Write image ``ref`` to ``archive`` (``docker-archive`` or ``oci-archive``), then
        empty buildah's storage: the archive is what is kept, buildah's own copies would
        only double the disk."""
        tmp = archive.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        self._buildah("push", ref, f"{transport}:{tmp}:{ref}", what=f"saving {ref}")
        tmp.rename(archive)
        self._buildah("rm", "--all", what="removing build containers")
        self._buildah("rmi", "--all", "--force", what="pruning buildah's storage")

    def _save(self, ref: str, archive: Path) -> None:
        self._push(ref, archive, "docker-archive")
        for old in self.cache.glob(archive.name.rsplit("-", 1)[0] + "-*.tar"):
            if old != archive:
                old.unlink(missing_ok=True)

    def _from_rootfs(self, ref: str, rootfs: Path, config: Sequence[str]) -> None:
        ctr = self._buildah("from", "scratch", what="buildah from scratch").strip()
        try:
            self._buildah("add", ctr, str(rootfs), "/", what=f"adding {rootfs.name}")
            self._buildah("config", *config, ctr, what=f"configuring {ref}")
            self._buildah("commit", "--rm", ctr, ref, what=f"committing {ref}")
        except ImageBuildError:
            self._buildah("rm", ctr, what="removing a failed container")
            raise

    def pause(self) -> Image:
        source = self.repo / "hack/realnode/pause.c"
        archive = self._archive("pause", _digest([RECIPE_VERSION, source.read_bytes()]))
        if not archive.exists():
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp) / "rootfs"
                root.mkdir()
                _run(
                    ["gcc", "-static", "-O2", "-s", "-o", str(root / "pause"), str(source)],
                    "compiling pause.c",
                )
                tar = Path(tmp) / "rootfs.tar"
                _run(["tar", "-C", str(root), "-cf", str(tar), "."], "packing pause")
                self._from_rootfs(PAUSE_IMAGE, tar, ["--entrypoint", '["/pause"]'])
            self._save(PAUSE_IMAGE, archive)
        return Image(PAUSE_IMAGE, archive)

    def python_base(self) -> Image:
        key = _digest([RECIPE_VERSION, DEBIAN_SUITE, *BASE_PACKAGES])
        archive = self._archive("python-base", key)
        if not archive.exists():
            with tempfile.TemporaryDirectory() as tmp:
                tar = Path(tmp) / "rootfs.tar"
                _run(
                    [
                        "mmdebstrap",
                        "--variant=minbase",
                        "--include=" + ",".join(BASE_PACKAGES),
                        "--aptopt=APT::Install-Recommends \"false\"",
                        "--dpkgopt=path-exclude=/usr/share/man/*",
                        "--dpkgopt=path-exclude=/usr/share/doc/*",
                        "--dpkgopt=path-exclude=/usr/share/locale/*",
                        # mmdebstrap copies the host's resolver and hostname in; an image
                        # must carry nothing of this machine.
                        # Like python:slim, pip may install into the system Python
                        # (Debian marks it externally managed, PEP 668).
                        "--customize-hook=rm -f \"$1\"/usr/lib/python3*/EXTERNALLY-MANAGED",
                        "--customize-hook=rm -f \"$1/etc/resolv.conf\" \"$1/etc/hostname\""
                        " \"$1\"/etc/apt/apt.conf.d/99mmdebstrap",
                        "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*",
                        DEBIAN_SUITE,
                        str(tar),
                        DEBIAN_MIRROR,
                    ],
                    "mmdebstrap of the Python base",
                )  # fmt: skip
                self._from_rootfs(
                    PYTHON_IMAGE,
                    tar,
                    [
                        "--env", f"PATH={IMAGE_PATH}",
                        "--env", "LANG=C.UTF-8",
                        "--cmd", '["python3"]',
                    ],
                )  # fmt: skip
            self._save(PYTHON_IMAGE, archive)
        return Image(PYTHON_IMAGE, archive)

    def wheelhouse(self) -> Path:
        """Wheels of msop's dependencies and its build backend, from the host's pip,
        keyed by pyproject.toml. msop's own wheel is left out: the Dockerfile builds it."""
        pyproject = (self.repo / "pyproject.toml").read_bytes()
        out = self.cache / f"wheelhouse-{_digest([RECIPE_VERSION, pyproject])}"
        if out.is_dir():
            return out
        tmp = out.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        _run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(tmp),
             str(self.repo), "setuptools>=68"],
            "filling the wheelhouse (pip wheel)",
        )  # fmt: skip
        for own in tmp.glob("msop-*.whl"):
            own.unlink()
        for old in self.cache.glob("wheelhouse-*"):
            if old != tmp:
                shutil.rmtree(old, ignore_errors=True)
        tmp.rename(out)
        return out

    def mindspore_wheelhouse(self) -> Path:
        """Wheels of ``examples/mindspore/requirements.txt``, from the host's pip, keyed by
        that file."""
        requirements = self.repo / "examples/mindspore/requirements.txt"
        out = (
            self.cache
            / f"mindspore-wheelhouse-{_digest([RECIPE_VERSION, requirements.read_bytes()])}"
        )
        if out.is_dir():
            return out
        tmp = out.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        _run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
             "--dest", str(tmp), "--requirement", str(requirements)],
            "filling the MindSpore wheelhouse (pip download)",
        )  # fmt: skip
        for old in self.cache.glob("mindspore-wheelhouse-*"):
            if old != tmp:
                shutil.rmtree(old, ignore_errors=True)
        tmp.rename(out)
        return out

    def mindspore(self, base: Image) -> Image:
        """MindSpore for CPU on the Python base, with msop's reporter: the image of the
        examples/mindspore job (its Dockerfile, built from the repository root)."""
        wheels = self.mindspore_wheelhouse()
        build = self.wheelhouse()  # setuptools, to build msop's wheel offline
        key = self.mindspore_key(base, wheels, build)
        ref = f"{MINDSPOREREPOSITORY}:e2e-{key}"
        archive = self._archive("mindspore", key)
        if not archive.exists():
            self._bud(base, [wheels, build], ref, self.repo / "examples/mindspore/Dockerfile",
                      self.repo, "MindSpore's Dockerfile")  # fmt: skip
            self._save(ref, archive)
        return Image(ref, archive)

    def mindspore_inputs(self) -> list[Path]:
        """The files the MindSpore image is built from: its Dockerfile and requirements,
        and msop's source (its wheel is installed); not ``train.py``, which the MSJob
        mounts from a ConfigMap."""
        example = self.repo / "examples/mindspore"
        return [
            example / "Dockerfile",
            example / "requirements.txt",
            self.repo / ".dockerignore",
            self.repo / "pyproject.toml",
            self.repo / "README.md",
            *_tree_files(self.repo, ["msop/**/*"]),
        ]

    def mindspore_key(self, base: Image, wheels: Path, build: Path) -> str:
        """The cache key of the MindSpore image: the recipe, the base, the wheelhouses and
        every file its build contributes, by name and content."""
        parts: list[bytes | str] = [RECIPE_VERSION, base.archive.name, wheels.name, build.name]
        for path in self.mindspore_inputs():
            parts += [str(path.relative_to(self.repo)), path.read_bytes()]
        return _digest(parts)

    def _bud(
        self, base: Image, wheels: list[Path], ref: str, dockerfile: Path, context: Path,
        what: str, labels: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        self._buildah("pull", f"docker-archive:{base.archive}", what="loading the base")
        mounts = [f"/wheelhouse{i or ''}" for i in range(len(wheels))]
        volumes = [arg for w, m in zip(wheels, mounts, strict=True)
                   for arg in ("--volume", f"{w}:{m}:ro")]  # fmt: skip
        label_args = [arg for k, v in (labels or {}).items() for arg in ("--label", f"{k}={v}")]
        self._buildah(
            "bud",
            "--isolation", "chroot",
            "--http-proxy=false",
            "--pull-never",
            "--layers=false",
            *volumes,
            *label_args,
            "--build-arg", "PIP_NO_INDEX=1",
            # pip splits a list option given in the environment at whitespace.
            "--build-arg", f"PIP_FIND_LINKS={' '.join(mounts)}",
            "--build-arg", f"PYTHON_IMAGE={base.ref}",
            "--tag", ref,
            "--file", str(dockerfile),
            str(context),
            what=f"buildah bud of {what}",
            offline=True,
        )  # fmt: skip

    def operator_inputs(self) -> list[Path]:
        """The files the Dockerfile's build context contributes (see .dockerignore)."""
        return [
            self.repo / "Dockerfile",
            self.repo / "pyproject.toml",
            self.repo / "README.md",
            *_tree_files(self.repo, ["msop/**/*"]),
        ]

    def operator_key(self, base: Image, wheels: Path) -> str:
        """The cache key of the operator image: the recipe, the base, the wheelhouse and
        every file of the build context, by name and content."""
        parts: list[bytes | str] = [RECIPE_VERSION, base.archive.name, wheels.name]
        for path in self.operator_inputs():
            parts += [str(path.relative_to(self.repo)), path.read_bytes()]
        return _digest(parts)

    def operator(self, base: Image) -> Image:
        wheels = self.wheelhouse()
        key = self.operator_key(base, wheels)
        ref = f"{OPERATORREPOSITORY}:e2e-{key}"
        archive = self._archive("operator", key)
        if not archive.exists():
            self._bud(base, [wheels], ref, self.repo / "Dockerfile", self.repo, "the Dockerfile")
            self._save(ref, archive)
        return Image(ref, archive)

    def release_operator(
        self, base: Image, ref: str, labels: Mapping[str, str], out: Path
    ) -> Image:
        """The operator image of a release: :meth:`operator`'s build (the Dockerfile as it
        is, offline, from the wheelhouse), tagged ``ref``, with ``labels`` (the OCI
        ``org.opencontainers.image.*``), written to ``out`` as an OCI archive. Not cached:
        a release builds it once."""
        wheels = self.wheelhouse()
        self._bud(base, [wheels], ref, self.repo / "Dockerfile", self.repo, "the Dockerfile",
                  labels=labels)  # fmt: skip
        self._push(ref, out, "oci-archive")
        return Image(ref, out)

    def relabel(self, source: Image, ref: str, labels: Mapping[str, str], out: Path) -> Image:
        """``source`` (an OCI archive, as :meth:`release_operator` writes) as another image:
        its layers, configuration and labels, with ``labels`` set over them, tagged ``ref``
        and written to ``out`` as an OCI archive. Its configuration differs, so it is a
        new image ID; it takes seconds, not a build. The real tier's upgrade test makes the
        next release of one build this way."""
        loaded = self._buildah("from", "--quiet", f"oci-archive:{source.archive}",
                               what=f"loading {source.archive}")  # fmt: skip
        ctr = loaded.strip().splitlines()[-1]
        try:
            label_args = [arg for k, v in labels.items() for arg in ("--label", f"{k}={v}")]
            self._buildah("config", *label_args, ctr, what=f"labelling {ref}")
            self._buildah("commit", "--rm", ctr, ref, what=f"committing {ref}")
        except ImageBuildError:
            self._buildah("rm", ctr, what="removing a failed container")
            raise
        out.parent.mkdir(parents=True, exist_ok=True)
        self._push(ref, out, "oci-archive")
        return Image(ref, out)


def main() -> int:
    """``python -m testbed.images``: build (or find in the cache) the real tier's four
    images, as the tier's set-up would; one line per image. ``make test`` runs it while the
    control plane compiles, so that the tier starts on images already made."""
    from testbed.paths import CACHE

    builder = ImageBuilder(CACHE)
    try:
        python = builder.python_base()
        made = [builder.pause(), python, builder.operator(python), builder.mindspore(python)]
    except ImageBuildError as e:
        print(f"testbed.images: {e}", file=sys.stderr)
        return 1
    for image in made:
        print(f"{image.ref} {image.archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
