"""The release's wheel in a training image: ``pip install --no-deps`` of the wheel into a
fresh venv that holds nothing but the standard library (and pip), and the integrations a
training script uses run there: the progress reporter, the MindSpore callback (on a
stand-in ``mindspore``), the msrun launcher (on the stand-in msrun of ``msrun_fakes/``),
and the keeper, the part of a restart in place that runs the training command with the
training image's Python. A module of theirs that imports a third-party package fails
here: nothing but msop is installed.

The restart agent's sidecar is not among them: it runs from the operator's image, which
has ``cryptography`` for its signatures (``test_imports.py``).

The wheel is built as the Dockerfile builds it (``pip wheel --no-deps``), offline and from
a copy of the sources, so the checkout gets no ``build/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.paths import REPO

FAKES = Path(__file__).resolve().parent / "msrun_fakes"

#: What a training script does with msop: run in the venv, it prints what it saw.
TRAINING = textwrap.dedent(
    """
    import json, sys, urllib.request
    before = set(sys.modules)
    import msop.integrations, msop.integrations.keeper, msop.integrations.mindspore
    import msop.integrations.msrun, msop.integrations.podhttp, msop.integrations.reporter
    import msop.integrations.wire
    from msop.integrations import Reporter
    new = {m.split(".")[0] for m in set(sys.modules) - before}
    third_party = sorted(m for m in new - {"msop"} if m not in sys.stdlib_module_names)

    # Served on loopback only here (in a pod: every address of the pod).
    files = sys.argv[1:]
    env = {"MSOP_PROGRESS_PORT": "0", "MSOP_POD_NAME": "j-worker-0", "MSOP_POD_UID": "u"}
    reporter = Reporter(total_steps=4, env={**env, "MSOP_PROGRESS_FILE": files[0]},
                        host="127.0.0.1")
    reporter.update(step=1, epoch=1, metrics={"loss": 0.5}, force=True)
    url = f"http://127.0.0.1:{reporter.port}/progress"
    served = json.load(urllib.request.urlopen(url, timeout=10))
    reporter.finish()

    from msop.integrations.mindspore import ProgressReporter

    class Params(dict):
        __getattr__ = dict.__getitem__

    class Context:
        def __init__(self, params):
            self.params = params

        def original_args(self):
            return self.params

    params = Params(cur_step_num=0, cur_epoch_num=1, epoch_num=1, batch_num=2, mode="train",
                    dataset_sink_mode=False, net_outputs=0.25)
    own = Reporter(env={**env, "MSOP_PROGRESS_FILE": files[1]}, min_interval=0, host="127.0.0.1")
    callback = ProgressReporter(own)
    context = Context(params)
    callback.on_train_begin(context)
    callback.on_train_epoch_begin(context)
    for step in (1, 2):
        params["cur_step_num"] = step
        callback.on_train_step_begin(context)
        callback.on_train_step_end(context)
    callback.on_train_epoch_end(context)
    callback.on_train_end(context)
    print(json.dumps({"msop": sys.modules["msop"].__file__, "third_party": third_party,
                      "served": served}))
    """
)

#: The stand-in for MindSpore's ``mindspore.train.Callback``.
MINDSPORE_TRAIN = textwrap.dedent(
    """
    class Callback:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def _nothing(self, run_context):
            return None

        on_train_begin = on_train_epoch_begin = on_train_step_begin = _nothing
        on_train_step_end = on_train_epoch_end = on_train_end = _nothing
        on_eval_begin = on_eval_end = _nothing
    """
)


@pytest.fixture(scope="module")
def training_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A venv with only the standard library, pip and the release's wheel (``--no-deps``):
    its python."""
    tmp = tmp_path_factory.mktemp("image")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "msop", src / "msop", ignore=shutil.ignore_patterns("__pycache__"))
    offline = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp / "dist"), str(src)],
        check=True, capture_output=True, env=offline, timeout=300,
    )  # fmt: skip
    (wheel,) = (tmp / "dist").glob("msop-*-py3-none-any.whl")
    venv.EnvBuilder(with_pip=True).create(tmp / "venv")
    python = tmp / "venv" / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", str(wheel)],
        check=True, capture_output=True, env=offline, timeout=300,
    )  # fmt: skip
    yield python


def _run(python: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python args`` as in a training container: the venv's packages and ``env``, not
    this checkout (nor any PYTHON* setting of the test run)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "MSOP_", "MS_"))}
    return subprocess.run(
        [str(python), *args], cwd=cwd, env={**clean, **env}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_the_venv_holds_no_package_of_the_operator(training_image: Path) -> None:
    listed = _run(training_image, "-m", "pip", "list", "--format=json", cwd=training_image.parent)
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "msop" in names
    assert names - {"msop", "pip", "setuptools"} == set(), names


def test_the_reporter_and_the_mindspore_callback_run_on_the_standard_library(
    training_image: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "fake"
    (fake / "mindspore" / "train").mkdir(parents=True)
    (fake / "mindspore" / "__init__.py").write_text("")
    (fake / "mindspore" / "train" / "__init__.py").write_text(MINDSPORE_TRAIN)
    script = tmp_path / "train.py"
    script.write_text(TRAINING)
    finals = [tmp_path / "reporter-final", tmp_path / "callback-final"]
    done = _run(training_image, str(script), *map(str, finals), cwd=tmp_path,
                PYTHONPATH=str(fake))  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert Path(seen["msop"]).is_relative_to(training_image.parent.parent)  # the wheel's
    assert seen["third_party"] == []
    assert (seen["served"]["step"], seen["served"]["totalSteps"]) == (1, 4)
    reported = json.loads(finals[0].read_text())
    assert reported["final"] is True and reported["metrics"] == [{"name": "loss", "value": "0.5"}]
    trained = json.loads(finals[1].read_text())
    assert (trained["final"], trained["step"], trained["epoch"]) == (True, 2, 1)


def test_the_msrun_launcher_runs_on_the_standard_library(
    training_image: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = _run(
        training_image, "-m", "msop.integrations.msrun", str(FAKES / "script.py"), cwd=tmp_path,
        MS_WORKER_NUM="2", MS_LOCAL_WORKER="2", MS_NODE_RANK="0", MS_SCHED_HOST="127.0.0.1",
        MS_SCHED_PORT="8118", MSOP_MSRUN=f"{training_image} {FAKES / 'fake_msrun.py'}",
        MSOP_TERMINATION_FILE=str(tmp_path / "termination-log"), MSOP_MSRUN_GRACE="5",
        OUT=str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert {f.name for f in out.glob("*.done")} == {
        "MS_SCHED-0.done", "MS_WORKER-0.done", "MS_WORKER-1.done",
    }  # fmt: skip


def test_the_keeper_runs_a_training_command_on_the_standard_library(
    training_image: Path, tmp_path: Path
) -> None:
    find = "import msop.integrations.keeper as k; print(k.__file__)"
    keeper = _run(training_image, "-c", find, cwd=tmp_path).stdout.strip()
    assert Path(keeper).is_relative_to(training_image.parent.parent)  # the wheel's
    kept = tmp_path / "kept"
    kept.mkdir()
    done = _run(training_image, keeper, str(kept), "mindspore", "--", str(training_image),
                "-c", "print('epoch 1'); raise SystemExit(3)", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert done.stdout == "epoch 1\n"
    assert (kept / "run.log").read_text() == "epoch 1\n"
