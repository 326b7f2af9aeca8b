import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "emulation: runs generated GPU IR in the Python kernel emulator "
        "(test/Integration/GPU); the sanitizer tier leaves these out")


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory):
    """Identical compiles of moec.toolchain (the same config and options in
    several tests) run moe-compile once a session; MOE_COMPILE_CACHE= (empty)
    turns this off."""
    if "MOE_COMPILE_CACHE" not in os.environ:
        os.environ["MOE_COMPILE_CACHE"] = str(tmp_path_factory.mktemp("compile-cache"))
    yield
