"""The compiled C entry checks each memref descriptor against what the layer
reads (dense row-major, offset 0, the compiled sizes): a strided view, an
offset or another size aborts naming the argument (moe-check-entry-memrefs)
where it used to give a wrong y. Each call runs in a child process, since
the entry aborts."""
import os
import subprocess
import sys

import pytest

from moec.toolchain import ROOT, compile_config

DEEPSEEK = ROOT / "examples" / "deepseek-v3-tiny" / "config.json"

# Calls _mlir_ciface_moe_layer with the descriptors of x and the weights,
# one of them changed as `case` says; prints y's error against the numpy
# reference of the arrays the descriptors describe.
CHILD = r"""
import ctypes, json, sys
import numpy as np
from moec import reference
from moec.memref import CompiledFunction, take_result, to_descriptor
from moec.weights import make_inputs

library, plan_path, case = sys.argv[1:]
plan = json.load(open(plan_path))
x, weights = make_inputs(plan, 6, seed=3)
h = plan["hidden_size"]
keep = []  # arrays the descriptors point into
if case == "strided_x":  # every other row of a bigger array
    big = np.zeros((12, h), x.dtype)
    big[::2] = x
    keep.append(big)
    dx = to_descriptor(big)
    dx.sizes[0], dx.strides[0] = 6, 2 * h
elif case == "one_row_any_stride":  # numpy and torch allow any stride there
    x = np.ascontiguousarray(x[:1])
    dx = to_descriptor(x)
    dx.strides[0] = 12345
elif case == "no_rows":
    x = np.ascontiguousarray(x[:0])
    dx = to_descriptor(x)
    dx.strides[0] = dx.strides[1] = 0
else:
    dx = to_descriptor(x)
descs = {"x": dx, **{n: to_descriptor(w) for n, w in weights.items()}}
if case == "offset_w2":  # w2 one element into a bigger buffer
    w2 = weights["w2"]
    big = np.concatenate([np.zeros(1, w2.dtype), w2.ravel()])
    keep.append(big)
    d = to_descriptor(big.reshape(1, 1, -1))
    d2 = descs["w2"]
    d2.allocated = d2.aligned = d.aligned
    d2.offset = 1
elif case == "short_w13":
    descs["w13"].sizes[1] -= 1
elif case == "negative_tokens":
    dx.sizes[0] = -1
fn = CompiledFunction(library, "moe_layer", [(2, x.dtype)])
out = fn._out_type()
names = [p["name"] for p in plan["entry_point"]["parameters"]]
fn._fn(ctypes.byref(out), *[ctypes.byref(descs[n]) for n in names])
y = take_result(out, x.dtype, fn._free)
if len(x) == 0:
    print("error", 0.0, y.shape)
    sys.exit()
ref = reference.layer(x, weights, plan)
print("error", float(np.abs(y - ref).max() / np.abs(ref).max()), y.shape)
"""


@pytest.fixture(scope="module")
def layer(tmp_path_factory):
    out = tmp_path_factory.mktemp("descriptors")
    library, plan = compile_config(DEEPSEEK, out)
    return library, out / f"{library.stem}.plan.json", plan


def call(layer, case):
    library, plan_path, _ = layer
    return subprocess.run([sys.executable, "-c", CHILD, str(library), str(plan_path), case],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))


@pytest.mark.parametrize("case, argument", [
    ("strided_x", "x must be a dense row-major array of shape [?, 64]"),
    ("negative_tokens", "x must be a dense row-major array of shape [?, 64]"),
    ("offset_w2", "w2 must be a dense row-major array of shape [32, 64, 24]"),
    ("short_w13", "w13 must be a dense row-major array of shape [32, 48, 64]"),
])
def test_a_descriptor_the_layer_would_misread_aborts_naming_it(layer, case, argument):
    done = call(layer, case)
    assert done.returncode != 0, done.stdout
    # cf.assert prints its message on stdout, then aborts
    assert f"moe_layer: {argument} at offset 0" in done.stdout, (done.stdout, done.stderr)
    assert "error" not in done.stdout


@pytest.mark.parametrize("case, rows", [("plain", 6), ("one_row_any_stride", 1),
                                        ("no_rows", 0)])
def test_descriptors_of_what_the_layer_reads_pass(layer, case, rows):
    done = call(layer, case)
    assert done.returncode == 0, done.stdout + done.stderr
    _, error, shape = done.stdout.split(maxsplit=2)
    assert shape.strip() == f"({rows}, 64)"
    assert float(error) <= 1e-5
