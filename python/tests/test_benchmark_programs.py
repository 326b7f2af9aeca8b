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


def load_gpu_check():
    """benchmarks/gpu/gpu_layers.py as a module (it needs torch, not a GPU,
    to be imported)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_layers", ROOT / "benchmarks" / "gpu" / "gpu_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_dequantizes_fp8_weights_like_the_cpu_reference():
    """The GPU check's reference (benchmarks/gpu/gpu_layers.py, run on a GPU
    machine) reads FP8 expert weights as moec's FP8 reference does: codes
    times their block's scale, partial blocks at the edges."""
    import numpy as np
    import torch

    from moec.weights import dequantize_fp8_blocks, quantize_fp8_blocks

    gpu_layers = load_gpu_check()
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


def test_gpu_check_reference_matches_the_layer_reference_on_fp8_weights(tmp_path):
    """The GPU check's float64 reference (routing with groups and correction
    bias, FP8 experts, shared expert), run here on the CPU, equals moec's
    reference layer (itself checked against transformers) on a DeepSeek-V3
    layer with FP8 expert weights."""
    import json

    import ml_dtypes
    import numpy as np
    import torch

    from moec import reference
    from moec.toolchain import compile_config
    from moec.weights import make_inputs

    gpu_layers = load_gpu_check()
    config = json.loads((ROOT / "examples" / "deepseek-v3-tiny" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [8, 16]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    _, plan = compile_config(tmp_path / "config.json", tmp_path, dtype="bf16")
    assert plan["expert_weights"] == {"block": [8, 16], "format": "fp8_e4m3"}
    x, weights = make_inputs(plan, 37, seed=3)

    def to_torch(a):
        if a.dtype == ml_dtypes.float8_e4m3fn:
            return torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn)
        return torch.from_numpy(np.asarray(a, np.float32))

    p = {name: to_torch(a) for name, a in weights.items()}
    p["block"] = plan["expert_weights"]["block"]
    got, _, _ = gpu_layers.reference(torch.from_numpy(np.asarray(x, np.float32)), p, plan)
    want = reference.layer(x, weights, plan)
    # moec's reference multiplies codes by scales in f32 (a rounding of 6e-8
    # per weight); the GPU check's in float64.
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-6 * np.abs(want).max())


def test_gpu_check_tokens_asked_override_the_manifest_up_to_max_tokens(capsys):
    """--tokens picks the token counts to check (a sweep's manifest lists
    only 4096); counts above the library's max_tokens are skipped aloud."""
    gpu_layers = load_gpu_check()
    entry = {"name": "layer", "tokens": [4096]}
    plan = {"gpu": {"max_tokens": 64}}
    assert gpu_layers.tokens_to_run(entry, plan, []) == [4096]
    assert gpu_layers.tokens_to_run(entry, plan, [1, 64, 65]) == [1, 64]
    assert "T=65 skipped" in capsys.readouterr().out
    assert gpu_layers.tokens_to_run(entry, {}, [7]) == [7]


def test_gpu_check_fp8_rows_reference_quantizes_like_the_runtime():
    """The GPU check's stand-in for --gpu-fp8-rows (rows rounded to bf16,
    then g128 E4M3 codes times amax / 448) gives what libmoert's g128 row
    quantization (written apart, in C) dequantizes to, zero groups
    included; and it applies only where the prefill form runs."""
    import ctypes

    import numpy as np
    import torch

    from moec.toolchain import build_dir

    gpu_layers = load_gpu_check()
    rows = torch.randn(5, 512, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    rows[1] *= 1e-3
    rows[2, 128:256] = 0
    rows[3, :64] *= 1e4  # one large element group
    got = gpu_layers.fp8_rows(rows)
    assert got.dtype == torch.float64 and torch.equal(got[2, 128:256], torch.zeros(128, dtype=torch.float64))

    lib = ctypes.CDLL(str(build_dir() / "lib" / "libmoert.so"))
    for r in range(rows.shape[0]):
        x = rows[r].to(torch.bfloat16).float().numpy()
        codes = np.zeros(x.size, np.uint8)
        scales = np.zeros(x.size // 128, np.float32)
        out = np.zeros(x.size, np.float32)
        assert lib.moert_quantize_row(1, x.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size),
                                      codes.ctypes.data_as(ctypes.c_void_p),
                                      scales.ctypes.data_as(ctypes.c_void_p)) == 0
        assert lib.moert_dequantize_row(1, codes.ctypes.data_as(ctypes.c_void_p),
                                        scales.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size),
                                        out.ctypes.data_as(ctypes.c_void_p)) == 0
        np.testing.assert_array_equal(got[r].float().numpy(), out)

    plan = {"top_k": 8, "experts": 256, "gpu": {"prefill_gemm": {"fp8_rows": True}}}
    assert not gpu_layers.quantizes_rows(plan, 64) and gpu_layers.quantizes_rows(plan, 4096)
    assert not gpu_layers.quantizes_rows({**plan, "gpu": {}}, 4096)
