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


# The all-gather exchange with a placement: each choice's replica, chosen by the layer.
PLACED_SLOTS = 6
PHYS_TO_LOG = np.array([0, 1, 2, 3, 0, 0], np.int32)  # expert 0 on three slots
SHARE = np.array([0.25, 1, 1, 1, 0.5, 0.25], np.float32)


def placed_source():
    x = f"tensor<?x{HIDDEN}xf32>"
    return f"""
func.func @gather(%x: {x}, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                  %p: tensor<{PLACED_SLOTS}xi32>, %s: tensor<{PLACED_SLOTS}xf32>)
    -> (tensor<{SLOTS}x2xi32>, tensor<{SLOTS}x2xf32>) attributes {{llvm.emit_c_interface}} {{
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) capacity = {SLOTS} ep = 1
      max_tokens = {SLOTS} slots = {SLOTS}
    : ({x}, tensor<?x2xi32>, tensor<?x2xf32>, tensor<{PLACED_SLOTS}xi32>,
       tensor<{PLACED_SLOTS}xf32>)
      -> (tensor<{SLOTS}x{HIDDEN}xf32>, tensor<{SLOTS}x2xi32>, tensor<{SLOTS}x2xf32>, i64)
  return %li, %lw : tensor<{SLOTS}x2xi32>, tensor<{SLOTS}x2xf32>
}}
"""


def replica_of(expert, n):
    """The documented rule (docs/Runtime.md), in float32 as the layer computes it."""
    u = np.float32(((n * 0x9E3779B9) & 0xFFFFFFFF) >> 8) * np.float32(2.0 ** -24)
    shares = np.where(PHYS_TO_LOG == expert, SHARE, np.float32(0))
    total, running, last = np.float32(0), np.float32(0), -1
    for s in shares:
        total = np.float32(total + s)
    for slot, s in enumerate(shares):
        running = np.float32(running + s)
        if s > 0:
            last = slot
            if u < np.float32(running / total):
                return slot
    return last


def test_the_layer_chooses_replicas_by_their_shares(tmp_path, local_runtime):
    library = compile_mlir(placed_source(), tmp_path, "gather_placed",
                           extra=["--ep-into-buffers", "--ep-all-gather"])
    fn = CompiledFunction(library, "gather", [(2, np.int32), (2, np.float32)])
    rng = np.random.default_rng(3)
    chosen = []
    for _ in range(64):
        ids = rng.integers(0, 4, (SLOTS, 2)).astype(np.int32)
        ids[:, 1] = np.where(ids[:, 1] == ids[:, 0], -1, ids[:, 1])  # some choices empty
        weights = rng.uniform(0.1, 1, (SLOTS, 2)).astype(np.float32)
        local, local_weights = fn(np.zeros((SLOTS, HIDDEN), np.float32), ids, weights,
                                  PHYS_TO_LOG, SHARE)
        for t in range(SLOTS):
            for j in range(2):
                if ids[t, j] < 0:
                    assert local[t, j] == -1 and local_weights[t, j] == 0
                    continue
                want = replica_of(ids[t, j], t * 2 + j)
                assert local[t, j] == want and local_weights[t, j] == weights[t, j]
                if ids[t, j] == 0:
                    chosen.append(want)
    # Expert 0's choices follow its shares (0.25 / 0.5 / 0.25 of 1) on slots 0, 4, 5.
    counts = np.bincount(chosen, minlength=PLACED_SLOTS)[[0, 4, 5]] / len(chosen)
    assert np.allclose(counts, [0.25, 0.5, 0.25], atol=0.06), counts


@pytest.mark.parametrize("quant,codes", [("none", False), ("fp8-e4m3-g32-ue8m0", False),
                                         ("fp8-e4m3-g32-ue8m0", True), ("fp8-e4m3-g128", True)])
def test_a_placement_in_the_all_gather_exchange(tmp_path, quant, codes):
    """ep 2, 8 experts on 10 slots (experts 0 and 1 twice): every rank's output as
    the reference's, whichever replica each choice went to; with FP8 rows dequantized
    on receipt or (codes) read by the gate/up GEMM as they came."""
    config = tmp_path / "config.json"
    hidden = 128 if quant == "fp8-e4m3-g128" else 64  # whole groups
    config.write_text(json.dumps({**CONFIGS["qwen3"], "hidden_size": hidden}))
    library, plan = compile_config(config, tmp_path, ep=2, max_tokens_per_rank=32,
                                   decode_max_tokens=4, physical_experts=10,
                                   dispatch_quant=quant, fp8_gemm=quant == "none" or codes,
                                   ep_into_buffers=True, ep_all_gather=True)
    assert (f"moert_ep_gather_placed_{'fp8_' if quant != 'none' else ''}into_f32".encode()
            in library.read_bytes())
    placement = tmp_path / "placement.json"
    placement.write_text(json.dumps({"layers": [{
        "phy2log": [0, 1, 2, 3, 4, 5, 6, 7, 0, 1], "share": [0.5, 0.3, 1, 1, 1, 1, 1, 1, 0.5, 0.7]}]}))
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 2, 4, 7,
                                       "uniform", main_job.TOLERANCE["f32"], tmp_path,
                                       token_counts=[4, 3], phase="decode", placement=placement,
                                       expert_rows_quantization=quant)
    assert done.returncode == 0, done.stderr
    assert len(results) == 2 and all(r["ok"] for r in results), results
