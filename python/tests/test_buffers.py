"""moe-plan-buffers end to end: the runtime's workspaces have the compiler's static sizes, every
request stays within them, and one token over the planned maximum fails every rank first."""
import json

import pytest

from moec import main as main_job
from moec.toolchain import compile_config
from ranks import every_rank_error

# top-4 of 16 experts: with 2 and 4 ranks a token reaches up to min(4, ep) ranks.
CONFIG = {"model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 16,
          "num_experts": 16, "num_experts_per_tok": 4, "norm_topk_prob": True}
MAX_TOKENS = 24


def compile_layer(tmp_path, ranks, quant="none"):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    library, plan = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=MAX_TOKENS,
                                   dispatch_quant=quant)
    return library, tmp_path / f"{library.stem}.plan.json", plan


def run(tmp_path, library, plan_path, ranks, counts):
    return main_job.run_ranks(library, plan_path, ranks, counts[0], 7, "uniform",
                              main_job.TOLERANCE["f32"], tmp_path, token_counts=counts)


def formula_bytes(ranks, quant):
    """The workspace sizes, derived here from the layer's shape (not read from the plan)."""
    h, k = CONFIG["hidden_size"], CONFIG["num_experts_per_tok"]
    activation = h * 4 if quant == "none" else h + h // 128 * 4
    row, x_row = activation + 6 * k, h * 4  # int16 ids, f32 weights
    sent, received = MAX_TOKENS * min(k, ranks), MAX_TOKENS * ranks
    return {"dispatch.send": sent * row, "dispatch.recv": received * row,
            "expert.rows": received * x_row, "combine.recv": sent * x_row}


@pytest.mark.parametrize("ranks", [2, 4])
def test_measured_high_water_stays_within_the_static_plan(tmp_path, ranks):
    library, plan_path, plan = compile_layer(tmp_path, ranks)
    expected = formula_bytes(ranks, "none")
    planned = {w["name"]: w["bytes"] for w in plan["phases"]["prefill"]["workspaces"]}
    assert planned == expected
    results, done = run(tmp_path, library, plan_path, ranks, [MAX_TOKENS] * ranks)
    assert done.returncode == 0, done.stderr
    assert all(r["ok"] for r in results), results
    print()
    for r in results:
        counters = r["counters"]
        # The runtime got the compiler's sizes through the compiled call.
        assert counters["planned_bytes"] == expected
        for name, limit in expected.items():
            used = counters["high_water_bytes"][name]
            assert 0 < used <= limit, (name, used, limit)
        sent = counters["totals"]["dispatch_rows_sent"]
        row = expected["dispatch.send"] // (MAX_TOKENS * min(4, ranks))
        assert counters["high_water_bytes"]["dispatch.send"] == sent * row
        print(f"rank {r['rank']}/{ranks}: " + ", ".join(
            f"{n} {counters['high_water_bytes'][n]}/{l} B" for n, l in expected.items()))


@pytest.mark.parametrize("ranks", [2, 4])
def test_one_token_over_fails_every_rank_before_any_write(tmp_path, ranks):
    library, plan_path, _ = compile_layer(tmp_path, ranks)
    counts = [MAX_TOKENS] * ranks
    counts[-1] = MAX_TOKENS + 1
    results, done = run(tmp_path, library, plan_path, ranks, counts)
    assert done.returncode != 0 and not results
    expected = (f"rank {ranks - 1}: dispatch: {MAX_TOKENS + 1} tokens but the plan allows at "
                f"most {MAX_TOKENS} per rank; nothing was written")
    assert every_rank_error(done, ranks) == [expected] * ranks


def test_fp8_rows_shrink_the_wire_and_expert_workspaces(tmp_path):
    CONFIG_FP8 = dict(CONFIG, hidden_size=256)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG_FP8))
    library, plan = compile_config(config, tmp_path, ep=2, max_tokens_per_rank=MAX_TOKENS,
                                   dispatch_quant="fp8-e4m3-g128")
    planned = {w["name"]: w["bytes"] for w in plan["phases"]["prefill"]["workspaces"]}
    row = 256 + 2 * 4 + 6 * 4  # codes, two f32 scales, int16 ids and f32 weights
    assert planned["dispatch.send"] == MAX_TOKENS * 2 * row
    # the experts get the codes and two f32 scales per row, not f32 activations
    assert planned["expert.rows"] == MAX_TOKENS * 2 * (256 + 2 * 4)
    counts = [MAX_TOKENS, MAX_TOKENS - 3]
    results, done = main_job.run_ranks(library, tmp_path / f"{library.stem}.plan.json", 2,
                                       counts[0], 7, "uniform", 0.1, tmp_path,  # FP8 tolerance
                                       token_counts=counts)
    assert done.returncode == 0, done.stderr
    for r in results:
        assert r["ok"], r
        assert r["counters"]["planned_bytes"] == planned
        assert r["counters"]["high_water_bytes"]["expert.rows"] <= planned["expert.rows"]


def test_one_rank_has_no_runtime_workspaces(tmp_path):
    library, plan_path, _ = compile_layer(tmp_path, 1)
    results, done = run(tmp_path, library, plan_path, 1, [MAX_TOKENS])
    assert done.returncode == 0, done.stderr
    assert results[0]["ok"] and results[0]["counters"]["planned_bytes"] == {}
