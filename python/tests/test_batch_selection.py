"""Replicas chosen per batch (--replica-selection per-batch), on 2 and 4 MPI ranks.

Each test runs a layer with a placement whose static shares are deliberately bad
(a replicated expert's whole share on one replica), once with the static shares
and once with per-batch selection. The outputs must agree with each other and
with the numpy reference; each rank's measured received choices
(`expert_choices_received`) must equal what the selection computed for it, and
the busiest rank's must equal the least peak any split of this batch can give,
found here by enumeration from the routed expert ids.
"""
import json
import math
import subprocess

import numpy as np
import pytest

from moec import main as main_job
from moec.toolchain import compile_config, tool

# 16 experts, top-4.
CONFIG = {"model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 16,
          "num_experts": 16, "num_experts_per_tok": 4, "norm_topk_prob": True}
TOKENS = 96
DECODE_TOKENS = 8

# Slots per rank; expert 0 has a replica on every rank, and on 4 ranks expert 5
# one more on rank 0. Static shares: every replica but the first gets 0.
PLACEMENTS = {
    2: [0, 1, 2, 3, 4, 5, 6, 7, 8,
        8, 9, 10, 11, 12, 13, 14, 15, 0],
    4: [0, 1, 2, 3, 5,
        4, 5, 6, 7, 0,
        8, 9, 10, 11, 0,
        12, 13, 14, 15, 0],
}


def write_placement(tmp_path, ranks):
    phy2log = PLACEMENTS[ranks]
    share = [1.0 if phy2log.index(e) == p else 0.0 for p, e in enumerate(phy2log)]
    path = tmp_path / f"placement{ranks}.json"
    path.write_text(json.dumps({"layers": [{"phy2log": phy2log, "share": share}]}))
    return path


def compile_layer(tmp_path, ranks, selection, all_gather=False, pack=False):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    library, plan = compile_config(config, tmp_path, ep=ranks,
                                   max_tokens_per_rank=TOKENS + 3 * ranks,
                                   physical_experts=len(PLACEMENTS[ranks]),
                                   decode_max_tokens=DECODE_TOKENS,
                                   replica_selection=selection,
                                   ep_into_buffers=all_gather or pack, ep_all_gather=all_gather,
                                   ep_pack_in_layer=pack)
    return library, tmp_path / f"{library.stem}.plan.json", plan


def run(tmp_path, ranks, library, plan_path, placement, scenario, token_counts):
    results, done = main_job.run_ranks(library, plan_path, ranks, 0, 3, scenario,
                                       main_job.TOLERANCE["f32"], tmp_path,
                                       token_counts=token_counts, placement=placement)
    assert done.returncode == 0, done.stderr
    assert all(r["ok"] for r in results), results
    return sorted(results, key=lambda r: r["rank"])


def least_peak(phy2log, ranks, counts):
    """The least busiest-rank load over every split of the replicated experts'
    choices: experts on one rank are fixed; expert 0 (on every rank) fills the
    ranks up like water; another replicated expert is split every way."""
    per_rank = len(phy2log) // ranks
    holders = {e: sorted({p // per_rank for p, x in enumerate(phy2log) if x == e})
               for e in range(len(counts))}
    fixed = [0] * ranks
    partial = []
    for e, where in holders.items():
        if len(where) == 1:
            fixed[where[0]] += counts[e]
        elif e != 0:
            partial.append((counts[e], where))
    assert len(holders[0]) == ranks and len(partial) <= 1
    best = math.inf
    splits = range(partial[0][0] + 1) if partial else [0]
    for first in splits:
        load = list(fixed)
        if partial:
            count, (a, b) = partial[0]
            load[a] += first
            load[b] += count - first
        best = min(best, max(max(load), math.ceil((sum(load) + counts[0]) / ranks)))
    return best


@pytest.mark.parametrize("ranks,scenario,phase,all_gather", [
    (2, "uniform", "prefill", False), (4, "uniform", "prefill", False),
    (4, "one-expert", "prefill", False), (2, "one-expert", "decode", False),
    (4, "uniform", "decode", False),
    # The all-gather exchange: the ranks send each choice's slot; received
    # choices are counted from the slots gathered from every rank.
    (2, "one-expert", "decode", True), (4, "uniform", "decode", True),
    (4, "one-expert", "decode", True),
    # Packed by the layer: the runtime chooses the slots, the layer packs by them.
    (2, "one-expert", "prefill", "pack"), (4, "uniform", "prefill", "pack"),
    (4, "one-expert", "prefill", "pack")])
def test_per_batch_selection_balances_the_batch_as_computed(tmp_path, ranks, scenario, phase,
                                                            all_gather):
    pack = all_gather == "pack"
    all_gather = all_gather is True
    placement = write_placement(tmp_path, ranks)
    # Uneven on purpose; decode: at most DECODE_TOKENS per rank.
    token_counts = ([TOKENS + 3 * r for r in range(ranks)] if phase == "prefill"
                    else [DECODE_TOKENS, 1, 5, DECODE_TOKENS][:ranks])
    static_library, static_plan_path, _ = compile_layer(tmp_path, ranks, "static")
    batch_library, batch_plan_path, plan = compile_layer(tmp_path, ranks, "per-batch",
                                                         all_gather, pack)
    if all_gather:
        assert b"moert_ep_gather_placed_into_f32" in batch_library.read_bytes()
    if pack:
        assert b"moert_ep_select_slots_into" in batch_library.read_bytes()
        assert b"moert_ep_send_packed_placed_into_f32" in batch_library.read_bytes()
    assert plan["layout"]["replica_selection"] == "per_batch"

    static = run(tmp_path, ranks, static_library, static_plan_path, placement, scenario, token_counts)
    batch = run(tmp_path, ranks, batch_library, batch_plan_path, placement, scenario, token_counts)
    assert all(main_job.phase_of(r) == phase for r in static + batch)

    for s, b in zip(static, batch):
        np.testing.assert_allclose(np.load(b["output_file"]), np.load(s["output_file"]),
                                   rtol=1e-5, atol=1e-6)
    received = [r["counters"]["totals"]["expert_choices_received"] for r in batch]
    computed = [r["counters"]["totals"]["replica_selection_choices_here"] for r in batch]
    peaks = {r["counters"]["totals"]["replica_selection_peak_choices"] for r in batch}
    assert received == computed
    assert len(peaks) == 1, "every rank computes the same selection"

    counts = np.sum([r["tokens_per_expert"] for r in batch], axis=0).tolist()
    best = least_peak(PLACEMENTS[ranks], ranks, counts)
    assert sum(received) == sum(counts)
    assert max(received) == best == peaks.pop()
    static_received = [r["counters"]["totals"]["expert_choices_received"] for r in static]
    print(f"\nEP{ranks} {scenario} {phase}: choices per rank static {static_received}, "
          f"per batch {received} (least peak {best})")
    if scenario == "one-expert":
        # Expert 0 is in every token's choices: the static shares pile them on rank 0.
        assert counts[0] == sum(r["tokens"] for r in batch)
        assert max(static_received) > best


def test_per_batch_selection_needs_a_placement(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    done = subprocess.run([tool("moe-compile"), "--config", str(config), "--ep", "2",
                           "--max-tokens-per-rank", "8", "--replica-selection", "per-batch",
                           "-o", str(tmp_path / "layer.so")], capture_output=True, text=True)
    assert done.returncode != 0
    assert ("--replica-selection=per-batch chooses among a placement's replicas: it needs "
            "--physical-experts") in done.stderr
    assert not (tmp_path / "layer.so").exists()
