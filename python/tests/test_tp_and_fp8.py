"""moe-dedupe-tp-dispatch and moe-fuse-quant-dispatch end to end on MPI ranks."""
import json

import numpy as np
import pytest

from moec import main as main_job
from moec.toolchain import ROOT, compile_config

DEEPSEEK = ROOT / "examples" / "deepseek-v3-tiny" / "config.json"  # has a shared expert


def run(tmp_path, ranks, tp=1, dedupe=True, quant="none", tolerance=None, config=DEEPSEEK,
        tokens=12, dtype="f32", fp8_gemm=True):
    library, plan = compile_config(config, tmp_path, dtype, ep=ranks, tp=tp, tp_dedupe=dedupe,
                                   dispatch_quant=quant, max_tokens_per_rank=tokens + 3 * ranks,
                                   fp8_gemm=fp8_gemm)
    # With an FP8 dispatch the reference's experts see the rows it delivers (moec.fp8).
    results, done = main_job.run_ranks(
        library, tmp_path / f"{library.stem}.plan.json", ranks, tokens, 3, "uniform",
        tolerance or main_job.TOLERANCE[dtype], tmp_path, tp=tp,
        expert_rows_quantization=plan["wire_bytes_per_token"]["quantization"])
    assert done.returncode == 0, done.stderr
    assert all(r["ok"] for r in results), results
    return plan, sorted(results, key=lambda r: r["rank"])


def dispatched_bytes(results):
    return sum(r["counters"]["totals"]["dispatch_payload_bytes_sent"] for r in results)


@pytest.mark.parametrize("ranks,tp", [(2, 2), (4, 2), (4, 4)])
def test_tp_dedupe_halves_dispatch_and_keeps_outputs(tmp_path, ranks, tp):
    plan, deduped = run(tmp_path, ranks, tp=tp)
    assert plan["tensor_parallel"]["dedupe"] == "slice" and plan["tensor_parallel"]["tp"] == tp
    _, plain = run(tmp_path, ranks, tp=tp, dedupe=False)
    # Same tokens in each TP group, the same outputs (shared expert included) on every TP rank.
    for d, p in zip(deduped, plain):
        np.testing.assert_allclose(np.load(d["output_file"]), np.load(p["output_file"]),
                                   rtol=1e-5, atol=1e-6)
    group_outputs = [np.load(r["output_file"]) for r in deduped[:tp]]
    for y in group_outputs[1:]:
        np.testing.assert_array_equal(y, group_outputs[0])
    ratio = dispatched_bytes(deduped) / dispatched_bytes(plain)
    print(f"\nEP{ranks} TP{tp}: dispatched {dispatched_bytes(deduped)} B with dedupe vs "
          f"{dispatched_bytes(plain)} B without ({ratio:.3f}, ideal {1 / tp:.3f})")
    assert ratio <= 1 / tp + 0.15  # slices of ceil(T/tp) rows route slightly differently
    assert dispatched_bytes(deduped) < dispatched_bytes(plain)


def test_tp_one_leaves_the_layer_alone(tmp_path):
    plan, _ = run(tmp_path, 2, tp=1)
    assert plan["tensor_parallel"]["dedupe"] == "none"


@pytest.mark.parametrize("quant", ["fp8-e4m3-g128", "fp8-e4m3-g32-ue8m0"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_fp8_dispatch_bytes_and_error(tmp_path, quant, dtype):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 1024,
                                  "moe_intermediate_size": 32, "num_experts": 8,
                                  "num_experts_per_tok": 2, "norm_topk_prob": True}))
    plan, fp8 = run(tmp_path, 2, quant=quant, config=config, dtype=dtype)
    _, bf16 = run(tmp_path, 2, config=config, dtype="bf16")
    assert plan["wire_bytes_per_token"]["quantization"] == quant
    ratio = dispatched_bytes(fp8) / dispatched_bytes(bf16)
    errors = [r["max_rel"] for r in fp8]
    print(f"\n{quant} ({dtype} layer): dispatch bytes {dispatched_bytes(fp8)} vs bf16 "
          f"{dispatched_bytes(bf16)} = {ratio:.4f}x; layer max_rel {max(errors):.3e}")
    assert ratio <= 0.53


