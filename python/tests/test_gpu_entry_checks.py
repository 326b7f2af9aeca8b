"""The GPU entry refuses buffers its kernels would misread or overrun, before
it launches anything: a strided or offset view (moe-check-entry-memrefs,
as on the CPU) and an output y with other rows than x (moe-gpu-host-abi;
its kernels write T rows, so a shorter y was written past its end). Run on
the CPU by test/Integration/GPU/kernel_emulator.py, which interprets the
entry as `moe-compile --emit=launches` leaves it (the library's host code,
its kernels still gpu.launch regions)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from moec.toolchain import ROOT, tool
from moec.weights import make_inputs

sys.path.insert(0, str(ROOT / "test" / "Integration" / "GPU"))
import kernel_emulator as emulator  # noqa: E402

pytestmark = pytest.mark.emulation
TOKENS = 8


@pytest.fixture(scope="module", params=[[], ["--decode-max-tokens", "4"]],
                ids=["one-variant", "phases"])
def layer(request, tmp_path_factory):
    """The entry as built, and its arguments: with phase variants the result
    is the chosen variant's buffer, which the entry copies into y."""
    out = tmp_path_factory.mktemp("gpu-entry")
    ir, plan = out / "layer.mlir", out / "plan.json"
    subprocess.run([tool("moe-compile"), "--config",
                    str(ROOT / "examples" / "qwen3-moe-tiny" / "config.json"), "--dtype", "bf16",
                    "--target", "cuda", "--emit=launches", "--plan", str(plan), "-o", str(ir),
                    *request.param], check=True)
    plan = json.loads(plan.read_text())
    x, weights = make_inputs(plan, TOKENS, seed=1)
    args = [np.array(0, np.int32) if p["name"] == "phase" else x if p["name"] == "x"
            else weights[p["name"]] for p in plan["entry_point"]["parameters"]]
    return ir.read_text(), args


def call(text, args, y):
    sized = emulator.run_function(text, "moe_layer_workspace_bytes", np.array(TOKENS, np.int64))
    workspace = np.zeros(int(np.asarray(sized.results[0]).ravel()[0]), np.uint8)
    return emulator.run_function(text, "moe_layer", *args, y, workspace, np.zeros(1, np.int64))


def test_the_dense_call_runs(layer):
    text, args = layer
    y = np.zeros(args[0].shape, args[0].dtype)
    host = call(text, args, y)
    assert host.launches and np.all(np.isfinite(y.astype(np.float32)))
    assert np.any(y.astype(np.float32) != 0)


@pytest.mark.parametrize("rows", [TOKENS - 5, TOKENS + 1])
def test_y_with_other_rows_than_x_is_refused_before_it_is_written(layer, rows):
    text, args = layer
    y = np.zeros((rows, args[0].shape[1]), args[0].dtype)
    with pytest.raises(emulator.KernelError) as failed:
        call(text, args, y)
    assert ("moe_layer: y must have the shape [T, 64] the call computes, T its token count "
            "(the rows of x)") in str(failed.value)
    assert not np.any(y.astype(np.float32) != 0)  # nothing written


def test_a_strided_x_is_refused_naming_it(layer):
    text, args = layer
    wide = np.zeros((TOKENS, 2 * args[0].shape[1]), args[0].dtype)
    wide[:, ::2] = args[0]
    strided = wide[:, ::2]  # the values of x, every other element
    y = np.zeros(args[0].shape, args[0].dtype)
    with pytest.raises(emulator.KernelError) as failed:
        call(text, [strided, *args[1:]], y)
    assert ("moe_layer: x must be a dense row-major array of shape [?, 64] at offset 0"
            in str(failed.value))
