"""`pip install ./python` gives an importable moec that loads a compiled model."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]


def _has_setuptools():
    try:
        import setuptools  # noqa: F401
        return True
    except ImportError:
        return False


def test_pip_install_then_load(tmp_path):
    target = tmp_path / "site"
    # Built from a copy: setuptools writes its metadata (*.egg-info) next to
    # the sources it builds.
    source = tmp_path / "python"
    shutil.copytree(PYTHON_DIR, source, ignore=shutil.ignore_patterns(
        "tests", "__pycache__", "*.egg-info", "build"))
    # Without build isolation where setuptools is here: no download needed.
    isolation = ["--no-build-isolation"] if _has_setuptools() else []
    run = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          *isolation, "--target", str(target), str(source)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (target / "moec" / "model.py").is_file()
    # A clean interpreter that sees only the installed copy (cwd elsewhere).
    script = (
        "import sys, moec, numpy as np\n"
        "assert moec.__file__.startswith(sys.argv[1]), moec.__file__\n"
        "print(moec.load.__module__)\n")
    env = dict(os.environ, PYTHONPATH=str(target))
    run = subprocess.run([sys.executable, "-c", script, str(target)], cwd=tmp_path,
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "moec.model"


def test_load_names_what_is_wrong(tmp_path):
    import moec
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        moec.load(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="format"):
        moec.load(tmp_path)
    np.zeros(1)  # numpy is a dependency of the package
