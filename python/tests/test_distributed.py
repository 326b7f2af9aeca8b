"""Compiled layers on 1, 2 and 4 MPI ranks against the single-process reference."""
import json
import math
import os
import subprocess
import sys
import time

import pytest

from moec import main as main_job
from moec.toolchain import ROOT, compile_config
from ranks import every_rank_error

EXAMPLES = sorted((ROOT / "examples").glob("*/config.json"))


def run(config, tmp_path, ranks, scenario="uniform", dtype="f32", tokens=12, max_tokens=None):
    max_tokens = max_tokens or tokens + 3 * ranks
    library, plan = compile_config(config, tmp_path, dtype, ep=ranks, max_tokens_per_rank=max_tokens)
    plan_path = tmp_path / f"{library.stem}.plan.json"
    return main_job.run_ranks(library, plan_path, ranks, tokens, 5, scenario,
                              main_job.TOLERANCE[dtype], tmp_path)


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("scenario", ["uniform", "one-rank", "empty-rank"])
def test_every_rank_matches_the_reference(tmp_path, config, ranks, scenario):
    results, done = run(config, tmp_path, ranks, scenario)
    assert done.returncode == 0, done.stderr
    assert len(results) == ranks
    for r in results:
        assert r["ok"], r
        if scenario == "one-rank" and r["tokens"]:
            assert r["experts_hit_ranks"] == [ranks - 1]
    if scenario == "empty-rank":
        assert results[0]["tokens"] == 0


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
def test_bf16_on_two_ranks(tmp_path, config):
    results, done = run(config, tmp_path, 2, dtype="bf16")
    assert done.returncode == 0, done.stderr
    assert all(r["ok"] for r in results), results


def test_dispatch_sends_each_token_once_per_rank(tmp_path):
    """Top-8 of 64 experts over 4 ranks: bytes shrink by the distinct-ranks factor."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 256,
                                  "moe_intermediate_size": 16, "num_experts": 64,
                                  "num_experts_per_tok": 8, "norm_topk_prob": True}))
    ranks, k, hidden = 4, 8, 256
    results, done = run(config, tmp_path, ranks, tokens=64)
    assert done.returncode == 0, done.stderr
    tokens = sum(r["tokens"] for r in results)
    pairs = sum(r["distinct_token_ranks"] for r in results)
    totals = [r["counters"]["totals"] for r in results]
    rows = sum(t["dispatch_rows_sent"] for t in totals)
    sent = sum(t["dispatch_payload_bytes_sent"] for t in totals)
    per_pair = sum(t["dispatch_bytes_per_token_expert_pair"] for t in totals)
    assert rows == pairs  # one row per (token, destination rank)
    assert sent == pairs * (hidden * 4 + k * 6)
    assert per_pair == tokens * k * (hidden * 4 + 6)
    # E[distinct ranks] for 8 distinct experts of 64, 16 per rank.
    expected_distinct = ranks * (1 - math.comb(48, 8) / math.comb(64, 8))
    measured_distinct = pairs / tokens
    print(f"\ndispatch bytes {sent} vs per-(token, expert) {per_pair}: ratio {sent / per_pair:.3f}; "
          f"distinct ranks per token {measured_distinct:.2f} (expected {expected_distinct:.2f} "
          f"for uniform routing)")
    assert sent < per_pair
    assert abs(measured_distinct - expected_distinct) < 0.35


def mpirun_worker(tmp_path, ranks, env_extra):
    config = EXAMPLES[-1]
    library, plan = compile_config(config, tmp_path, "f32", ep=ranks, max_tokens_per_rank=64)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), OMPI_MCA_btl="self,vader",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", **env_extra)
    start = time.monotonic()
    done = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), sys.executable,
         "-m", "moec.distributed", "--library", str(library),
         "--plan", str(tmp_path / f"{library.stem}.plan.json"), "--tokens", "8",
         "--tolerance", "1e-5", "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - start


@pytest.mark.parametrize("ranks,skipper,collective", [
    (2, 1, "dispatch.payload"), (4, 2, "dispatch.counts"), (4, 0, "combine.payload")])
def test_a_skipped_collective_fails_every_rank_within_the_timeout(tmp_path, ranks, skipper,
                                                                   collective):
    timeout_ms = 3000
    done, elapsed = mpirun_worker(tmp_path, ranks, {
        "MOERT_INJECT_SKIP": f"{skipper}:{collective}", "MOERT_TIMEOUT_MS": str(timeout_ms)})
    assert done.returncode != 0
    for message in every_rank_error(done, ranks):
        assert "ranks disagree on collective" in message
        assert f"rank {skipper} issues" in message and collective in message
    assert elapsed < timeout_ms / 1000 + 20  # mpirun start-up and teardown included

