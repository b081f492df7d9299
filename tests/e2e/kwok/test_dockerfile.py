"""The Dockerfile, without a Docker engine: its build and install steps run for real.

The test reads the Dockerfile and replays it on the host: COPY from the build context
into a temporary directory, ENV and WORKDIR as written, and every RUN command through
``sh -c`` with the image's absolute paths (``/src``, ``/wheels``, ``/opt/msop``) mapped
into a temporary directory. So the wheel is built from only what the Dockerfile copies,
installed into a fresh venv with its dependencies resolved by pip, pip and setuptools
are removed as in the image, and the ENTRYPOINT runs from that venv. No cluster needed;
pip needs the package index (or its cache), as ``docker build`` would.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from testbed.paths import REPO

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_shape() -> None:
    ins = instructions()
    args = {k: v for k, v in (a.split("=", 1) for w, a in ins if w == "ARG" and "=" in a)}
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", base), f"base not pinned: {base}"
    froms = [a for w, a in ins if w == "FROM"]
    assert len(froms) == 2, "multi-stage: a build stage and a final stage"
    final = ins[[i for i, (w, _) in enumerate(ins) if w == "FROM"][-1] :]
    assert ("USER", "65532:65532") in final
    assert ("ENTRYPOINT", '["msop"]') in final
    assert ("CMD", '["run"]') in final
    # The final stage takes only the wheels from the build stage.
    copies = [a for w, a in final if w == "COPY"]
    assert copies and all(c.startswith("--from=build ") for c in copies)


def test_dockerfile_install_steps_in_a_fresh_venv(tmp_path: Path) -> None:
    root = tmp_path / "image"
    mapping = {"/src": root / "src", "/wheels": root / "wheels", "/opt/msop": root / "opt/msop"}

    def host(path: str) -> Path:
        for image_path, host_path in mapping.items():
            if path == image_path or path.startswith(image_path + "/"):
                return host_path / path[len(image_path) :].lstrip("/")
        raise AssertionError(f"the Dockerfile uses a path this test does not map: {path}")

    def rewrite(cmd: str) -> str:
        # Longest first, so /opt/msop/bin is not touched by a shorter prefix.
        for image_path in sorted(mapping, key=len, reverse=True):
            cmd = re.sub(rf"(?<![\w/]){re.escape(image_path)}(?=[/\s]|$)",
                         str(mapping[image_path]), cmd)  # fmt: skip
        return cmd

    # The base image's python and pip are this interpreter's.
    base_bin = Path(sys.executable).parent
    base_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))
    }
    base_env["PATH"] = f"{base_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(base_env)
    workdir = root
    ran = 0
    for word, arg in instructions():
        if word == "FROM":
            env, workdir = dict(base_env), root
        elif word == "WORKDIR":
            workdir = host(arg) if arg != "/tmp" else tmp_path
            workdir.mkdir(parents=True, exist_ok=True)
        elif word == "ENV":
            for k, v in (p.split("=", 1) for p in shlex.split(arg)):
                env[k] = rewrite(v.replace("$PATH", env["PATH"]))
        elif word == "COPY" and not arg.startswith("--from="):
            *sources, dest = shlex.split(arg)
            for s in sources:
                src = REPO / s
                # "COPY a b ./" copies into the directory; "COPY msop ./msop" names the target.
                target = workdir / dest / src.name if dest.endswith("/") else workdir / dest
                if src.is_dir():
                    shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(src, target)
        elif word == "RUN":
            proc = subprocess.run(
                ["sh", "-c", rewrite(arg)], cwd=workdir, env=env,
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert proc.returncode == 0, f"RUN {arg}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            ran += 1
    assert ran >= 2

    venv_bin = mapping["/opt/msop"] / "bin"
    assert not (mapping["/wheels"]).exists(), "the wheels are removed from the final image"
    assert not (venv_bin / "pip").exists(), "no pip (build tool) in the final image"
    # ENTRYPOINT ["msop"], found on the image's PATH.
    msop = shutil.which("msop", path=env["PATH"])
    assert msop == str(venv_bin / "msop")
    version = subprocess.run([msop, "version"], env=env, capture_output=True, text=True)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("msop ")
    # CMD ["run"]: the operator's whole import graph loads from the installed wheel.
    help_ = subprocess.run([msop, "run", "--help"], env=env, capture_output=True, text=True)
    assert help_.returncode == 0 and "--leader-elect" in help_.stdout, help_.stderr
    imports = subprocess.run(
        [str(venv_bin / "python"), "-c",
         "import msop.msjob.setup, msop.kube.client, msop.logs, msop.cli; "
         "import msop, sys; print(msop.__file__)"],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert imports.returncode == 0, imports.stderr
    assert imports.stdout.strip().startswith(str(mapping["/opt/msop"])), "msop from the wheel"
    # The image holds only what runs in production: the wheel installs the package msop
    # and its console script, and no test harness (testbed stays in the checkout).
    [record] = (mapping["/opt/msop"] / "lib").glob("python3*/site-packages/msop-*.dist-info/RECORD")
    installed = [line.split(",")[0] for line in record.read_text().splitlines() if line]
    top = {path.split("/")[0] for path in installed if not path.startswith("..")}
    assert {t for t in top if not t.endswith(".dist-info")} == {"msop"}, top
    subpackages = {p.split("/")[1] for p in installed if p.startswith("msop/") and p.count("/") > 1}
    assert "testing" not in subpackages and "harness" not in subpackages, sorted(subpackages)
    assert not [p for p in installed if "harness" in p or p.startswith(("tests/", "testbed/"))]
    harness = subprocess.run(
        [str(venv_bin / "python"), "-c", "import testbed"],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert harness.returncode != 0, "the harness must not be importable from the image"
