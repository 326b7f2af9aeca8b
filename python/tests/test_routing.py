"""Routing fidelity: the compiled moe.route against the independent numpy reference."""
import zlib

import ml_dtypes
import numpy as np
import pytest

from moec import reference
from moec.memref import CompiledFunction
from moec.toolchain import compile_mlir

# (name, experts, routing) — Qwen3/Mixtral style and DeepSeek-V3 style.
CASES = [
    ("softmax_top2", 8, dict(score="softmax", top_k=2, normalize=True)),
    ("softmax_top4_raw", 16, dict(score="softmax", top_k=4, normalize=False)),
    ("softmax_all_experts", 4, dict(score="softmax", top_k=4, normalize=True)),
    ("sigmoid_groups_bias", 32, dict(score="sigmoid", top_k=4, n_group=8, topk_group=4,
                                     normalize=True, routed_scaling_factor=2.5, bias=True)),
    ("sigmoid_groups_one_group", 16, dict(score="sigmoid", top_k=2, n_group=4, topk_group=1,
                                          normalize=True, routed_scaling_factor=1.5, bias=True)),
    ("sigmoid_no_groups", 16, dict(score="sigmoid", top_k=3, normalize=False, bias=False)),
]
HIDDEN, TOKENS = 32, 40
# BF16 inputs are rounded once; routing arithmetic is f32 in both, so the same
# bound holds when the reference is fed the same bf16 values.
RELATIVE_TOLERANCE = {"f32": 1e-5, "bf16": 1e-5}
MLIR_TYPE = {"f32": "f32", "bf16": "bf16"}
NP_TYPE = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}


def route_source(experts, routing, dtype):
    t = MLIR_TYPE[dtype]
    fields = [routing["score"], f"top_k = {routing['top_k']}"]
    if routing.get("n_group", 1) > 1:
        fields.append(f"n_group = {routing['n_group']}, topk_group = {routing['topk_group']}")
    if routing.get("normalize"):
        fields.append("normalize")
    if routing.get("routed_scaling_factor", 1.0) != 1.0:
        fields.append(f"scale = {routing['routed_scaling_factor']}")
    bias_arg, bias_use, bias_type = "", "", ""
    if routing.get("bias"):
        fields.append("correction_bias")
        bias_arg = f", %b: tensor<{experts}xf32>"
        bias_use = " bias %b"
        bias_type = f", tensor<{experts}xf32>"
    k = routing["top_k"]
    return f"""
func.func @route(%x: tensor<?x{HIDDEN}x{t}>, %w: tensor<{experts}x{HIDDEN}x{t}>{bias_arg})
    -> (tensor<?x{k}xi32>, tensor<?x{k}xf32>) attributes {{llvm.emit_c_interface}} {{
  %ids, %weights = moe.route %x, %w{bias_use} routing <{", ".join(fields)}>
    : (tensor<?x{HIDDEN}x{t}>, tensor<{experts}x{HIDDEN}x{t}>{bias_type})
      -> (tensor<?x{k}xi32>, tensor<?x{k}xf32>)
  return %ids, %weights : tensor<?x{k}xi32>, tensor<?x{k}xf32>
}}
"""


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("name,experts,routing", CASES, ids=[c[0] for c in CASES])
def test_route_matches_reference(tmp_path, name, experts, routing, dtype):
    library = compile_mlir(route_source(experts, routing, dtype), tmp_path, f"{name}_{dtype}")
    fn = CompiledFunction(library, "route", [(2, np.int32), (2, np.float32)])
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.standard_normal((TOKENS, HIDDEN)).astype(NP_TYPE[dtype])
    w = (rng.standard_normal((experts, HIDDEN)) / np.sqrt(HIDDEN)).astype(NP_TYPE[dtype])
    args = [x, w]
    bias = None
    if routing.get("bias"):
        bias = (0.1 * rng.standard_normal(experts)).astype(np.float32)
        args.append(bias)
    ids, weights = fn(*args)
    ref_ids, ref_weights = reference.route(x, w, routing, bias)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(weights, ref_weights, rtol=RELATIVE_TOLERANCE[dtype], atol=0)


def test_ties_go_to_the_lower_expert_id(tmp_path):
    """Equal scores: the lower expert id is chosen first (as a stable sort does)."""
    routing = dict(score="softmax", top_k=2, normalize=True)
    library = compile_mlir(route_source(8, routing, "f32"), tmp_path, "ties")
    fn = CompiledFunction(library, "route", [(2, np.int32), (2, np.float32)])
    x = np.ones((3, HIDDEN), np.float32)
    w = np.zeros((8, HIDDEN), np.float32)  # every logit is 0
    w[5] = 0.01
    ids, weights = fn(x, w)
    np.testing.assert_array_equal(ids, [[5, 0]] * 3)
    np.testing.assert_array_equal(ids, reference.route(x, w, routing)[0])


def test_zero_tokens(tmp_path):
    routing = dict(score="sigmoid", top_k=2, n_group=4, topk_group=2, normalize=True, bias=True)
    library = compile_mlir(route_source(8, routing, "f32"), tmp_path, "empty")
    fn = CompiledFunction(library, "route", [(2, np.int32), (2, np.float32)])
    ids, weights = fn(np.zeros((0, HIDDEN), np.float32), np.ones((8, HIDDEN), np.float32),
                      np.zeros(8, np.float32))
    assert ids.shape == (0, 2) and weights.shape == (0, 2)
