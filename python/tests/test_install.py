"""`cmake --install`: the tools, libmoert and its header in a prefix, and a
layer built by the installed moe-compile that links and runs against the
installed runtime (not the build's)."""
import json
import os
import subprocess

import numpy as np

from moec import main as main_job
from moec import reference
from moec.layer import run_layer
from moec.toolchain import ROOT, build_dir
from moec.weights import make_inputs


def test_installed_compiler_builds_a_layer_on_the_installed_runtime(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(build_dir()), "--prefix", str(prefix)],
                   check=True, capture_output=True)
    for tool in ("moe-opt", "moe-compile", "moe-eplb"):
        assert os.access(prefix / "bin" / tool, os.X_OK), tool
    assert (prefix / "include" / "moert" / "moert.h").is_file()
    assert (prefix / "lib" / "libmoert.so").is_file()

    library, plan_path = tmp_path / "layer.so", tmp_path / "layer.plan.json"
    subprocess.run([str(prefix / "bin" / "moe-compile"), "--config",
                    str(ROOT / "examples" / "qwen3-moe-tiny" / "config.json"),
                    "--plan", str(plan_path), "-o", str(library)], check=True)
    linked = subprocess.run(["ldd", str(library)], check=True, capture_output=True,
                            text=True).stdout
    assert f"libmoert.so => {prefix}/lib/libmoert.so" in linked, linked

    plan = json.loads(plan_path.read_text())
    x, weights = make_inputs(plan, 7, seed=7)
    y = run_layer(library, plan, x, weights).astype(np.float64)
    ref = reference.layer(x, weights, plan)
    assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) <= main_job.TOLERANCE["f32"]
