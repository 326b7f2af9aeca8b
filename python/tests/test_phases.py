"""Prefill and decode variants (moe-specialize-phase) on 1, 2 and 4 MPI ranks.

Both variants must match the numpy reference; the entry must pick decode only
when every rank fits it, the decode layout must exchange no counts, and a
rank over the decode maximum must fail every rank before anything is written.
"""
import os
import subprocess
import sys

import pytest

from moec import main as main_job
from moec.layer import run_layer
from moec.toolchain import ROOT, compile_config
from moec.weights import make_inputs
from ranks import every_rank_error

CONFIG = ROOT / "examples" / "qwen3-moe-tiny" / "config.json"
DECODE_MAX = 4


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    """One library per EP size: prefill up to 64 tokens, decode up to 4."""
    work = tmp_path_factory.mktemp("phases")
    built = {}
    for ranks in (1, 2, 4):
        library, plan = compile_config(CONFIG, work, ep=ranks, max_tokens_per_rank=64,
                                       decode_max_tokens=DECODE_MAX,
                                       name=f"phases_ep{ranks}")
        built[ranks] = (library, work / f"{library.stem}.plan.json", plan, work)
    return built


def run(libraries, ranks, counts, phase):
    library, plan_path, _, work = libraries[ranks]
    return main_job.run_ranks(library, plan_path, ranks, counts[0], 11, "uniform",
                              main_job.TOLERANCE["f32"], work, token_counts=counts,
                              phase=phase)


def ran_decode(result):
    totals = result["counters"]["totals"]
    decode, prefill = totals.get("dispatch_calls_decode", 0), totals.get("dispatch_calls_prefill", 0)
    assert decode + prefill == 1, totals
    return decode == 1


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("phase", ["decode", "prefill", "auto"])
def test_small_batches_match_the_reference_in_every_phase(libraries, ranks, phase):
    counts = [4, 1, 0, 3][:ranks]  # uneven, one rank possibly empty
    results, done = run(libraries, ranks, counts, phase)
    assert done.returncode == 0, done.stderr
    assert [r["tokens"] for r in results] == counts
    for r in results:
        assert r["ok"], r
        if ranks > 1:
            # auto: every rank holds at most DECODE_MAX tokens, so decode
            assert ran_decode(r) == (phase != "prefill")
            collectives = r["counters"]["collectives"]
            assert ("dispatch.counts" in collectives) == (phase == "prefill"), collectives


@pytest.mark.parametrize("ranks", [2, 4])
def test_auto_picks_prefill_on_every_rank_when_one_rank_is_over(libraries, ranks):
    counts = [1] * ranks
    counts[-1] = DECODE_MAX + 1  # only the last rank is over the threshold
    results, done = run(libraries, ranks, counts, "auto")
    assert done.returncode == 0, done.stderr
    assert all(r["ok"] for r in results), results
    assert not any(ran_decode(r) for r in results)


@pytest.mark.parametrize("ranks", [2, 4])
def test_decode_layout_has_fixed_shapes_and_plan_sized_workspaces(libraries, ranks):
    _, _, plan, _ = libraries[ranks]
    decode = plan["phases"]["decode"]
    results, done = run(libraries, ranks, [2] * ranks, "decode")
    assert done.returncode == 0, done.stderr
    row = decode["dispatch_row_bytes"]
    for r in results:
        counters = r["counters"]
        # Fixed blocks: every rank sends every rank DECODE_MAX rows, whatever it holds.
        assert counters["totals"]["dispatch_payload_bytes_sent"] == ranks * DECODE_MAX * row
        planned = {w["name"]: w["bytes"] for w in decode["workspaces"]}
        assert counters["planned_bytes"] == planned
        assert counters["high_water_bytes"]["dispatch.send"] == planned["dispatch.send"]


@pytest.mark.parametrize("ranks", [2, 4])
def test_explicit_decode_over_the_maximum_fails_every_rank_before_writing(libraries, ranks):
    counts = [1] * ranks
    counts[0] = DECODE_MAX + 1
    results, done = run(libraries, ranks, counts, "decode")
    assert done.returncode != 0
    assert not results  # no rank finished the layer
    expected = (f"rank 0: dispatch: {DECODE_MAX + 1} tokens but the plan allows at most "
                f"{DECODE_MAX} per rank in the decode layout; nothing was written")
    assert every_rank_error(done, ranks) == [expected] * ranks


def call_entry_in_child(libraries, tokens, phase):
    """The one-rank library's entry called directly with `phase`, in a child
    process (the compiled entry aborts on what it refuses)."""
    library, plan_path, _, _ = libraries[1]
    code = ("import json; from moec.memref import CompiledFunction; "
            "from moec.weights import DTYPES, make_inputs; "
            f"plan = json.load(open({str(plan_path)!r})); "
            f"x, w = make_inputs(plan, {tokens}, 0); "
            f"fn = CompiledFunction({str(library)!r}, 'phases_ep1', [(2, DTYPES['f32'])]); "
            f"fn(x, *w.values(), {phase})")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), timeout=60)


def test_one_rank_decode_over_the_capacity_is_refused(libraries):
    # run_layer raises before the call; the compiled entry itself aborts.
    library, _, plan, _ = libraries[1]
    x, weights = make_inputs(plan, DECODE_MAX + 1, 0)
    with pytest.raises(ValueError, match=r"x: 5 tokens, but the decode variant \(phase "
                                         r"'decode'\) takes at most 4"):
        run_layer(library, plan, x, weights, "decode")
    done = call_entry_in_child(libraries, DECODE_MAX + 1, 2)
    assert done.returncode != 0
    # cf.assert prints its message on stdout, then aborts
    assert "more tokens than the decode layout's capacity of 4 per expert" in done.stdout


def test_a_phase_value_out_of_range_is_refused(libraries):
    done = call_entry_in_child(libraries, 2, 7)
    assert done.returncode != 0
    assert "moe: phase must be 0 (by token count), 1 (prefill) or 2 (decode)" in done.stdout


def test_bf16_decode_and_prefill_on_two_ranks(tmp_path):
    library, plan = compile_config(CONFIG, tmp_path, "bf16", ep=2, max_tokens_per_rank=64,
                                   decode_max_tokens=DECODE_MAX)
    plan_path = tmp_path / f"{library.stem}.plan.json"
    for counts, phase in (([3, 4], "decode"), ([9, 2], "auto")):
        results, done = main_job.run_ranks(library, plan_path, 2, counts[0], 3, "uniform",
                                           main_job.TOLERANCE["bf16"], tmp_path,
                                           token_counts=counts, phase=phase)
        assert done.returncode == 0, done.stderr
        assert all(r["ok"] for r in results), results
        assert [ran_decode(r) for r in results] == [phase == "decode"] * 2
