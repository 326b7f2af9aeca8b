"""Whole compiled layers against the numpy reference, and the main job's exit codes."""
import json
import subprocess
import sys

import numpy as np
import pytest

from moec import main as main_job
from moec import reference
from moec.layer import run_layer
from moec.toolchain import ROOT, compile_config
from moec.weights import make_inputs

EXAMPLES = sorted((ROOT / "examples").glob("*/config.json"))


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("tokens", [1, 7, 64])
def test_example_layer_matches_reference(tmp_path, config, dtype, tokens):
    library, plan = compile_config(config, tmp_path, dtype)
    x, weights = make_inputs(plan, tokens, seed=tokens)
    y = run_layer(library, plan, x, weights).astype(np.float64)
    ref = reference.layer(x, weights, plan)
    assert y.shape == ref.shape
    assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) <= main_job.TOLERANCE[dtype]


def test_zero_tokens_give_an_empty_output(tmp_path):
    library, plan = compile_config(EXAMPLES[0], tmp_path)
    x, weights = make_inputs(plan, 0, seed=0)
    assert run_layer(library, plan, x, weights).shape == (0, plan["hidden_size"])


def test_mixtral_config(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "mixtral", "hidden_size": 32,
                                  "intermediate_size": 48, "num_local_experts": 8,
                                  "num_experts_per_tok": 2}))
    library, plan = compile_config(config, tmp_path)
    assert plan["routing"]["normalize"] and plan["routing"]["score"] == "softmax"
    x, weights = make_inputs(plan, 16, seed=3)
    ref = reference.layer(x, weights, plan)
    y = run_layer(library, plan, x, weights)
    assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) <= main_job.TOLERANCE["f32"]


def run_main(*args):
    return subprocess.run([sys.executable, "-m", "moec.main", *args], cwd=ROOT / "python",
                          capture_output=True, text=True)


def test_main_job_passes_on_an_example(tmp_path):
    counters = tmp_path / "counters.json"
    result = run_main("--config", str(EXAMPLES[0]), "--dtype", "f32", "--tokens", "8",
                      "--counters", str(counters))
    assert result.returncode == 0, result.stdout + result.stderr
    # The compact table: one row per (layer, dtype, variant), then the counters' path.
    rows = [line.split() for line in result.stdout.splitlines()
            if line.startswith(EXAMPLES[0].parent.name)]
    # The EP runs from the config, then each MoE layer of the shipped
    # checkpoint compiled with --model.
    assert [r[2] for r in rows] == ["prefill", "decode", "checkpoint", "checkpoint"], \
        result.stdout
    assert all(r[-1] == "pass" and float(r[4]) <= main_job.TOLERANCE["f32"] for r in rows)
    assert f"runtime counters: {counters}" in result.stdout
    runs = json.loads(counters.read_text())
    assert runs[0]["ranks"] == 2 and len(runs[0]["prefill"]) == 2
    assert runs[0]["prefill"][0]["totals"]["dispatch_calls_prefill"] == 1


def test_main_job_verbose_prints_each_rank(tmp_path):
    result = run_main("--config", str(EXAMPLES[0]), "--dtype", "f32", "--tokens", "8",
                      "--verbose", "--counters", str(tmp_path / "c.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 1:" in result.stdout and "error vs reference" in result.stdout


def test_main_job_fails_on_a_bad_config(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 64,
                                  "moe_intermediate_size": 32, "num_experts": "16",
                                  "num_experts_per_tok": 2}))
    result = run_main("--config", str(config), "--dtype", "f32",
                      "--counters", str(tmp_path / "c.json"))
    assert result.returncode == 1
    assert "$.num_experts: expected an integer" in result.stderr


def test_main_job_fails_when_over_tolerance(tmp_path):
    """The tolerance check is live: an impossible tolerance makes the job fail."""
    result = run_main("--config", str(EXAMPLES[0]), "--dtype", "f32", "--tokens", "4",
                      "--tolerance", "1e-12", "--counters", str(tmp_path / "c.json"))
    assert result.returncode == 1
    assert "FAIL" in result.stdout


# Run in a child process: the other library stays in its global symbol scope.
GLOBAL_NEIGHBOUR = """
import ctypes, json, sys
import numpy as np
from moec import reference
from moec.layer import run_layer
from moec.weights import make_inputs
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
plan = json.load(open(sys.argv[3]))
x, weights = make_inputs(plan, 16, seed=1)
y = run_layer(sys.argv[2], plan, x, weights).astype(np.float64)
ref = reference.layer(x, weights, plan)
print(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))
"""


def test_a_layer_runs_its_own_code_beside_another_in_global_scope(tmp_path):
    # Two layers of one shape and entry name but different routing: an engine that
    # links one (or dlopens it RTLD_GLOBAL) must not make the other call its code.
    config = json.loads((ROOT / "examples" / "qwen3-moe-tiny" / "config.json").read_text())
    libraries = []
    for normalize in (True, False):
        folder = tmp_path / f"norm{normalize}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**config, "norm_topk_prob": normalize}))
        libraries.append(compile_config(folder / "config.json", folder))
    (normalized, plan), (neighbour, _) = libraries
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    done = subprocess.run([sys.executable, "-c", GLOBAL_NEIGHBOUR, str(neighbour), str(normalized),
                           str(plan_path)], cwd=ROOT / "python", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) <= main_job.TOLERANCE["f32"]
