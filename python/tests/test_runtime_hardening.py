"""Issue 9 (runtime hardening) with compiled layers on 2 MPI ranks.

Ranks that run layers compiled differently (hidden size, top-k, dtype, or
only in what no collective sees: intermediate size, norm_topk_prob) must all
fail at the dispatch's first collective with the runtime's agreement
error naming the field and both ranks' values: not a segfault, not
MPI_ERR_TRUNCATE, not a wait for the timeout. A placement with a stray
phys_to_log value must be named as such on every rank. A NaN in one rank's
input must never crash a rank: either the layer routes it (the compiler's
fix) or every rank fails naming the expert id.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from moec.toolchain import ROOT, compile_config
from ranks import every_rank_error

CONFIG = {"model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 16,
          "num_experts": 16, "num_experts_per_tok": 4, "norm_topk_prob": True}
TIMEOUT_MS = 20000
LAYER = ("layer (the compiled layer's fingerprint: libraries built from different configs or "
         "options): rank 0 has 0x")
CRASHES = ("Segmentation fault", "MPI_ERR", "signal 11", "terminate called", "Traceback")


def mpi_env():
    return dict(os.environ, PYTHONPATH=str(ROOT / "python"), OMPI_MCA_btl="self,vader",
                OMPI_MCA_btl_vader_single_copy_mechanism="none",
                MOERT_TIMEOUT_MS=str(TIMEOUT_MS))


def layer(tmp_path, name, dtype="f32", physical_experts=0, **changes):
    out = tmp_path / name
    out.mkdir()
    config = out / "config.json"
    config.write_text(json.dumps({**CONFIG, **changes}))
    library, _ = compile_config(config, out, dtype, ep=2, max_tokens_per_rank=32,
                                physical_experts=physical_experts)
    return library, out / f"{library.stem}.plan.json"


def mpirun(apps):
    """Runs one rank per (argv) in `apps` (MPMD); returns the result and seconds."""
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    for i, argv in enumerate(apps):
        command += ([":"] if i else []) + ["-np", "1", sys.executable, *argv]
    start = time.monotonic()
    done = subprocess.run(command, env=mpi_env(), capture_output=True, text=True, timeout=240)
    return done, time.monotonic() - start


def distributed(library, plan, out):
    return ["-m", "moec.distributed", "--library", str(library), "--plan", str(plan),
            "--tokens", "8", "--tolerance", "0.05", "--out", str(out)]


def assert_no_crash(done, elapsed):
    for crash in CRASHES:
        assert crash not in done.stderr, done.stderr
    # Every rank failed at the agreement, not after waiting for the timeout.
    assert elapsed < TIMEOUT_MS / 1000, (elapsed, done.stderr)


@pytest.mark.parametrize("field,changes,dtype,expected", [
    ("hidden", {"hidden_size": 32}, "f32", "hidden size: rank 0 has 64, rank 1 has 32"),
    ("topk", {"num_experts_per_tok": 2}, "f32", "top-k: rank 0 has 4, rank 1 has 2"),
    ("dtype", {}, "bf16", "dtype: rank 0 has f32, rank 1 has bf16"),
    # Collectives that match, math that does not: the layer's fingerprint.
    ("intermediate", {"moe_intermediate_size": 32}, "f32", LAYER),
    ("norm_topk_prob", {"norm_topk_prob": False}, "f32", LAYER),
])
def test_defect2_ranks_running_different_layers_fail_naming_the_field(tmp_path, field, changes,
                                                                      dtype, expected):
    library0, plan0 = layer(tmp_path, "rank0")
    library1, plan1 = layer(tmp_path, "rank1", dtype, **changes)
    done, elapsed = mpirun([distributed(library0, plan0, tmp_path),
                            distributed(library1, plan1, tmp_path)])
    assert done.returncode != 0
    assert_no_crash(done, elapsed)
    for message in every_rank_error(done, 2):
        assert "ranks disagree on the layer they run (at collective 'dispatch." in message, \
            message
        assert expected in message, message


def test_defect2_two_builds_of_one_config_agree(tmp_path, monkeypatch):
    # The fingerprint is the layer's, not the build's: a second compile of
    # the same config (another directory; not from the compile cache) runs
    # beside the first.
    monkeypatch.setenv("MOE_COMPILE_CACHE", "")
    library0, plan0 = layer(tmp_path, "rank0")
    library1, plan1 = layer(tmp_path, "rank1")
    done, _ = mpirun([distributed(library0, plan0, tmp_path),
                      distributed(library1, plan1, tmp_path)])
    assert done.returncode == 0, done.stderr


DRIVER = """
import json, sys
from pathlib import Path
import numpy as np
from moec.layer import run_layer
from moec.runtime import Runtime
from moec.weights import make_inputs

library, plan_path, mode = sys.argv[1:4]
runtime = Runtime("mpi")
rank, ranks = runtime.rank, runtime.size
plan = json.loads(Path(plan_path).read_text())
x, weights = make_inputs(plan, 8 * ranks, 0)
x = x[rank * 8:(rank + 1) * 8].copy()
experts = plan["experts"]
args = dict(weights)
if mode == "stray-phys-to-log":
    phys_to_log = np.arange(experts, dtype=np.int32)  # one slot per expert
    mine = phys_to_log[rank * experts // ranks:(rank + 1) * experts // ranks]
    args["w13"], args["w2"] = weights["w13"][mine], weights["w2"][mine]
    phys_to_log[0] = 1000  # what the runtime gets: a value that is no expert
    args["phys_to_log"] = phys_to_log
    args["replica_share"] = np.ones(experts, np.float32)
else:  # nan-input: rank 1's first token is NaN
    local = experts // ranks
    args["w13"] = weights["w13"][rank * local:(rank + 1) * local]
    args["w2"] = weights["w2"][rank * local:(rank + 1) * local]
    args["expert_rank"] = (np.arange(experts) // local).astype(np.int32)
    if rank == 1:
        x[0, :] = np.nan
y = run_layer(library, plan, x, args)
finite = bool(np.all(np.isfinite(y[1:]))) if len(y) > 1 else True
print(f"rank {rank}: returned {y.shape}, other rows finite: {finite}", file=sys.stderr)
try:
    runtime.barrier("host.done")
except RuntimeError as error:
    runtime.exit_failed(error)
runtime.finalize()
"""


def run_driver(tmp_path, library, plan, mode):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    argv = [str(driver), str(library), str(plan), mode]
    return mpirun([argv, argv])


def test_defect7_stray_phys_to_log_value_is_named_on_every_rank(tmp_path):
    library, plan = layer(tmp_path, "placed", physical_experts=16)
    done, elapsed = run_driver(tmp_path, library, plan, "stray-phys-to-log")
    assert done.returncode != 0
    assert_no_crash(done, elapsed)
    for message in every_rank_error(done, 2):
        assert "placement: phys_to_log[0] = 1000 is not an expert of the 16" in message, message
        assert "has no replica" not in message, message


def test_defect1_nan_input_never_crashes_a_rank(tmp_path):
    library, plan = layer(tmp_path, "plain")
    done, elapsed = run_driver(tmp_path, library, plan, "nan-input")
    assert_no_crash(done, elapsed)
    if done.returncode == 0:  # the compiler routes NaN scores deterministically
        assert done.stderr.count("returned") == 2, done.stderr
        assert "other rows finite: True" in done.stderr, done.stderr
    else:  # else every rank fails naming the tensor, index and value
        for message in every_rank_error(done, 2):
            assert "expert_ids[" in message and "is not an expert of the 16" in message, message