@pytest.mark.parametrize("ranks", [1, 4])
def test_fp8_dispatch_on_one_and_four_ranks(tmp_path, ranks):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 1024,
                                  "moe_intermediate_size": 32, "num_experts": 8,
                                  "num_experts_per_tok": 2, "norm_topk_prob": True}))
    quant = "fp8-e4m3-g32-ue8m0"
    plan, fp8 = run(tmp_path, ranks, quant=quant, config=config)
    if ranks == 1:  # nothing crosses a wire: the pass has nothing to quantize
        assert plan["wire_bytes_per_token"]["quantization"] == "none"
        assert fp8[0]["max_rel"] < 1e-5
        return
    _, bf16 = run(tmp_path, ranks, config=config, dtype="bf16")
    assert dispatched_bytes(fp8) / dispatched_bytes(bf16) <= 0.53


def test_tp_dedupe_on_one_rank_has_nothing_to_do(tmp_path):
    plan, results = run(tmp_path, 1, tp=1)
    assert plan["tensor_parallel"]["dedupe"] == "none" and results[0]["ok"]


@pytest.mark.parametrize("quant", ["fp8-e4m3-g128", "fp8-e4m3-g32-ue8m0"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_gemm_reading_fp8_codes_equals_dequantizing_on_receive(tmp_path, quant, ranks):
    """f32: e4m3(code) * scale, decoded once per row before the GEMM, is the
    value the runtime would have written (runtime/lib/Quantize.cpp, checked
    against ml_dtypes), and the same vectorized CPU GEMM reads both: the same
    bits."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 256,
                                  "moe_intermediate_size": 32, "num_experts": 8,
                                  "num_experts_per_tok": 2, "norm_topk_prob": True}))
    plan, codes = run(tmp_path, ranks, quant=quant, config=config)
    assert "FP8 E4M3 codes" in plan["wire_bytes_per_token"]["experts_receive"]
    _, dequantized = run(tmp_path, ranks, quant=quant, config=config, fp8_gemm=False)
    for c, d in zip(codes, dequantized):
        got, want = np.load(c["output_file"]), np.load(d["output_file"])
        np.testing.assert_array_equal(got, want)
        # the experts got H code bytes plus 4 bytes per group instead of 4 * H
        groups = 256 // (128 if quant == "fp8-e4m3-g128" else 32)
        rows = c["counters"]["high_water_bytes"]["expert.rows"] // (256 + 4 * groups)
        assert d["counters"]["high_water_bytes"]["expert.rows"] == rows * 256 * 4


def test_fp8_dispatch_with_top8_stays_within_053_of_bf16(tmp_path):
    """H = 1024, top-8: 6 route bytes per choice (int16 id, f32 weight) keep the ratio
    (1024 + 32 + 48) / (2048 + 48) = 0.5267."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 1024,
                                  "moe_intermediate_size": 16, "num_experts": 16,
                                  "num_experts_per_tok": 8, "norm_topk_prob": True}))
    _, fp8 = run(tmp_path, 2, quant="fp8-e4m3-g128", config=config)
    _, bf16 = run(tmp_path, 2, config=config, dtype="bf16")
    ratio = dispatched_bytes(fp8) / dispatched_bytes(bf16)
    print(f"\ntop-8, H=1024: dispatch bytes {dispatched_bytes(fp8)} vs bf16 "
          f"{dispatched_bytes(bf16)} = {ratio:.4f}x")
    assert ratio <= 0.53
    assert abs(ratio - 1104 / 2096) < 1e-9  # the same rows, FP8 and BF16 row sizes


@pytest.mark.parametrize("quant", ["none", "fp8-e4m3-g32-ue8m0"])
def test_fp8_expert_weights_on_expert_parallel_ranks(tmp_path, quant):
    """FP8 block-scaled expert weights (a DeepSeek-V3 quantization_config; the
    layer takes codes and w13_scale / w2_scale, each rank its experts'), with
    and without an FP8 dispatch: every rank's output matches the reference on
    the weights the codes stand for (moec.reference decodes with ml_dtypes)."""
    config = tmp_path / "config.json"
    text = json.loads(DEEPSEEK.read_text())
    text["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                   "weight_block_size": [8, 32]}
    config.write_text(json.dumps(text))
    plan, results = run(tmp_path, 2, quant=quant, config=config)
    assert plan["expert_weights"] == {"format": "fp8_e4m3", "block": [8, 32]}, plan
    names = [p["name"] for p in plan["entry_point"]["parameters"]]
    assert names[names.index("w2") + 1:names.index("w2") + 3] == ["w13_scale", "w2_scale"], names
    assert len(results) == 2
