"""FP8 rows in the all-gather exchange (`--ep-all-gather --dispatch-quant`).

The layer quantizes its own rows before the all-gather (QuantizeRows.cpp: on a
GPU the runtime cannot touch them) and dequantizes what it received. Checked
bit for bit against numpy + ml_dtypes (moec.fp8, written from
docs/FP8Dispatch.md), then as whole layers on 2 and 4 MPI ranks against the
float64 reference whose experts see the rows an FP8 dispatch delivers.
"""
import json

import ml_dtypes
import numpy as np
import pytest

from moec import fp8
from moec import main as main_job
from moec.memref import CompiledFunction
from moec.runtime import Runtime
from moec.toolchain import compile_config, compile_mlir

HIDDEN, SLOTS = 256, 16
SCHEMES = {"fp8_e4m3_g128": fp8.G128, "fp8_e4m3_g32_ue8m0": fp8.G32}
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}


def gather_source(scheme, dtype):
    """One rank's all-gather dispatch of up to SLOTS rows, returning the received rows."""
    x = f"tensor<?x{HIDDEN}x{dtype}>"
    rows = f"tensor<{SLOTS}x{HIDDEN}x{dtype}>"
    return f"""
func.func @gather(%x: {x}, %ids: tensor<?x1xi32>, %w: tensor<?x1xf32>, %er: tensor<2xi32>)
    -> ({rows}, tensor<{SLOTS}x1xi32>) attributes {{llvm.emit_c_interface}} {{
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = {SLOTS} ep = 1
      max_tokens = {SLOTS} slots = {SLOTS} quantization {scheme}
    : ({x}, tensor<?x1xi32>, tensor<?x1xf32>, tensor<2xi32>)
      -> ({rows}, tensor<{SLOTS}x1xi32>, tensor<{SLOTS}x1xf32>, i64)
  return %r, %li : {rows}, tensor<{SLOTS}x1xi32>
}}
"""


