"""Shared pieces of the CPU benchmarks: seeded weights, the numpy and torch
baselines, FLOP counts and the timer.

Import this only in a process whose thread settings are final: numpy and
torch read OMP_NUM_THREADS / OPENBLAS_NUM_THREADS when they load.
"""
import json
import os
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "python"))

BF16 = ml_dtypes.bfloat16
# "fp8": bf16 activations, FP8 E4M3 expert weights in blocks of FP8_BLOCK
# (DeepSeek-V3's checkpoint format).
NP_DTYPE = {"f32": np.float32, "bf16": BF16, "fp8": BF16}
FP8_BLOCK = (128, 128)


# ---------------------------------------------------------------- weights

def fp8_config(config, work):
    """A copy of `config` whose expert weights are FP8 in blocks of FP8_BLOCK
    (a quantization_config as DeepSeek-V3's checkpoints have)."""
    text = json.loads(Path(config).read_text())
    text["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                   "weight_block_size": list(FP8_BLOCK)}
    path = Path(work) / f"{Path(config).stem}-fp8.json"
    path.write_text(json.dumps(text))
    return path


def _bf16_exact(a):
    """Rounds f32 values to bf16 in place of f32: the f32 and bf16 layers then
    see exactly the same numbers, and one float64 reference serves both."""
    return a.astype(BF16).astype(np.float32)


def _normal(seed, *stream_and_shape):
    *stream, shape = stream_and_shape
    rng = np.random.default_rng([seed, *stream])
    return rng.standard_normal(shape, dtype=np.float32)


def make_weights(plan, seed=0, experts=None):
    """f32 weights (bf16-representable) in the plan's parameter names, scaled
    by 1/sqrt(fan_in) so that hidden states and outputs are O(1). Expert e is
    drawn from its own stream, so an EP rank can make only its `experts`."""
    h, e, i = plan["hidden_size"], plan["experts"], plan["intermediate_size"]
    experts = range(e) if experts is None else list(experts)
    w = {"router_weight": _bf16_exact(_normal(seed, 0, (e, h)) / np.float32(np.sqrt(h)))}
    if plan["routing"]["correction_bias"]:
        w["correction_bias"] = balancing_bias(plan, w["router_weight"], seed)
    w13 = np.empty((len(experts), 2 * i, h), np.float32)
    w2 = np.empty((len(experts), h, i), np.float32)
    for n, expert in enumerate(experts):
        w13[n] = _bf16_exact(_normal(seed, 1, expert, 0, (2 * i, h)) * np.float32(1 / np.sqrt(h)))
        w2[n] = _bf16_exact(_normal(seed, 1, expert, 1, (h, i)) * np.float32(1 / np.sqrt(i)))
    w["w13"], w["w2"] = w13, w2
    s = plan["shared_intermediate_size"]
    if s:
        w["shared_w13"] = _bf16_exact(_normal(seed, 3, 0, (2 * s, h)) / np.float32(np.sqrt(h)))
        w["shared_w2"] = _bf16_exact(_normal(seed, 3, 1, (h, s)) / np.float32(np.sqrt(s)))
    return w


def balancing_bias(plan, router_weight, seed, tokens=4096, steps=150, rate=0.004):
    """DeepSeek-V3's correction bias as its training leaves it: starting from
    0.1 N(0,1), each step lowers the bias of the experts chosen more often
    than the mean and raises the others' by `rate` (the aux-loss-free update),
    on calibration tokens of their own stream. A random bias alone would
    send a third of the choices to one rank of four, an imbalance no
    trained model has."""
    bias = 0.1 * _normal(seed, 2, (plan["experts"],))
    x = _bf16_exact(_normal(seed, 5, (tokens, plan["hidden_size"])))
    logits = x @ router_weight.T
    for _ in range(steps):
        ids, _ = numpy_topk(logits, plan["routing"], bias)
        load = np.bincount(ids.ravel(), minlength=plan["experts"])
        bias -= np.float32(rate) * np.sign(load - load.mean()).astype(np.float32)
    return bias.astype(np.float32)


def make_tokens(plan, tokens, seed=0, stream=0):
    return _bf16_exact(_normal(seed, 4, stream, tokens, (tokens, plan["hidden_size"])))


def cast(weights, dtype):
    """The layer's arguments in `dtype` (the bias stays f32; with "fp8" the
    routed experts' weights become codes and block scales)."""
    if dtype == "f32":
        return weights
    out = {k: (v if k == "correction_bias" else v.astype(NP_DTYPE[dtype]))
           for k, v in weights.items()}
    if dtype == "fp8":
        from moec.weights import quantize_fp8_blocks
        for name in ("w13", "w2"):
            out[name], out[name + "_scale"] = quantize_fp8_blocks(weights[name], FP8_BLOCK)
    return out


def dequantized(weights):
    """f32 weights holding the values of cast(weights, "fp8")."""
    from moec.weights import dequantize_fp8_blocks
    fp8 = cast(weights, "fp8")
    out = {k: v.astype(np.float32) for k, v in fp8.items() if not k.endswith("_scale")}
    for name in ("w13", "w2"):
        out[name] = dequantize_fp8_blocks(fp8[name], fp8[name + "_scale"], FP8_BLOCK)
    return out


# ---------------------------------------------------------------- FLOPs

def layer_flops(plan, tokens):
    """Multiply-adds x2 of the router, the routed experts and the shared expert."""
    h, e, i, k = plan["hidden_size"], plan["experts"], plan["intermediate_size"], plan["top_k"]
    s = plan["shared_intermediate_size"]
    return 2 * tokens * (e * h + k * 3 * i * h + 3 * s * h)


def sgemm_peak(n=2048, repeats=7):
    """Best f32 GEMM rate of numpy (OpenBLAS) at the current thread count, FLOP/s."""
    a = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(2).standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    np.matmul(a, b, out=c)
    best = min(_timed(lambda: np.matmul(a, b, out=c)) for _ in range(repeats))
    return 2.0 * n ** 3 / best


# ---------------------------------------------------------------- timing

def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# After a call, a library's idle worker threads keep spinning for a while
# (OpenBLAS about 2^28 cycles, LLVM's OpenMP 200 ms): with several threads
# they would take the cores of whatever is measured next (a compiled T = 1
# layer on 2 threads measured 3x slower right after numpy).
SETTLE_S = 0.3


def measure(fn, repeats, budget_s=0.0):
    """After SETTLE_S of quiet, one warm-up call, then up to `repeats` timed
    calls. With a budget, fewer calls when they would not fit (at least one; a
    call longer than the whole budget is timed once, warm-up included).
    Returns (result, seconds list)."""
    time.sleep(SETTLE_S)
    start = time.perf_counter()
    result = fn()
    first = time.perf_counter() - start
    if budget_s and first >= budget_s:
        return result, [first]
    if budget_s:
        repeats = max(1, min(repeats, int((budget_s - first) / max(first, 1e-9))))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, times


def summary(times):
    return {"min_s": min(times), "median_s": float(np.median(times)), "runs": len(times)}


def rel_error(y, ref):
    scale = float(np.max(np.abs(ref))) if ref.size else 1.0
    err = float(np.max(np.abs(np.asarray(y, np.float64) - ref))) if ref.size else 0.0
    return {"max_abs": err, "max_rel": err / scale if scale else 0.0}


# ---------------------------------------------------------------- numpy baseline

def numpy_route(x, router_weight, routing, bias=None):
    """f32 routing with argpartition top-k; (ids [T,k], weights [T,k] f32)."""
    logits = x @ router_weight.T
    return numpy_topk(logits, routing, bias)


def numpy_topk(logits, routing, bias=None):
    k = routing["top_k"]
    if routing["score"] == "softmax":
        scores = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
    else:
        scores = 1.0 / (1.0 + np.exp(-logits))
    selection = scores + bias if bias is not None else scores
    tokens, experts = scores.shape
    groups = routing.get("n_group", 1)
    if groups > 1:
        grouped = selection.reshape(tokens, groups, experts // groups)
        group_score = np.partition(grouped, -2, axis=-1)[..., -2:].sum(axis=-1)
        keep = np.argpartition(-group_score, routing["topk_group"] - 1, axis=-1)
        drop = keep[:, routing["topk_group"]:]
        selection = selection.copy().reshape(tokens, groups, experts // groups)
        np.put_along_axis(selection, drop[..., None], -np.inf, axis=1)
        selection = selection.reshape(tokens, experts)
    ids = (np.argpartition(-selection, k - 1, axis=-1)[:, :k] if k < experts
           else np.broadcast_to(np.arange(experts), (tokens, experts)).copy())
    weights = np.take_along_axis(scores, ids, axis=-1)
    if routing.get("normalize", False):
        weights /= weights.sum(axis=-1, keepdims=True)
    scale = routing.get("routed_scaling_factor", 1.0)
    if scale != 1.0:
        weights *= np.float32(scale)
    return ids.astype(np.int32), weights.astype(np.float32)


def numpy_dispatch(x, ids):
    """Stable argsort by expert: (rows [T*k,H], row_expert [T*k], slot [T,k])."""
    flat = ids.ravel()
    order = np.argsort(flat, kind="stable")
    rows = x[order // ids.shape[1]]
    slot = np.empty_like(order)
    slot[order] = np.arange(order.size)
    return rows, flat[order], slot.reshape(ids.shape).astype(np.int32)


def _silu_mul(h):
    half = h.shape[-1] // 2
    gate, up = h[:, :half], h[:, half:]
    return gate / (1.0 + np.exp(-gate)) * up


def numpy_layer(x, w, plan):
    """The layer in f32 numpy: routing, then one GEMM pair per hit expert."""
    routing = plan["routing"]
    k, experts = routing["top_k"], plan["experts"]
    ids, weights = numpy_route(x, w["router_weight"], routing, w.get("correction_bias"))
    flat = ids.ravel()
    order = np.argsort(flat, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(flat, minlength=experts))])
    token_of = order // k
    weight_of = weights.ravel()[order]
    y = np.zeros_like(x)
    for e in np.nonzero(bounds[1:] > bounds[:-1])[0]:
        s, t = bounds[e], bounds[e + 1]
        tok = token_of[s:t]  # distinct: a token picks an expert once
        out = _silu_mul(x[tok] @ w["w13"][e].T) @ w["w2"][e].T
        y[tok] += out * weight_of[s:t, None]
    if "shared_w13" in w:
        y += _silu_mul(x @ w["shared_w13"].T) @ w["shared_w2"].T
    return y


# ---------------------------------------------------------------- torch baseline

def torch_status():
    try:
        import torch  # noqa: F401
        return f"torch {torch.__version__}"
    except Exception as error:  # not installed, or a broken install
        return f"torch: not installed ({type(error).__name__})"


class TorchLayer:
    """The layer in torch, written like HuggingFace's Qwen3MoeSparseMoeBlock /
    DeepseekV3MoE forward (one-hot expert mask, loop over hit experts,
    index_add_), in the layer's dtype (f32 or bf16) on the CPU."""

    def __init__(self, w, plan, dtype):
        import torch
        self.torch = torch
        self.plan = plan
        self.dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
        i = plan["intermediate_size"]
        t = {k: torch.from_numpy(v) for k, v in w.items()}
        self.gate = t["router_weight"].to(self.dtype)
        self.bias = t.get("correction_bias")
        self.experts = [(t["w13"][e, :i].to(self.dtype), t["w13"][e, i:].to(self.dtype),
                         t["w2"][e].to(self.dtype)) for e in range(plan["experts"])]
        s = plan["shared_intermediate_size"]
        self.shared = ((t["shared_w13"][:s].to(self.dtype), t["shared_w13"][s:].to(self.dtype),
                        t["shared_w2"].to(self.dtype)) if s else None)

    def _mlp(self, x, weights):
        f = self.torch.nn.functional
        gate, up, down = weights
        return f.linear(f.silu(f.linear(x, gate)) * f.linear(x, up), down)

    def _route(self, x):
        torch, r = self.torch, self.plan["routing"]
        logits = torch.nn.functional.linear(x, self.gate)
        if r["score"] == "softmax":  # Qwen3MoeSparseMoeBlock
            scores = torch.softmax(logits, dim=1, dtype=torch.float)
            weights, ids = torch.topk(scores, r["top_k"], dim=-1)
        else:  # DeepseekV3TopkRouter.get_topk_indices
            scores = logits.float().sigmoid()
            choice = scores + self.bias if self.bias is not None else scores
            groups = r["n_group"]
            if groups > 1:
                t, e = choice.shape
                group_scores = choice.view(t, groups, e // groups).topk(2, dim=-1)[0].sum(-1)
                group_idx = torch.topk(group_scores, k=r["topk_group"], dim=-1, sorted=False)[1]
                mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
                mask = mask.unsqueeze(-1).expand(t, groups, e // groups).reshape(t, e)
                choice = choice.masked_fill(~mask.bool(), float("-inf"))
            ids = torch.topk(choice, k=r["top_k"], dim=-1, sorted=False)[1]
            weights = scores.gather(1, ids)
        if r["normalize"]:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights * r["routed_scaling_factor"]
        return ids, weights.to(x.dtype)

    def __call__(self, x_np):
        torch = self.torch
        with torch.inference_mode():
            x = torch.from_numpy(x_np).to(self.dtype)
            ids, weights = self._route(x)
            y = torch.zeros_like(x)
            mask = torch.nn.functional.one_hot(ids, num_classes=self.plan["experts"]).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
            for e in hit.flatten().tolist():
                choice, tok = torch.where(mask[e])
                out = self._mlp(x[tok], self.experts[e]) * weights[tok, choice, None]
                y.index_add_(0, tok, out.to(x.dtype))
            if self.shared is not None:
                y = y + self._mlp(x, self.shared)
            return y.float().numpy()


def thread_env(threads):
    """Environment that pins every library of a child process to `threads`."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                 "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
        env[name] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), str(HERE),
                                                      env.get("PYTHONPATH", "")]))
    return env


def pin_threads(threads):
    """Also through threadpoolctl and torch when present (belt and braces)."""
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(threads)
    except ImportError:
        pass
    try:
        import torch
        torch.set_num_threads(threads)
    except Exception:
        pass


class HFTorchLayer:
    """transformers' own Qwen3MoeSparseMoeBlock / DeepseekV3MoE (an implementation
    nobody here wrote), loaded with the benchmark's weights, in the layer's
    dtype on the CPU. Raises when transformers is missing or its modules'
    parameters do not have the expected layout."""

    def __init__(self, w, plan, dtype):
        import torch
        import transformers
        self.torch = torch
        self.version = f"transformers {transformers.__version__}"
        transformers.logging.set_verbosity_error()
        self.dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
        r, h, i, e = plan["routing"], plan["hidden_size"], plan["intermediate_size"], plan["experts"]
        common = dict(hidden_size=h, moe_intermediate_size=i, num_experts_per_tok=r["top_k"],
                      norm_topk_prob=r["normalize"], hidden_act="silu")
        if plan["model_type"] == "qwen3_moe":
            from transformers import Qwen3MoeConfig
            from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
            block = Qwen3MoeSparseMoeBlock(Qwen3MoeConfig(num_experts=e, **common))
        elif plan["model_type"] == "deepseek_v3":
            from transformers import DeepseekV3Config
            from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
            s = plan["shared_intermediate_size"]
            block = DeepseekV3MoE(DeepseekV3Config(
                n_routed_experts=e, n_group=r["n_group"], topk_group=r["topk_group"],
                n_shared_experts=s // i, routed_scaling_factor=r["routed_scaling_factor"],
                **common))
        else:
            raise ValueError(f"no transformers module for {plan['model_type']}")
        state = {"gate.weight": w["router_weight"], "experts.gate_up_proj": w["w13"],
                 "experts.down_proj": w["w2"]}
        if "correction_bias" in w:
            state["gate.e_score_correction_bias"] = w["correction_bias"]
        if "shared_w13" in w:
            s = plan["shared_intermediate_size"]
            state.update({"shared_experts.gate_proj.weight": w["shared_w13"][:s],
                          "shared_experts.up_proj.weight": w["shared_w13"][s:],
                          "shared_experts.down_proj.weight": w["shared_w2"]})
        own = dict(block.named_parameters())
        own.update(block.named_buffers())
        if set(own) != set(state) or any(tuple(own[k].shape) != v.shape for k, v in state.items()):
            raise ValueError("unexpected parameter layout: "
                             + str({k: tuple(v.shape) for k, v in own.items()}))
        block.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
        self.block = block.to(self.dtype).eval()
        if "correction_bias" in w:  # DeepSeek keeps the bias in f32
            self.block.gate.e_score_correction_bias.data = torch.from_numpy(w["correction_bias"])

    def __call__(self, x_np):
        torch = self.torch
        with torch.inference_mode():
            x = torch.from_numpy(x_np).to(self.dtype)[None]  # [batch 1, T, H]
            y = self.block(x)
            y = y[0] if isinstance(y, tuple) else y
            return y.reshape(x_np.shape).float().numpy()


def make_torch_layer(w, plan, dtype, prefer_hf=True):
    """(layer, description): transformers' module when it loads, else TorchLayer."""
    if prefer_hf:
        try:
            layer = HFTorchLayer(w, plan, dtype)
            return layer, f"torch = {layer.version} module"
        except Exception as error:
            note = f"transformers unusable ({type(error).__name__}: {str(error)[:80]})"
    else:
        note = "own"
    return TorchLayer(w, plan, dtype), f"torch = HF-style loop written here; {note}"


def find_key(obj, key):
    """The first value of `key` anywhere in nested JSON, else None."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        values = obj.values()
    elif isinstance(obj, list):
        values = obj
    else:
        return None
    for v in values:
        found = find_key(v, key)
        if found is not None:
            return found
    return None
