"""The training SDK is a distribution of its own (sdk/, `heterojob-sdk`) that a training image installs alone:
no dependency, standard library imports only, the protocol's names as the operator's, and `pip install` of it
in a clean virtualenv brings nothing else; examples/train_numpy.py runs there (numpy lent from this env)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import heterojob_sdk
from heterojob import constants

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk"


def test_the_sdk_declares_no_dependency() -> None:
    project = tomllib.loads((SDK / "pyproject.toml").read_text())["project"]
    assert project["name"] == "heterojob-sdk" and project["dependencies"] == []
    assert not project.get("optional-dependencies")


def test_the_sdk_imports_the_standard_library_only() -> None:
    for path in sorted((SDK / "heterojob_sdk").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("heterojob_sdk", "__future__"), (path.name, name)


def test_the_sdk_speaks_the_operators_protocol() -> None:
    for name in ("ANNOTATION_CHECKPOINT_REQUEST", "ANNOTATION_CHECKPOINT_ACK", "ANNOTATION_CHECKPOINT_SAVE_TIME", "CHECKPOINT_SIZE_MAX",
                 "EVICTED_BY_EVICTION_API", "METRICS_PORT_NAME", "METRICS_PORT_ENV"):
        assert getattr(heterojob_sdk, name) == getattr(constants, name), name
    from heterojob import sdk  # the operator package's name for it: the same objects, no second copy
    assert sdk.Checkpointer is heterojob_sdk.Checkpointer


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean virtualenv with the SDK installed from its wheel, offline (`pip install --no-index`). The wheel is
    built as `pip install ./sdk` builds it (its build backend, setuptools, from the index pip is set up with, as
    for heterojob itself)."""
    where = tmp_path_factory.mktemp("sdk")
    source = shutil.copytree(SDK, where / "source", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(where / "wheels"),
                    str(source)], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True, capture_output=True)
    python = where / "venv" / "bin" / "python"
    [wheel] = (where / "wheels").glob("heterojob_sdk-*.whl")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", str(wheel)], check=True,
                   capture_output=True, env=clean_env(PIP_DISABLE_PIP_VERSION_CHECK="1"))
    return where


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "KUBERNETES_"))}
    return {**env, **extra}


def test_pip_install_of_the_sdk_brings_nothing_else(venv: Path) -> None:
    python = venv / "venv" / "bin" / "python"
    listed = subprocess.run([python, "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True,
                            text=True, env=clean_env()).stdout.split()
    assert {line.split("==")[0].lower() for line in listed} - {"pip", "setuptools", "wheel"} == {"heterojob-sdk"}
    probe = ("import sys, heterojob_sdk; from heterojob_sdk import Checkpointer; "
             "print(sorted(m for m in ('heterojob', 'kubernetes', 'urllib3', 'yaml') if m in sys.modules))")
    assert subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True,
                          env=clean_env()).stdout.strip() == "[]"
    for absent in ("heterojob", "kubernetes"):
        assert subprocess.run([python, "-c", f"import {absent}"], capture_output=True, env=clean_env()).returncode


def test_the_numpy_example_runs_with_the_sdk_alone(venv: Path) -> None:
    """examples/train_numpy.py in the clean env: a checkpoint is asked for (downward-API file) and saved; there is
    no API server to acknowledge it, which is logged, and training runs to the end."""
    import numpy

    lent = venv / "numpy-only"  # numpy and nothing else of this environment
    lent.mkdir(exist_ok=True)
    site = Path(numpy.__file__).parents[1]
    for name in ("numpy", "numpy.libs"):
        if (site / name).exists() and not (lent / name).exists():
            (lent / name).symlink_to(site / name)
    podinfo = venv / "podinfo"
    podinfo.mkdir(exist_ok=True)
    (podinfo / "annotations").write_text('heterojob.io/checkpoint-request="g1-1"\n')
    done = subprocess.run(
        [venv / "venv" / "bin" / "python", ROOT / "examples" / "train_numpy.py", "--steps", "40",
         "--step-seconds", "0"], capture_output=True, text=True, timeout=120, cwd=venv,
        env=clean_env(PYTHONPATH=str(lent), HETEROJOB_PODINFO=str(podinfo), HETEROJOB_POD_NAME="j-g1-0",
                      HETEROJOB_CHECKPOINT_DIR=f"file://{venv}/ckpt/j"))
    assert done.returncode == 0, done.stderr
    assert "done at step 40" in done.stdout
    assert (venv / "ckpt" / "j" / "g1-1" / "state.npz").exists()
    assert "could not acknowledge checkpoint g1-1" in done.stderr and "KUBERNETES_SERVICE_HOST" in done.stderr
