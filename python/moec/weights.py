"""Deterministic example inputs and weights for a layer plan (from moe-compile --plan)."""
import ml_dtypes
import numpy as np

DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}


def make_inputs(plan, tokens, seed):
    """Returns (x, weights) with weights in the entry point's argument order."""
    rng = np.random.default_rng(seed)
    dtype = DTYPES[plan["element_type"]]
    h, e, i = plan["hidden_size"], plan["experts"], plan["intermediate_size"]

    def dense(*shape):
        fan_in = shape[-1]
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(dtype)

    def bias(*shape, dtype=dtype):
        return (0.1 * rng.standard_normal(shape)).astype(dtype)

    weights = {"router_weight": dense(e, h)}
    if plan["routing"]["correction_bias"]:
        weights["correction_bias"] = bias(e, dtype=np.float32)
    if plan.get("router_bias"):
        weights["router_bias"] = bias(e, dtype=np.float32)
    weights["w13"] = dense(e, 2 * i, h)
    weights["w2"] = dense(e, h, i)
    if plan.get("expert_bias"):
        weights["w13_bias"] = bias(e, 2 * i)
        weights["w2_bias"] = bias(e, h)
    s = plan["shared_intermediate_size"]
    if s:
        weights["shared_w13"] = dense(2 * s, h)
        weights["shared_w2"] = dense(h, s)
        if plan.get("shared_gate"):
            weights["shared_gate"] = dense(1, h)
    x = rng.standard_normal((tokens, h)).astype(dtype)
    return x, weights
