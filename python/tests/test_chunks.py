"""moe-plan-chunks end to end: lock-step chunk loops across ranks, memory within budget."""
import json

import numpy as np
import pytest

from moec import main as main_job
from moec.toolchain import compile_config

# 12 experts so that 3 ranks divide them.
CONFIG = {"model_type": "qwen3_moe", "hidden_size": 32, "moe_intermediate_size": 16,
          "num_experts": 12, "num_experts_per_tok": 2, "norm_topk_prob": True}


def write_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return path


def bytes_per_token(config, tmp_path, ranks, max_tokens):
    """The planner's per-token footprint, from a plan with an unlimited budget."""
    _, plan = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=max_tokens,
                             chunk_budget_bytes=1 << 50)
    assert not plan["chunking"]["chunked"]
    return plan["chunking"]["bytes_per_token"]


def same_up_to_rounding(got, want):
    """Equal but for f32 summation order: a chunking error (a row lost,
    doubled or misplaced) is of the size of the outputs themselves."""
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


def run(config, tmp_path, ranks, counts, budget, packed_min_rows=0):
    # Chunks give an expert fewer rows per call, and the GEMM path depends on
    # them (decode dots below 3 rows, register tiles, the packed GEMM from
    # packed_min_rows on), each with its own summation order: the outputs
    # may differ in the last bits (same_up_to_rounding).
    library, plan = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=max(counts),
                                   chunk_budget_bytes=budget, packed_min_rows=packed_min_rows)
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", ranks,
                                       0, 11, "uniform", main_job.TOLERANCE["f32"], tmp_path,
                                       token_counts=counts)
    assert done.returncode == 0, done.stderr
    assert all(r["ok"] for r in results), results
    return plan, sorted(results, key=lambda r: r["rank"])


def test_ranks_with_500_200_256_tokens_all_run_two_chunks(tmp_path):
    config = write_config(tmp_path)
    per_token = bytes_per_token(config, tmp_path, 3, 500)
    plan, results = run(config, tmp_path, 3, [500, 200, 256], budget=256 * per_token)
    assert plan["chunking"] == {"chunked": True, "chunk_size": 256, "chunks": 2,
                                "budget_bytes": 256 * per_token, "bytes_per_token": per_token,
                                "trip_count": "max over the EP group"}
    for r in results:
        totals = r["counters"]["totals"]
        assert totals["chunk_loops"] == 1 and totals["chunks_run"] == 2, r
        # every chunk joins the dispatch: rank 1 runs an empty second chunk
        assert r["counters"]["collectives"]["dispatch.counts"]["calls"] == 2


def test_buffers_stay_within_the_budget_with_32_chunks(tmp_path):
    config = write_config(tmp_path)
    chunk, ranks = 8, 2
    counts = [32 * chunk, 32 * chunk]
    per_token = bytes_per_token(config, tmp_path, ranks, max(counts))
    budget = chunk * per_token
    plan, chunked = run(config, tmp_path, ranks, counts, budget)
    assert plan["chunking"]["chunk_size"] == chunk and plan["chunking"]["chunks"] == 32
    _, whole = run(config, tmp_path, ranks, counts, budget=0)
    for c, w in zip(chunked, whole):
        assert c["counters"]["totals"]["chunks_run"] == 32
        same_up_to_rounding(np.load(c["output_file"]), np.load(w["output_file"]))
        # The runtime's workspaces are allocated at their planned (per-chunk) size.
        runtime_buffers = sum(c["counters"]["planned_bytes"].values())
        measured = c["heap_peak_bytes"] - c["output_bytes"] + runtime_buffers
        unchunked = w["heap_peak_bytes"] - w["output_bytes"] + sum(
            w["counters"]["planned_bytes"].values())
        print(f"\nrank {c['rank']}: budget {budget} B, chunked peak {measured} B "
              f"({measured / budget:.2f} of budget), unchunked peak {unchunked} B")
        assert measured <= budget
        assert unchunked > budget  # the budget really binds


@pytest.mark.parametrize("ranks", [1, 4])
def test_chunked_outputs_equal_unchunked(tmp_path, ranks):
    config = write_config(tmp_path)
    counts = [40 + 7 * r for r in range(ranks)]
    per_token = bytes_per_token(config, tmp_path, ranks, max(counts))
    plan, chunked = run(config, tmp_path, ranks, counts, budget=8 * per_token)
    assert plan["chunking"]["chunk_size"] == 8 and plan["chunking"]["chunked"]
    _, whole = run(config, tmp_path, ranks, counts, budget=0)
    for c, w in zip(chunked, whole):
        same_up_to_rounding(np.load(c["output_file"]), np.load(w["output_file"]))
        if ranks > 1:  # every rank runs the group's most chunks
            assert c["counters"]["totals"]["chunks_run"] == -(-max(counts) // 8)


def test_chunked_outputs_match_unchunked_with_the_packed_gemm(tmp_path):
    """With the default GEMM paths, 200 tokens unchunked give the experts
    packed blocks (about 33 rows each); chunks of 8 do not: equal up to f32
    rounding."""
    config = write_config(tmp_path)
    per_token = bytes_per_token(config, tmp_path, 1, 200)
    _, chunked = run(config, tmp_path, 1, [200], budget=8 * per_token, packed_min_rows=None)
    _, whole = run(config, tmp_path, 1, [200], budget=0, packed_min_rows=None)
    _, one_path = run(config, tmp_path, 1, [200], budget=0)
    got, want = np.load(chunked[0]["output_file"]), np.load(whole[0]["output_file"])
    # The packed path did run: it rounds differently from the other one.
    assert not np.array_equal(want, np.load(one_path[0]["output_file"]))
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
