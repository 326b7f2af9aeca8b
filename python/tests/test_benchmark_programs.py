"""The CPU benchmark programs run end to end on a small case (their figures
are not checked: benchmarks are programs, not timed tests)."""
import os
import subprocess
import sys

from moec.toolchain import ROOT

BENCH = ROOT / "benchmarks" / "cpu"
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def run(*args):
    done = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=ONE_THREAD)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def test_bench_layers_prints_a_row_per_dtype_and_token_count():
    out = run(BENCH / "bench_layers.py", "--layers", "deepseek", "--dtypes", "bf16,fp8",
              "--tokens", "1,24", "--threads", "1", "--skip-torch", "--skip-ep",
              "--skip-routing", "--no-errors", "--max-seconds", "1")
    assert "failed" not in out
    rows = [line.split()[:2] for line in out.splitlines()
            if line.split()[:1] in (["bf16"], ["fp8"])]
    assert rows == [["bf16", "1"], ["bf16", "24"], ["fp8", "1"], ["fp8", "24"]], out


def test_compare_variants_runs_each_variant():
    out = run(BENCH / "compare_variants.py", "--layer", "deepseek", "--dtype", "fp8",
              "--tokens", "24", "--rounds", "1", "--variant=", "--variant=--bf16-dot=false")
    assert "(defaults)" in out and "--bf16-dot=false" in out, out
