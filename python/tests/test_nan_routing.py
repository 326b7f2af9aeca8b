"""A NaN score routes deterministically (issue 9).

The rank-based top-k compares scores with a total order: NaN ranks below
every number, ties (equal scores, or two NaNs) go to the lower expert id. So
a token whose scores are NaN still gets k distinct expert ids in [0, E) —
before, its ranks collided and the ids were sums of expert indices — and the
other tokens are untouched.
"""
import ml_dtypes
import numpy as np
import pytest

from moec import reference
from moec.layer import run_layer
from moec.memref import CompiledFunction
from moec.toolchain import ROOT, compile_config, compile_mlir
from moec.weights import make_inputs

HIDDEN, TOKENS = 16, 12
NP_TYPE = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}
# (name, experts, routing): plain softmax, all experts, sigmoid with groups and bias.
CASES = [
    ("softmax_top2", 8, dict(score="softmax", top_k=2, normalize=True)),
    ("softmax_all", 4, dict(score="softmax", top_k=4, normalize=False)),
    ("sigmoid_top3", 8, dict(score="sigmoid", top_k=3, normalize=True)),
    ("sigmoid_groups_bias", 16, dict(score="sigmoid", top_k=4, n_group=4, topk_group=2,
                                     normalize=True, routed_scaling_factor=2.5, bias=True)),
]


def route_source(experts, routing, dtype):
    t = dtype
    fields = [routing["score"], f"top_k = {routing['top_k']}"]
    if routing.get("n_group", 1) > 1:
        fields.append(f"n_group = {routing['n_group']}, topk_group = {routing['topk_group']}")
    if routing.get("normalize"):
        fields.append("normalize")
    if routing.get("routed_scaling_factor", 1.0) != 1.0:
        fields.append(f"scale = {routing['routed_scaling_factor']}")
    bias_arg = bias_use = bias_type = ""
    if routing.get("bias"):
        fields.append("correction_bias")
        bias_arg, bias_use = f", %b: tensor<{experts}xf32>", " bias %b"
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


def assert_distinct_valid_ids(ids, experts, k):
    assert ids.shape[1] == k
    assert ids.min() >= 0 and ids.max() < experts, ids
    for row in ids:
        assert len(set(row.tolist())) == k, ids


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("name,experts,routing", CASES, ids=[c[0] for c in CASES])
def test_nan_scores_route_to_distinct_valid_experts(tmp_path, name, experts, routing, dtype):
    library = compile_mlir(route_source(experts, routing, dtype), tmp_path, f"nan_{name}_{dtype}")
    fn = CompiledFunction(library, "route", [(2, np.int32), (2, np.float32)])
    rng = np.random.default_rng(7)
    k = routing["top_k"]
    x = rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
    w = (rng.standard_normal((experts, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(experts)).astype(np.float32) if routing.get("bias") else None
    nan_rows = [1, 4, 5, 9]
    x[1] = np.nan          # a whole row
    x[4, 3] = np.nan       # one element: every logit of the token is NaN
    x[5, :8] = np.nan
    x[9, HIDDEN - 1] = np.nan
    args = [x.astype(NP_TYPE[dtype]), w.astype(NP_TYPE[dtype])] + ([bias] if bias is not None else [])
    ids, weights = fn(*args)
    assert_distinct_valid_ids(ids, experts, k)
    # Deterministic: the same NaNs give the same ids.
    again, _ = fn(*args)
    np.testing.assert_array_equal(ids, again)
    # A row of NaN scores ties everywhere: the lowest ids, best first (no groups).
    if routing.get("n_group", 1) == 1 and bias is None:
        for t in nan_rows:
            np.testing.assert_array_equal(ids[t], np.arange(k))
    # Tokens without NaN are routed exactly as the reference routes them.
    clean = [t for t in range(TOKENS) if t not in nan_rows]
    ref_ids, ref_weights = reference.route(args[0][clean], args[1], routing, bias)
    np.testing.assert_array_equal(ids[clean], ref_ids)
    np.testing.assert_allclose(weights[clean], ref_weights, rtol=1e-5, atol=0)


@pytest.mark.parametrize("name,experts,routing", CASES, ids=[c[0] for c in CASES])
def test_nan_in_router_weights_and_bias(tmp_path, name, experts, routing):
    """NaN scores for some experts only (NaN router rows, NaN bias entries): those
    experts rank last, and every token still gets k distinct valid ids."""
    library = compile_mlir(route_source(experts, routing, "f32"), tmp_path, f"nanw_{name}")
    fn = CompiledFunction(library, "route", [(2, np.int32), (2, np.float32)])
    rng = np.random.default_rng(11)
    k = routing["top_k"]
    x = rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
    w = (rng.standard_normal((experts, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)
    nan_experts = [0, experts - 1]
    w[nan_experts] = np.nan
    args = [x, w]
    if routing.get("bias"):
        bias = (0.1 * rng.standard_normal(experts)).astype(np.float32)
        bias[1] = np.nan
        nan_experts.append(1)
        args.append(bias)
    ids, _ = fn(*args)
    assert_distinct_valid_ids(ids, experts, k)
    finite = experts - len(nan_experts)
    if routing["score"] == "sigmoid" and routing.get("n_group", 1) == 1 and k <= finite:
        # Sigmoid scores are per expert: the NaN experts come after every number.
        assert not np.isin(ids, nan_experts).any(), ids


EXAMPLES = sorted((ROOT / "examples").glob("*/config.json"))


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
def test_layer_with_nan_tokens(tmp_path, config):
    """A whole compiled layer: NaN rows and NaN elements in x do not crash the call
    and leave every other token's output equal to the reference's."""
    library, plan = compile_config(config, tmp_path, "f32")
    x, weights = make_inputs(plan, 10, seed=5)
    nan_rows = [0, 3, 7]
    x[0] = np.nan
    x[3, 1] = np.nan
    x[7, -1] = np.nan
    y = run_layer(library, plan, x, weights).astype(np.float64)
    assert y.shape == x.shape
    clean = [t for t in range(x.shape[0]) if t not in nan_rows]
    assert np.isfinite(y[clean]).all()
    ref = reference.layer(x[clean], weights, plan)
    assert np.max(np.abs(y[clean] - ref)) / np.max(np.abs(ref)) <= 1e-5
