"""Independent numpy reference for MoE routing and layers (float64 throughout).

Written from the model definitions (HuggingFace Qwen3-MoE / Mixtral /
DeepSeek-V2/V3 / Qwen2-MoE / Llama 4 / gpt-oss), not from the compiler:
selection by stable argsort, groups by the sum of their two best scores (by
the best with group_score "max"), weights from the unbiased scores.
"""
import numpy as np


def _softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def route(x, router_weight, routing, bias=None, logit_bias=None):
    """Returns (ids [T,k] int32, weights [T,k] float64), best choice first.
    `bias` moves the choice only (DeepSeek-V3); `logit_bias` is added to the
    logits (gpt-oss's router bias)."""
    logits = np.asarray(x, np.float64) @ np.asarray(router_weight, np.float64).T
    if logit_bias is not None:
        logits = logits + np.asarray(logit_bias, np.float64)
    if routing["score"] == "softmax":
        scores = _softmax(logits)
    else:
        scores = 1.0 / (1.0 + np.exp(-logits))
    selection = scores + np.asarray(bias, np.float64) if bias is not None else scores.copy()
    tokens, experts = scores.shape
    groups = routing.get("n_group", 1)
    if groups > 1:
        grouped = selection.reshape(tokens, groups, experts // groups)
        # DeepSeek-V3 ranks a group by its two best scores, V2 by its best.
        best = 1 if routing.get("group_score") == "max" else 2
        group_score = np.sort(grouped, axis=-1)[..., -best:].sum(axis=-1)
        best_groups = np.argsort(-group_score, axis=-1, kind="stable")[:, : routing["topk_group"]]
        keep = np.zeros((tokens, groups), bool)
        np.put_along_axis(keep, best_groups, True, axis=-1)
        selection = np.where(np.repeat(keep, experts // groups, axis=-1), selection, -np.inf)
    ids = np.argsort(-selection, axis=-1, kind="stable")[:, : routing["top_k"]]
    weights = np.take_along_axis(scores, ids, axis=-1)
    if routing.get("normalize", False):
        weights = weights / weights.sum(axis=-1, keepdims=True)
    weights = weights * routing.get("routed_scaling_factor", 1.0)
    return ids.astype(np.int32), weights


def _swiglu_mlp(rows, w13, w2, activation=None, b13=0.0, b2=0.0):
    """rows [N,H] through one expert: w2 . (silu(gate) * up), or gpt-oss's
    clamped SwiGLU (gate clamped above, up both ways, up + 1) with biases."""
    h = rows @ w13.T + b13
    half = h.shape[-1] // 2
    gate, up = h[:, :half], h[:, half:]
    if activation and activation["kind"] == "clamped_swiglu":
        limit, alpha = activation["limit"], activation["alpha"]
        gate = np.minimum(gate, limit)
        up = np.clip(up, -limit, limit)
        return (gate / (1.0 + np.exp(-alpha * gate)) * (up + 1.0)) @ w2.T + b2
    return ((gate / (1.0 + np.exp(-gate))) * up) @ w2.T + b2


def layer(x, weights, plan, expert_rows=None):
    """The MoE block: routed experts weighted by the router, plus shared expert.
    `expert_rows`, when given, maps x's rows [N, H] to the values the routed
    experts receive (e.g. moec.fp8.fake_quantize for an FP8 dispatch)."""
    f64 = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    if "w13_scale" in weights:  # FP8 codes with block scales
        from .weights import dequantize_fp8_blocks
        block = plan["expert_weights"]["block"]
        for name in ("w13", "w2"):
            f64[name] = dequantize_fp8_blocks(weights[name], weights[name + "_scale"],
                                              block).astype(np.float64)
    xs = np.asarray(x, np.float64)
    ids, w = route(xs, f64["router_weight"], plan["routing"], f64.get("correction_bias"),
                   f64.get("router_bias"))
    y = np.zeros_like(xs)
    score_input = plan.get("score_input", False)  # Llama 4: the weight scales the input
    activation = plan.get("activation")
    routed = xs if expert_rows is None else np.asarray(expert_rows(x), np.float64)
    for expert in range(plan["experts"]):
        tok, choice = np.nonzero(ids == expert)
        if len(tok):
            weight = w[tok, choice][:, None]
            biases = {}
            if "w13_bias" in f64:  # gpt-oss
                biases = dict(b13=f64["w13_bias"][expert], b2=f64["w2_bias"][expert])
            mlp = lambda rows: _swiglu_mlp(rows, f64["w13"][expert], f64["w2"][expert],  # noqa: E731
                                           activation, **biases)
            out = mlp(weight * routed[tok]) if score_input else weight * mlp(routed[tok])
            np.add.at(y, tok, out)
    if "shared_w13" in f64:
        shared = _swiglu_mlp(xs, f64["shared_w13"], f64["shared_w2"], activation)
        if "shared_gate" in f64:  # Qwen2-MoE: sigmoid(gate . x) scales it
            shared = shared / (1.0 + np.exp(-(xs @ f64["shared_gate"].T)))
        y += shared
    return y