def every_code_and_tie():
    """Rows holding every finite E4M3 value, every midpoint between neighbours (the
    ties) and their negatives, with 448 opening each group of 32: every scale is 1."""
    codes = np.arange(0x7F, dtype=np.uint8).view(fp8.F8).astype(np.float32)
    ties = (codes[:-1] + codes[1:]) / 2
    pool = np.concatenate([codes, ties, -codes, -ties])
    per_group = 31
    groups = -(-pool.size // per_group)
    pool = np.resize(pool, groups * per_group).reshape(groups, per_group)
    rows = np.concatenate([np.full((groups, 1), 448, np.float32), pool], axis=1).reshape(-1)
    return np.resize(rows, (-(-rows.size // HIDDEN), HIDDEN))


def special_rows(rng):
    """Zeros, signed zeros, NaN, infinities, float32 subnormals, huge and tiny groups,
    and values spread over many binades (as test_fp8_quantize.py's)."""
    mantissa = rng.uniform(-1, 1, (8, HIDDEN))
    binade = rng.integers(-12, 7, (8, HIDDEN)) + np.repeat(
        rng.integers(-40, 41, (8, HIDDEN // 32)), 32, axis=1)
    x = np.ldexp(mantissa, binade).astype(np.float32)
    x[0, :128] = 0
    x[0, 5] = -0.0
    x[1, 3], x[1, 200], x[1, 201] = np.nan, np.inf, -np.inf
    x[2, :] = np.float32(1e-40)  # subnormal amax: the scale underflows to 0 (g128)
    x[3, :64] = np.float32(3e38)
    x[3, 64] = np.float32(-3.4e38)
    x[4, :] = rng.standard_normal(HIDDEN).astype(np.float32) * np.float32(1e-30)
    x[5, ::2] = -x[5, ::2]
    return x


@pytest.fixture(scope="module")
def local_runtime():
    return Runtime("local")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_layer_quantizes_like_ml_dtypes(tmp_path, local_runtime, scheme, dtype):
    library = compile_mlir(gather_source(scheme, dtype), tmp_path, f"gather_{scheme}_{dtype}",
                           extra=["--ep-into-buffers", "--ep-all-gather"])
    fn = CompiledFunction(library, "gather", [(2, DTYPES[dtype]), (2, np.int32)])
    rng = np.random.default_rng(7)
    batches = [every_code_and_tie(), special_rows(rng),
               (rng.standard_normal((SLOTS, HIDDEN)) * 3).astype(np.float32)]
    for x in batches:
        for start in range(0, x.shape[0], SLOTS):
            rows = x[start:start + SLOTS].astype(DTYPES[dtype])
            t = rows.shape[0]
            received, ids = fn(rows, np.zeros((t, 1), np.int32), np.ones((t, 1), np.float32),
                               np.zeros(2, np.int32))
            codes, _, scale = fp8.reference_quantize(SCHEMES[scheme], rows.astype(np.float32))
            expected = fp8.reference_dequantize(SCHEMES[scheme], codes, scale)
            expected = expected.astype(DTYPES[dtype]).astype(np.float32).reshape(t, HIDDEN)
            fp8.same_floats(received[:t].astype(np.float32), expected)
            assert np.all(received[t:].astype(np.float32) == 0)  # masked rows
            assert np.all(ids[:t] == 0) and np.all(ids[t:] == -1)


CONFIGS = {
    "qwen3": {"model_type": "qwen3_moe", "hidden_size": HIDDEN, "moe_intermediate_size": 32,
              "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": True},
    "deepseek": {"model_type": "deepseek_v3", "hidden_size": HIDDEN,
                 "moe_intermediate_size": 32, "intermediate_size": 64,
                 "n_routed_experts": 16, "num_experts_per_tok": 4, "n_group": 4,
                 "topk_group": 2, "n_shared_experts": 1, "routed_scaling_factor": 2.5,
                 "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                 "first_k_dense_replace": 0},
}


@pytest.mark.parametrize("quant", ["fp8-e4m3-g128", "fp8-e4m3-g32-ue8m0"])
@pytest.mark.parametrize("model,counts,dtype", [("qwen3", [4, 1], "f32"),
                                                ("deepseek", [4, 1, 0, 3], "f32"),
                                                ("deepseek", [4, 2], "bf16")])
def test_fp8_rows_in_the_all_gather_exchange(tmp_path, model, counts, dtype, quant):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIGS[model]))
    ranks, slots = len(counts), 4
    library, plan = compile_config(config, tmp_path, dtype, ep=ranks, max_tokens_per_rank=32,
                                   decode_max_tokens=slots, dispatch_quant=quant, fp8_gemm=False,
                                   ep_into_buffers=True, ep_all_gather=True)
    data = library.read_bytes()
    assert f"moert_ep_gather_fp8_into_{dtype}".encode() in data
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", ranks,
                                       counts[0], 5, "uniform", main_job.TOLERANCE[dtype],
                                       tmp_path, token_counts=counts, phase="decode",
                                       expert_rows_quantization=quant)
    assert done.returncode == 0, done.stderr
    assert len(results) == ranks and all(r["ok"] for r in results), results
    group = fp8.GROUP[fp8.SCHEMES[quant]]
    scale_bytes = HIDDEN // group * (4 if quant == "fp8-e4m3-g128" else 1)
    for r in results:
        collectives = r["counters"]["collectives"]
        assert set(collectives) == {"dispatch.payload", "dispatch.scales", "dispatch.ids",
                                    "dispatch.weights", "combine.payload"}, collectives
        # One byte per element and the group scales, for every rank's block of slots.
        assert collectives["dispatch.payload"]["bytes_received"] == (ranks - 1) * slots * HIDDEN
        assert collectives["dispatch.scales"]["bytes_received"] == \
            (ranks - 1) * slots * scale_bytes
        # The plan report's row: codes, scales, i32 ids and f32 weights, as measured.
        row = plan["phases"]["decode"]["dispatch_row_bytes"]
        assert row == HIDDEN + scale_bytes + 8 * plan["top_k"]
        received = sum(collectives[name]["bytes_received"] for name in
                       ("dispatch.payload", "dispatch.scales", "dispatch.ids", "dispatch.weights"))
        assert received == (ranks - 1) * slots * row


def test_the_reference_tells_fp8_rows_apart(tmp_path):
    """The exact FP8 reference is no looser than the plain one: the FP8 layer fails it
    without the quantization, at the f32 tolerance."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIGS["qwen3"]))
    library, _ = compile_config(config, tmp_path, ep=2, max_tokens_per_rank=32,
                                decode_max_tokens=4, dispatch_quant="fp8-e4m3-g128",
                                fp8_gemm=False, ep_into_buffers=True, ep_all_gather=True)
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 2, 4, 5,
                                       "uniform", main_job.TOLERANCE["f32"], tmp_path,
                                       token_counts=[4, 3], phase="decode")
    assert done.returncode != 0 and not any(r["ok"] for r in results)
