"""A load balancer's placement applied in the compiled dispatch, on 2 and 4 MPI ranks.

Flow: run the layer with the plain layout and measure each expert's load; plan
replicas and shares for it with moe-eplb; run again with the placement as runtime
tensors. The outputs must not change and every rank's measured expert load must
follow the plan's predicted device load.
"""
import json
import subprocess

import numpy as np
import pytest

from moec import main as main_job
from moec.toolchain import compile_config, tool
from ranks import every_rank_error

# 16 experts, top-4; routing from random weights gives a mildly uneven load.
CONFIG = {"model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 16,
          "num_experts": 16, "num_experts_per_tok": 4, "norm_topk_prob": True}
TOKENS = 96


def compile_layer(tmp_path, ranks, physical_experts=0):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    library, _ = compile_config(config, tmp_path, ep=ranks, max_tokens_per_rank=TOKENS + 3 * ranks,
                                physical_experts=physical_experts)
    return library, tmp_path / f"{library.stem}.plan.json"


def run(tmp_path, ranks, library, plan_path, placement=None, scenario="uniform"):
    results, done = main_job.run_ranks(library, plan_path, ranks, TOKENS, 5, scenario,
                                       main_job.TOLERANCE["f32"], tmp_path, placement=placement)
    assert done.returncode == 0, done.stderr
    assert all(r["ok"] for r in results), results
    return sorted(results, key=lambda r: r["rank"])


def device_loads(results):
    return [r["counters"]["totals"]["expert_choices_received"] for r in results]


def imbalance(loads):
    return max(loads) / (sum(loads) / len(loads))


# "one-rank" sends every token to the last rank's experts only: the hot spot to spread.
@pytest.mark.parametrize("ranks,slots_per_rank,scenario",
                         [(2, 10, "uniform"), (4, 5, "uniform"), (4, 6, "one-rank")])
def test_placement_keeps_outputs_and_moves_the_load_as_planned(tmp_path, ranks, slots_per_rank,
                                                               scenario):
    library, plan_path = compile_layer(tmp_path, ranks)
    plain = run(tmp_path, ranks, library, plan_path, scenario=scenario)
    expert_load = np.sum([r["tokens_per_expert"] for r in plain], axis=0)
    assert sum(device_loads(plain)) == expert_load.sum()

    slots = ranks * slots_per_rank
    loads = tmp_path / "loads.json"
    loads.write_text(json.dumps([expert_load.tolist()]))
    placement = tmp_path / "placement.json"
    subprocess.run([tool("moe-eplb"), str(loads), "--devices", str(ranks), "--slots", str(slots),
                    "--shares", "-o", str(placement)], check=True, capture_output=True)
    planned = json.loads(placement.read_text())["layers"][0]

    placed_library, placed_plan = compile_layer(tmp_path, ranks, physical_experts=slots)
    placed = run(tmp_path, ranks, placed_library, placed_plan, placement=placement,
                 scenario=scenario)

    for p, q in zip(plain, placed):
        np.testing.assert_allclose(np.load(q["output_file"]), np.load(p["output_file"]),
                                   rtol=1e-5, atol=1e-6)
    measured = device_loads(placed)
    assert sum(measured) == expert_load.sum()
    print(f"\nEP{ranks}, {slots} slots, {scenario}: per-rank expert load without placement "
          f"{device_loads(plain)} (peak/avg {imbalance(device_loads(plain)):.3f}), planned "
          f"{[round(d, 2) for d in planned['device_load']]}, measured {measured} "
          f"(peak/avg {imbalance(measured):.3f})")
    # Each rank splits its own choices by the shares, so every (rank, expert) pair may be
    # off by about one choice per replica.
    for got, want in zip(measured, planned["device_load"]):
        assert abs(got - want) <= 0.03 * want + 4, (measured, planned["device_load"])
    assert imbalance(measured) <= imbalance(device_loads(plain))


def test_a_placement_without_a_replica_for_an_expert_fails_every_rank(tmp_path):
    ranks, slots = 2, 16
    library, plan_path = compile_layer(tmp_path, ranks, physical_experts=slots)
    bad = {"layers": [{"phy2log": list(range(16)), "share": [1.0] * 15 + [0.0]}]}
    placement = tmp_path / "bad.json"
    placement.write_text(json.dumps(bad))
    results, done = main_job.run_ranks(library, plan_path, ranks, 8, 5, "uniform",
                                       main_job.TOLERANCE["f32"], tmp_path, placement=placement)
    assert done.returncode != 0 and not results
    assert all("placement: expert 15 has no replica with a positive share" in m
               for m in every_rank_error(done, ranks))



def test_a_placement_for_fewer_experts_fails_every_rank(tmp_path):
    # A placement planned for 12 experts (another model's) on a layer of 16:
    # the compiled plan states the 16, so experts 12-15 have no slot (inferred
    # from phys_to_log the count would be 12, and the ids 12-15 the fault).
    ranks, slots = 2, 20
    library, plan_path = compile_layer(tmp_path, ranks, physical_experts=slots)
    phy2log = [p % 12 for p in range(slots)]
    share = [1.0 / phy2log.count(e) for e in phy2log]  # each expert's shares sum to 1
    foreign = {"layers": [{"phy2log": phy2log, "share": share}]}
    placement = tmp_path / "foreign.json"
    placement.write_text(json.dumps(foreign))
    results, done = main_job.run_ranks(library, plan_path, ranks, 8, 5, "uniform",
                                       main_job.TOLERANCE["f32"], tmp_path, placement=placement)
    assert done.returncode != 0 and not results
    assert all("placement: expert 12 has no" in m for m in every_rank_error(done, ranks))


def test_a_placement_lets_ep_not_divide_the_experts(tmp_path):
    # 16 experts on 3 ranks: the plain layout cannot split them, a placement of
    # 18 slots (6 a rank, as moe-eplb plans it) can; every rank's output matches
    # the reference (run() checks it).
    ranks, slots = 3, 18
    loads = tmp_path / "loads.json"
    loads.write_text(json.dumps([[1 + e for e in range(16)]]))
    placement = tmp_path / "placement.json"
    subprocess.run([tool("moe-eplb"), str(loads), "--devices", str(ranks), "--slots", str(slots),
                    "-o", str(placement)], check=True, capture_output=True)
    library, plan_path = compile_layer(tmp_path, ranks, physical_experts=slots)
    placed = run(tmp_path, ranks, library, plan_path, placement=placement)
    choices = sum(r["tokens"] for r in placed) * CONFIG["num_experts_per_tok"]
    assert sum(device_loads(placed)) == choices


def test_a_placement_for_another_device_count_is_named(tmp_path):
    # moe-eplb states the devices it planned for: 4 devices' plan on 2 ranks would give a
    # rank two replicas of one expert.
    loads = tmp_path / "loads.json"
    loads.write_text(json.dumps([[1 + e for e in range(16)]]))
    placement = tmp_path / "placement.json"
    subprocess.run([tool("moe-eplb"), str(loads), "--devices", "4", "--slots", "20",
                    "-o", str(placement)], check=True, capture_output=True)
    library, plan_path = compile_layer(tmp_path, 2, physical_experts=20)
    results, done = main_job.run_ranks(library, plan_path, 2, 8, 5, "uniform",
                                       main_job.TOLERANCE["f32"], tmp_path, placement=placement)
    assert done.returncode != 0 and not results
    assert "planned for 4 devices, the job has 2 ranks" in done.stderr
