"""The prefill exchange packed by the layer (`moe-compile --ep-pack-in-layer`), on host memory.

The layer's own ops group each token's row and its route (targets, weights) by destination
rank (moe.dispatch over the ranks), `moert_ep_send_packed_into_*` moves the blocks and
`moert_ep_return_packed_into_*` brings the partial rows back in the send order, where the
layer sums each token's rows. On a GPU the packing runs as kernels and no row crosses to the
host; here the same IR runs on CPU ranks (`--ep-into-buffers`), so every rank must match the
numpy reference, and the counters must show the rows and choices the reference's routing
implies.
"""
import json

import numpy as np
import pytest

from moec import main as main_job
from moec.toolchain import ROOT, compile_config

EXAMPLES = sorted((ROOT / "examples").glob("*/config.json"))


def calls_packed_entries(library, dtype, placed=False):
    data = library.read_bytes()
    send = f"moert_ep_send_packed_{'placed_' if placed else ''}into_{dtype}"
    return (send.encode() in data and f"moert_ep_return_packed_into_{dtype}".encode() in data
            and f"moert_ep_dispatch_into_{dtype}".encode() not in data)


def check(results, done, ranks):
    assert done.returncode == 0, done.stderr
    assert len(results) == ranks
    for r in results:
        assert r["ok"], r


def check_counts(results, ranks, experts):
    """Rows sent: one per (token, distinct destination rank); choices received by rank r: every
    rank's choices of r's experts, both from the reference's routing."""
    local = experts // ranks
    per_expert = np.sum([r["tokens_per_expert"] for r in results], axis=0)
    for r in results:
        totals = r["counters"]["totals"]
        assert totals["dispatch_rows_sent"] == r["distinct_token_ranks"], r
        mine = per_expert[r["rank"] * local:(r["rank"] + 1) * local].sum()
        assert totals["expert_choices_received"] == mine, r
        assert "dispatch.counts" in r["counters"]["collectives"]


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
@pytest.mark.parametrize("ranks,scenario", [(2, "uniform"), (4, "uniform"), (4, "empty-rank"),
                                            (2, "one-rank")])
def test_every_rank_matches_the_reference(tmp_path, config, ranks, scenario):
    library, plan = compile_config(config, tmp_path, ep=ranks,
                                   max_tokens_per_rank=12 + 3 * ranks, ep_into_buffers=True,
                                   ep_pack_in_layer=True)
    assert calls_packed_entries(library, "f32")
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", ranks,
                                       12, 5, scenario, main_job.TOLERANCE["f32"], tmp_path)
    check(results, done, ranks)
    check_counts(results, ranks, plan["experts"])
    if scenario == "empty-rank":
        assert results[0]["tokens"] == 0


def test_bf16_on_two_ranks(tmp_path):
    config = ROOT / "examples" / "deepseek-v3-tiny" / "config.json"
    library, _ = compile_config(config, tmp_path, "bf16", ep=2, max_tokens_per_rank=18,
                                ep_into_buffers=True, ep_pack_in_layer=True)
    assert calls_packed_entries(library, "bf16")
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 2, 12,
                                       5, "uniform", main_job.TOLERANCE["bf16"], tmp_path)
    check(results, done, 2)


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_decode_variant_keeps_its_exchange(tmp_path, ranks):
    """Prefill calls go packed by the layer; decode calls keep the fixed blocks."""
    config = ROOT / "examples" / "qwen3-moe-tiny" / "config.json"
    library, _ = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=64,
                                decode_max_tokens=4, ep_into_buffers=True, ep_pack_in_layer=True)
    counts = [4, 1, 0, 3][:ranks]
    for phase in ("prefill", "decode"):
        results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json",
                                           ranks, counts[0], 11, "uniform",
                                           main_job.TOLERANCE["f32"], tmp_path,
                                           token_counts=counts, phase=phase)
        check(results, done, ranks)
        for r in results:
            collectives = r["counters"]["collectives"]
            assert ("dispatch.route" in collectives) == (phase == "prefill"), collectives


