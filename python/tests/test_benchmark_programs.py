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


def test_gpu_check_dequantizes_fp8_weights_like_the_cpu_reference():
    """The GPU check's reference (benchmarks/gpu/gpu_layers.py, run on a GPU
    machine) reads FP8 expert weights as moec's FP8 reference does: codes
    times their block's scale, partial blocks at the edges."""
    import importlib.util

    import numpy as np
    import torch

    from moec.weights import dequantize_fp8_blocks, quantize_fp8_blocks

    spec = importlib.util.spec_from_file_location("gpu_layers", ROOT / "benchmarks" / "gpu" / "gpu_layers.py")
    gpu_layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_layers)
    block = (128, 128)
    w = np.random.default_rng(0).standard_normal((2, 300, 260)).astype(np.float32)
    codes, scales = quantize_fp8_blocks(w, block)
    p = {"w13": torch.from_numpy(codes.view(np.uint8)).view(torch.float8_e4m3fn),
         "w13_scale": torch.from_numpy(scales), "block": list(block)}
    p["w2"], p["w2_scale"] = p["w13"], p["w13_scale"]
    want = dequantize_fp8_blocks(codes, scales, block)
    for expert in range(2):
        got = gpu_layers.expert_weight(p, "w13", expert, torch.float64).numpy()
        np.testing.assert_allclose(got, want[expert], rtol=1e-7, atol=0)
    peer = gpu_layers.dequantized(p, torch.bfloat16)
    assert set(peer) == {"w13", "w2"} and peer["w13"].dtype == torch.bfloat16
    # Rounded once to bf16: within half a unit in the last place.
    np.testing.assert_allclose(peer["w13"].double().numpy(), want, rtol=2 ** -8, atol=0)
