"""moe.route on the CPU (top-k by selection) against the rank-based linalg
lowering and the float64 numpy reference: test/Integration/CPU/route_differential.py."""
import subprocess
import sys

from moec.toolchain import ROOT, build_dir


def test_route_by_selection_equals_the_rank_lowering_and_the_reference():
    script = ROOT / "test" / "Integration" / "CPU" / "route_differential.py"
    done = subprocess.run([sys.executable, str(script), "--build", str(build_dir())],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert " 0 failures" in done.stdout