def test_a_placement_with_replicas(tmp_path):
    """phys_to_log / replica_share: the layer chooses each choice's replica by the shares
    and sends its slot; every token on the last rank's experts, three of which have a
    replica on the rank before it."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 64,
                                  "moe_intermediate_size": 16, "num_experts": 16,
                                  "num_experts_per_tok": 4, "norm_topk_prob": True}))
    ranks, slots = 4, 20  # 5 slots a rank
    library, _ = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=44,
                                physical_experts=slots, ep_into_buffers=True,
                                ep_pack_in_layer=True)
    assert calls_packed_entries(library, "f32", placed=True)
    placement = tmp_path / "placement.json"
    phy2log = list(range(16)) + [12, 13, 14, 15]  # slots 15-19 are rank 3's
    share = [1.0] * 12 + [0.5] * 3 + [1.0] + [0.5] * 3 + [1.0]
    placement.write_text(json.dumps({"layers": [{"phy2log": phy2log, "share": share}]}))
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", ranks,
                                       32, 5, "one-rank", main_job.TOLERANCE["f32"], tmp_path,
                                       placement=placement)
    check(results, done, ranks)
    received = [r["counters"]["totals"]["expert_choices_received"] for r in results]
    per_expert = np.sum([r["tokens_per_expert"] for r in results], axis=0)
    # Every choice is of experts 12-15 (rank 3's block); 12-14 have a second slot on rank 3
    # with half the share each, 15 is all rank 3's.
    assert per_expert[12:].sum() == per_expert.sum() > 0
    assert received[0] == received[1] == 0
    assert received[2] + received[3] == per_expert.sum()
    assert 0.4 < received[2] / per_expert[12:15].sum() < 0.6, (received, per_expert.tolist())


@pytest.mark.parametrize("codes", [False, True], ids=["dequantized", "codes"])
@pytest.mark.parametrize("quant", ["fp8-e4m3-g128", "fp8-e4m3-g32-ue8m0"])
def test_fp8_rows_quantized_by_the_layer(tmp_path, quant, codes):
    """The layer quantizes each token's row once, E4M3 codes and scales travel packed, and
    the receiver dequantizes them, or (codes) its gate/up GEMM reads them as they came: the
    reference's experts see the rows the FP8 dispatch delivers (moec.fp8, ml_dtypes'
    E4M3), and the rows cost a quarter of f32's bytes."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 256,
                                  "moe_intermediate_size": 32, "num_experts": 8,
                                  "num_experts_per_tok": 2, "norm_topk_prob": True}))
    sent = {}
    for q in ("none", quant):
        library, plan = compile_config(config, tmp_path, ep=2, max_tokens_per_rank=18,
                                       dispatch_quant=q, fp8_gemm=q == "none" or codes,
                                       ep_into_buffers=True, ep_pack_in_layer=True)
        if q != "none":
            receive = plan["wire_bytes_per_token"]["experts_receive"]
            assert ("read by the gate/up grouped GEMM" in receive) == codes, receive
        assert calls_packed_entries(library, "f32") == (q == "none")
        assert (b"moert_ep_send_packed_fp8_into_f32" in library.read_bytes()) == (q != "none")
        results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 2,
                                           12, 5, "uniform", main_job.TOLERANCE["f32"], tmp_path,
                                           expert_rows_quantization=q)
        check(results, done, 2)
        check_counts(results, 2, plan["experts"])
        sent[q] = sum(r["counters"]["totals"]["dispatch_payload_bytes_sent"] for r in results)
    assert sent[quant] < 0.3 * sent["none"], sent


def test_tensor_parallel_dedupe(tmp_path):
    """Groups of 2 ranks hold the same tokens and each packs and sends its slice; the
    tensor-parallel gather puts the whole output back on both."""
    config = ROOT / "examples" / "deepseek-v3-tiny" / "config.json"
    library, plan = compile_config(config, tmp_path, ep=4, tp=2, max_tokens_per_rank=18,
                                   ep_into_buffers=True, ep_pack_in_layer=True)
    assert plan["tensor_parallel"]["dedupe"] == "slice"
    assert calls_packed_entries(library, "f32")
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 4, 12,
                                       3, "uniform", main_job.TOLERANCE["f32"], tmp_path, tp=2)
    check(results, done, 4)
