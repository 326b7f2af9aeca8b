"""Deterministic example inputs and weights for a layer plan (from moe-compile --plan)."""
import ml_dtypes
import numpy as np

DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}


def quantize_fp8_blocks(w, block):
    """DeepSeek-V3's FP8 weight format for [E, M, K] weights: per block of
    `block = (rows, cols)` (partial at the edges), scale = amax / 448 and
    codes = e4m3(w / scale). Returns (codes as ml_dtypes.float8_e4m3fn,
    f32 scales [E, ceil(M / rows), ceil(K / cols)])."""
    e, m, k = w.shape
    rows, cols = block
    br, bc = -(-m // rows), -(-k // cols)
    padded = np.zeros((e, br * rows, bc * cols), np.float32)
    padded[:, :m, :k] = w
    tiles = padded.reshape(e, br, rows, bc, cols)
    scales = np.maximum(np.abs(tiles).max(axis=(2, 4)), 1e-12).astype(np.float32) / 448.0
    codes = (tiles / scales[:, :, None, :, None]).astype(ml_dtypes.float8_e4m3fn)
    return codes.reshape(e, br * rows, bc * cols)[:, :m, :k].copy(), scales


def dequantize_fp8_blocks(codes, scales, block):
    """The f32 weights that FP8 codes and their block scales stand for."""
    rows, cols = block
    m, k = codes.shape[1:]
    expanded = np.repeat(np.repeat(scales, rows, axis=1), cols, axis=2)[:, :m, :k]
    return codes.astype(np.float32) * expanded


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
    expert_weights = plan.get("expert_weights", {})
    if expert_weights.get("format") == "fp8_e4m3":
        for name in ("w13", "w2"):
            weights[name], weights[name + "_scale"] = quantize_fp8_blocks(
                weights[name].astype(np.float32), expert_weights["block"])
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
