"""The expert-parallel exchange into static buffers (the GPU's form), on host memory.

`moe-compile --ep-into-buffers` builds a CPU layer the way `--target cuda`
builds every expert-parallel layer: the received rows are static (the
capacity, or ranks x slots in decode), the layer allocates them, and the
runtime's `moert_ep_dispatch_into_*` / `moert_ep_combine_into_*` fill them
(masked past the received rows). Every rank must match the numpy reference.
"""
import json

import pytest

from moec import main as main_job
from moec.toolchain import ROOT, compile_config

EXAMPLES = sorted((ROOT / "examples").glob("*/config.json"))


def calls_into_entries(library):
    data = library.read_bytes()
    return b"moert_ep_dispatch_into_" in data and b"moert_ep_combine_into_" in data \
        and b"moert_ep_dispatch_f32" not in data and b"moert_ep_dispatch_bf16" not in data


def check(results, done, ranks):
    assert done.returncode == 0, done.stderr
    assert len(results) == ranks
    for r in results:
        assert r["ok"], r


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
@pytest.mark.parametrize("ranks,scenario", [(2, "uniform"), (4, "uniform"), (4, "empty-rank"),
                                            (2, "one-rank")])
def test_every_rank_matches_the_reference(tmp_path, config, ranks, scenario):
    library, _ = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=12 + 3 * ranks,
                                ep_into_buffers=True)
    assert calls_into_entries(library)
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", ranks,
                                       12, 5, scenario, main_job.TOLERANCE["f32"], tmp_path)
    check(results, done, ranks)
    if scenario == "empty-rank":
        assert results[0]["tokens"] == 0


def test_bf16_on_two_ranks(tmp_path):
    config = ROOT / "examples" / "deepseek-v3-tiny" / "config.json"
    library, _ = compile_config(config, tmp_path, "bf16", ep=2, max_tokens_per_rank=18,
                                ep_into_buffers=True)
    assert calls_into_entries(library)
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 2, 12,
                                       5, "uniform", main_job.TOLERANCE["bf16"], tmp_path)
    check(results, done, 2)


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_decode_and_prefill_variants(tmp_path, ranks, phase):
    """Decode receives ranks x slots rows (no counts travel), prefill the capacity."""
    config = ROOT / "examples" / "qwen3-moe-tiny" / "config.json"
    library, _ = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=64,
                                decode_max_tokens=4, ep_into_buffers=True)
    counts = [4, 1, 0, 3][:ranks]
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", ranks,
                                       counts[0], 11, "uniform", main_job.TOLERANCE["f32"],
                                       tmp_path, token_counts=counts, phase=phase)
    check(results, done, ranks)
    for r in results:
        collectives = r["counters"]["collectives"]
        assert ("dispatch.counts" in collectives) == (phase == "prefill"), collectives


def test_a_placement_with_replicas_chosen_per_batch(tmp_path):
    """phys_to_log / replica_share through moert_ep_dispatch_placed_into_*."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 64,
                                  "moe_intermediate_size": 16, "num_experts": 16,
                                  "num_experts_per_tok": 4, "norm_topk_prob": True}))
    ranks, slots = 4, 20  # 4 replicas of hot experts
    library, _ = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=44,
                                physical_experts=slots, replica_selection="per-batch",
                                ep_into_buffers=True)
    assert b"moert_ep_dispatch_placed_into_f32" in library.read_bytes()
    placement = tmp_path / "placement.json"
    phy2log = list(range(16)) + [0, 1, 2, 3]
    placement.write_text(json.dumps({"layers": [{"phy2log": phy2log, "share": [1.0] * slots}]}))
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", ranks,
                                       32, 5, "one-rank", main_job.TOLERANCE["f32"], tmp_path,
                                       placement=placement)
    check(results, done, ranks)


@pytest.mark.parametrize("codes", [False, True], ids=["dequantized", "codes"])
@pytest.mark.parametrize("quant", ["fp8-e4m3-g128", "fp8-e4m3-g32-ue8m0"])
def test_fp8_dispatch_into_buffers(tmp_path, quant, codes):
    """The GPU's FP8 dispatch: E4M3 rows on the wire; in the buffers the rows
    dequantized on receipt, or (codes) the codes and f32 scales that the gate/up
    GEMM reads as they are (moert_ep_dispatch_fp8_into_*)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 256,
                                  "moe_intermediate_size": 32, "num_experts": 8,
                                  "num_experts_per_tok": 2, "norm_topk_prob": True}))
    runs = {}
    for q in ("none", quant):
        library, plan = compile_config(config, tmp_path, ep=2, max_tokens_per_rank=18,
                                       dispatch_quant=q, fp8_gemm=q == "none" or codes,
                                       ep_into_buffers=True)
        entry = b"moert_ep_dispatch_fp8_into_f32"
        assert (entry in library.read_bytes()) == (q != "none" and codes)
        # The reference's experts see the rows the FP8 dispatch delivers: f32's tolerance.
        results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 2,
                                           12, 5, "uniform", main_job.TOLERANCE["f32"], tmp_path,
                                           expert_rows_quantization=q)
        check(results, done, 2)
        runs[q] = (plan, results)
    plan, fp8 = runs[quant]
    assert plan["wire_bytes_per_token"]["quantization"] == quant
    receive = plan["wire_bytes_per_token"]["experts_receive"]
    assert ("read by the gate/up grouped GEMM" if codes
            else "dequantized from the FP8 rows on receipt") in receive, receive
    sent = [sum(r["counters"]["totals"]["dispatch_payload_bytes_sent"] for r in rs)
            for _, rs in (runs["none"], runs[quant])]
    assert sent[1] < 0.3 * sent[0]  # 1 byte per element plus scales instead of 4


