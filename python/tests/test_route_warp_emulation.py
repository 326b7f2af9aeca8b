"""The GPU route kernel (RouteGPU.cpp's warp per token) executed on the CPU by
interpreting its IR, 32 lanes in lockstep, against the float64 routing
reference: test/Integration/GPU/route_warp_emulation.py."""
import subprocess
import sys

import pytest

from moec.toolchain import ROOT, build_dir


# Pure Python (the kernel emulator): not run in the sanitizer tier (utils/sanitize.sh).
pytestmark = pytest.mark.emulation


def test_route_kernel_emulated_on_warps_equals_the_reference():
    script = ROOT / "test" / "Integration" / "GPU" / "route_warp_emulation.py"
    done = subprocess.run([sys.executable, str(script), "--build", str(build_dir())],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "0 failing configs of 7" in done.stdout
