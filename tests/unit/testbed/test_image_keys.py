"""The real tier's operator and MindSpore images are rebuilt exactly when their build
contexts change."""

from __future__ import annotations

from pathlib import Path

from testbed.images import Image, ImageBuilder


def make_repo(root: Path) -> Path:
    for name, text in {
        "Dockerfile": "FROM base\n",
        "pyproject.toml": "[project]\nname = 'msop'\n",
        "README.md": "# msop\n",
        "msop/__init__.py": "",
        "msop/kube/client.py": "x = 1\n",
        "tests/unit/test_x.py": "def test(): pass\n",
        "hack/demo.py": "print()\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_operator_key_follows_the_build_context(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    builder = ImageBuilder(tmp_path / "cache", repo)
    base = Image("python:x", tmp_path / "python-base-1.tar")
    wheels = tmp_path / "wheelhouse-1"

    def key() -> str:
        return builder.operator_key(base, wheels)

    first = key()
    assert key() == first
    # Outside the build context (.dockerignore keeps only pyproject, README, msop/).
    (repo / "tests/unit/test_x.py").write_text("def test(): assert True\n")
    (repo / "hack/demo.py").write_text("print('x')\n")
    assert key() == first
    for changed in ("msop/kube/client.py", "Dockerfile", "pyproject.toml", "README.md"):
        (repo / changed).write_text((repo / changed).read_text() + "\n# changed\n")
        assert key() != first, changed
        first = key()
    (repo / "msop/new.py").write_text("")
    assert key() != first
    # A different base or wheelhouse is a different image.
    assert builder.operator_key(Image("python:x", tmp_path / "python-base-2.tar"), wheels) != key()
    assert builder.operator_key(base, tmp_path / "wheelhouse-2") != key()


def test_mindspore_key_follows_its_build_inputs_and_msop_not_the_script(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    example = repo / "examples/mindspore"
    (example / "script").mkdir(parents=True)
    (repo / "msop/integrations").mkdir(parents=True)
    for name, text in {
        "examples/mindspore/Dockerfile": "FROM base\n",
        "examples/mindspore/requirements.txt": "mindspore==2.10.0\n",
        "examples/mindspore/script/train.py": "print()\n",
        "examples/mindspore/msjob.yaml": "kind: MSJob\n",
        ".dockerignore": "*\n",
        "Dockerfile": "FROM operator\n",
        "pyproject.toml": "[project]\n",
        "README.md": "# msop\n",
        "msop/__init__.py": "",
        "msop/integrations/reporter.py": "",
    }.items():
        (repo / name).write_text(text)
    builder = ImageBuilder(tmp_path / "cache", repo)
    base = Image("python:x", tmp_path / "python-base-1.tar")
    wheels = tmp_path / "mindspore-wheelhouse-1"
    build = tmp_path / "wheelhouse-1"

    def key() -> str:
        return builder.mindspore_key(base, wheels, build)

    first = key()
    # Mounted or applied, not built in; the operator's Dockerfile is another image's.
    for outside in (
        "examples/mindspore/script/train.py",
        "examples/mindspore/msjob.yaml",
        "Dockerfile",
    ):
        (repo / outside).write_text("changed\n")
        assert key() == first, outside
    built_in = ("examples/mindspore/Dockerfile", "examples/mindspore/requirements.txt",
                ".dockerignore", "pyproject.toml", "msop/integrations/reporter.py")  # fmt: skip
    for changed in built_in:
        (repo / changed).write_text((repo / changed).read_text() + "# changed\n")
        assert key() != first, changed
        first = key()
    assert builder.mindspore_key(base, tmp_path / "mindspore-wheelhouse-2", build) != key()
    assert builder.mindspore_key(base, wheels, tmp_path / "wheelhouse-2") != key()
    other_base = Image("python:x", tmp_path / "python-base-2.tar")
    assert builder.mindspore_key(other_base, wheels, build) != key()