@pytest.mark.parametrize("ranks,tp", [(2, 2), (4, 2)])
def test_tensor_parallel_dedupe(tmp_path, ranks, tp):
    """Groups of tp ranks hold the same tokens, each dispatches a slice, and
    moert_tp_gather_into_* puts the whole output back on every rank of the group."""
    config = ROOT / "examples" / "deepseek-v3-tiny" / "config.json"
    library, plan = compile_config(config, tmp_path, ep=ranks, tp=tp, max_tokens_per_rank=18,
                                   ep_into_buffers=True)
    assert plan["tensor_parallel"]["dedupe"] == "slice"
    assert b"moert_tp_gather_into_f32" in library.read_bytes()
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", ranks,
                                       12, 3, "uniform", main_job.TOLERANCE["f32"], tmp_path,
                                       tp=tp)
    check(results, done, ranks)


def calls_gather_entries(library, dtype):
    data = library.read_bytes()
    return (f"moert_ep_gather_into_{dtype}".encode() in data
            and f"moert_ep_return_into_{dtype}".encode() in data)


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
@pytest.mark.parametrize("counts", [[4, 1], [4, 1, 0, 3]], ids=["ranks2", "ranks4"])
def test_the_all_gather_decode_exchange(tmp_path, config, counts):
    """--ep-all-gather: every rank gets every rank's block of 4 slots with global ids, the
    layer maps them to its experts and sums the returned blocks in rank order."""
    ranks, slots = len(counts), 4
    library, plan = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=64,
                                   decode_max_tokens=slots, ep_into_buffers=True,
                                   ep_all_gather=True)
    assert calls_gather_entries(library, "f32")
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", ranks,
                                       counts[0], 11, "uniform", main_job.TOLERANCE["f32"],
                                       tmp_path, token_counts=counts, phase="decode")
    check(results, done, ranks)
    for r in results:
        collectives = r["counters"]["collectives"]
        assert set(collectives) == {"dispatch.payload", "dispatch.ids", "dispatch.weights",
                                    "combine.payload"}, collectives
        # Every rank's block of slots rows of H floats, whatever its tokens.
        row_bytes = plan["hidden_size"] * 4
        assert collectives["dispatch.payload"]["bytes_received"] == (ranks - 1) * slots * row_bytes
        # The all-to-all counts the block a rank keeps.
        assert collectives["combine.payload"]["bytes_sent"] == ranks * slots * row_bytes


def test_the_all_gather_exchange_in_bf16_and_the_prefill_variant_packed(tmp_path):
    config = ROOT / "examples" / "deepseek-v3-tiny" / "config.json"
    library, _ = compile_config(config, tmp_path, "bf16", ep=2, max_tokens_per_rank=64,
                                decode_max_tokens=8, ep_into_buffers=True, ep_all_gather=True)
    assert calls_gather_entries(library, "bf16")
    for phase, tokens in (("decode", [8, 3]), ("prefill", [20, 9])):
        results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 2,
                                           tokens[0], 5, "uniform", main_job.TOLERANCE["bf16"],
                                           tmp_path, token_counts=tokens, phase=phase)
        check(results, done, 2)
        for r in results:
            assert ("dispatch.ids" in r["counters"]["collectives"]) == (phase == "decode")


def test_the_all_gather_exchange_after_the_tp_dedupe(tmp_path):
    """ep 4 x tp 2: each rank of a group gathers and returns its slice's blocks."""
    config = ROOT / "examples" / "deepseek-v3-tiny" / "config.json"
    library, _ = compile_config(config, tmp_path, ep=4, tp=2, max_tokens_per_rank=64,
                                decode_max_tokens=4, ep_into_buffers=True, ep_all_gather=True)
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 4, 4,
                                       11, "uniform", main_job.TOLERANCE["f32"], tmp_path,
                                       token_counts=[4, 3], tp=2, phase="decode")
    check(results, done, 4)
    for r in results:
        assert {"dispatch.ids", "tp.gather"} <= set(r["counters"]["collectives"])
