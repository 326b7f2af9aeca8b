"""The verifier is the contract (issue 9): IR it accepts lowers through every pipeline.

A seeded generator writes random valid `moe.layer` functions — static and
dynamic token counts (0 and 1 included), hidden and intermediate sizes down to
1, top-k up to the number of experts, softmax and sigmoid, expert groups,
normalize, scale, correction bias, shared expert, expert- and tensor-parallel
layouts with an expert_rank map or a placement, phases, f32 and bf16 — and
runs each through every pipeline and planning pass of `moe-opt`. A failure of
a layer the verifier accepted is a missing verifier rule or a pass bug.
Layers that break one rule on purpose (sizes out of range, 2^62, wrong
shapes) must be rejected with a diagnostic, never crash; and random numeric
mutations of valid layers must either be rejected by the verifier or lower.
"""
import os
import random
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import pytest

from moec.toolchain import tool

SEED = int(os.environ.get("MOE_CONTRACT_SEED", "9"))
VALID_LAYERS = int(os.environ.get("MOE_CONTRACT_LAYERS", "48"))
MUTANTS = int(os.environ.get("MOE_CONTRACT_MUTANTS", "60"))
WORKERS = 2
CRASH_MARKERS = ("LLVM ERROR", "Stack dump", "PLEASE submit a bug report", "Assertion",
                 "runtime error:",  # UBSan, in a sanitized build (MOE_BUILD_DIR)
                 "UNREACHABLE", "Segmentation fault")


@dataclass
class Layer:
    name: str
    dtype: str = "f32"
    tokens: int | None = None  # None: dynamic
    hidden: int = 8
    intermediate: int = 4
    experts: int = 4
    top_k: int = 2
    score: str = "softmax"
    n_group: int = 1
    topk_group: int = 1
    normalize: bool = False
    scale: float | None = None
    bias: bool = False
    shared: int = 0  # shared expert intermediate size, 0: none
    ep: int = 1
    tp: int = 1
    placement: int = 0  # physical slots, 0: expert_rank (ep > 1) or none
    max_tokens: int | None = None
    phase: str | None = None
    # Deliberate deviations for invalid layers: shapes written as given.
    overrides: dict = field(default_factory=dict)

    def source(self):
        t = self.dtype
        dim = lambda d: "?" if d is None else str(d)  # noqa: E731
        h, i, e = self.hidden, self.intermediate, self.experts
        local = (self.placement or e) // self.ep
        o = self.overrides
        shapes = {
            "x": o.get("x", f"tensor<{dim(self.tokens)}x{h}x{t}>"),
            "wr": o.get("wr", f"tensor<{e}x{h}x{t}>"),
            "bias": o.get("bias", f"tensor<{e}xf32>"),
            "w13": o.get("w13", f"tensor<{local}x{2 * i}x{h}x{t}>"),
            "w2": o.get("w2", f"tensor<{local}x{h}x{i}x{t}>"),
            "s13": o.get("s13", f"tensor<{2 * self.shared}x{h}x{t}>"),
            "s2": o.get("s2", f"tensor<{h}x{self.shared}x{t}>"),
            "er": o.get("er", f"tensor<{e}xi32>"),
            "p2l": o.get("p2l", f"tensor<{self.placement}xi32>"),
            "share": o.get("share", f"tensor<{self.placement}xf32>"),
        }
        args = ["x", "wr"] + (["bias"] if self.bias else []) + ["w13", "w2"]
        if self.shared:
            args += ["s13", "s2"]
        if self.ep > 1 and not self.placement:
            args.append("er")
        if self.placement:
            args += ["p2l", "share"]
        routing = [self.score, f"top_k = {self.top_k}"]
        if self.n_group > 1 or self.topk_group > 1:
            routing.append(f"n_group = {self.n_group}, topk_group = {self.topk_group}")
        if self.normalize:
            routing.append("normalize")
        if self.scale is not None:
            routing.append(f"scale = {self.scale:.8e}")
        if self.bias:
            routing.append("correction_bias")
        attrs = []
        if self.max_tokens is not None:
            attrs.append(f"max_tokens_per_rank = {self.max_tokens} : i64")
        if self.phase:
            attrs.append(f"phase = #moe<phase {self.phase}>")
        router = "%wr" + (" bias %bias" if self.bias else "")
        text = f"%y = moe.layer %x router({router}) experts(%w13, %w2)"
        if self.shared:
            text += " shared(%s13, %s2)"
        if "er" in args:
            text += " expert_rank(%er)"
        if self.placement:
            text += " placement(%p2l, %share)"
        text += (f"\n      routing <{', '.join(routing)}> activation swiglu"
                 f" layout <ep = {self.ep}, tp = {self.tp}>")
        if attrs:
            text += " {" + ", ".join(attrs) + "}"
        types = ", ".join(shapes[a] for a in args)
        result = o.get("y", shapes["x"])
        params = ", ".join(f"%{a}: {shapes[a]}" for a in args)
        return (f"func.func @{self.name}({params}) -> {result} {{\n"
                f"  {text}\n      : ({types}) -> {result}\n"
                f"  return %y : {result}\n}}\n")


def random_layer(rng, index):
    """A layer every verifier rule accepts."""
    experts = rng.choice([1, 2, 3, 4, 6, 8, 16])
    layer = Layer(name=f"layer{index}", dtype=rng.choice(["f32", "bf16"]),
                  hidden=rng.choice([1, 2, 3, 8, 32, 64, 128]),
                  intermediate=rng.choice([1, 2, 3, 8, 16]), experts=experts,
                  score=rng.choice(["softmax", "sigmoid"]),
                  normalize=rng.random() < 0.5, bias=rng.random() < 0.3)
    groups = [g for g in range(2, experts + 1) if experts % g == 0 and experts // g >= 2]
    if groups and rng.random() < 0.35:
        layer.n_group = rng.choice(groups)
        layer.topk_group = rng.randint(1, layer.n_group)
    selectable = layer.topk_group * (experts // layer.n_group)
    layer.top_k = rng.choice([1, selectable, rng.randint(1, selectable)])
    if rng.random() < 0.4:
        layer.scale = rng.choice([0.5, 1.5, 2.5, 1e-30, 1e30, 16.0])
    if rng.random() < 0.3:
        layer.shared = rng.choice([1, 2, 8])
    layer.ep = rng.choice([e for e in (1, 2, 4) if experts % e == 0])
    layer.tp = rng.choice([t for t in (1, 2) if layer.ep % t == 0])
    if layer.ep > 1:
        layer.max_tokens = rng.choice([1, 2, 5, 16, 100])
        if rng.random() < 0.4:
            layer.placement = experts + layer.ep * rng.randint(0, 2)
    elif rng.random() < 0.3:
        layer.max_tokens = rng.choice([1, 3, 64])
    cap = layer.max_tokens if layer.max_tokens is not None else 40
    layer.tokens = rng.choice([None, None, 0, 1, min(cap, 2), min(cap, rng.randint(0, 40))])
    if layer.max_tokens is not None and rng.random() < 0.25:
        layer.phase = rng.choice(["prefill", "decode"])
    return layer


def invalid_layers():
    """(layer, rule id it breaks): each deviates from a valid layer in one way."""
    big = 1 << 62
    base = Layer(name="bad", tokens=None, hidden=8, intermediate=4, experts=4, top_k=2)
    ep = replace(base, ep=2, max_tokens=16)
    cases = [
        (replace(base, top_k=5), "route_c3"),
        (replace(base, top_k=0), "routing_c1"),
        (replace(base, top_k=big, experts=4), "routing_c6"),
        (replace(base, n_group=3, topk_group=1), "route_c4"),
        (replace(base, scale=1e-50), "routing_c5"),
        (replace(base, scale=1e39), "routing_c5"),
        (replace(base, scale=1e-40), "routing_c5"),
        (replace(base, scale=-1.0), "routing_c4"),
        (replace(base, experts=big, top_k=2), "size_c1"),
        (replace(base, experts=1 << 21, overrides={"w13": "tensor<1x8x8xf32>",
                                                  "w2": "tensor<1x8x4xf32>"}), "route_c9"),
        (replace(base, hidden=1 << 21), "route_c9"),
        (replace(base, hidden=big), "size_c1"),
        (replace(base, intermediate=1 << 21), "layer_c9"),
        (replace(base, intermediate=1 << 61), "size_c1"),
        (replace(base, tokens=big), "size_c1"),
        (replace(base, tokens=1 << 32), "route_c9"),
        (replace(base, tokens=1 << 30, top_k=4), "layer_c11"),
        (replace(base, max_tokens=big), "layer_c9"),
        (replace(base, max_tokens=4, tokens=5), "layer_c10"),
        (replace(base, max_tokens=4, tokens=5, phase="decode"), "layer_c10"),
        (replace(ep, max_tokens=1 << 31, experts=64), "layer_c11"),
        (replace(ep, max_tokens=big), "layer_c9"),
        (replace(ep, ep=1 << 17, tp=1, experts=1 << 17,
                 overrides={"w13": "tensor<1x8x8xf32>", "w2": "tensor<1x8x4xf32>"}), "layout_c3"),
        (replace(ep, placement=big), "size_c1"),
        (replace(ep, placement=1 << 22, overrides={"w13": f"tensor<{1 << 21}x8x8xf32>",
                                                   "w2": f"tensor<{1 << 21}x8x4xf32>"}),
         "layer_c9"),
        (replace(base, overrides={"x": "tensor<?x?xf32>", "y": "tensor<?x?xf32>"}), "layer_c9"),
        (replace(base, shared=1 << 61), "size_c1"),
        (replace(base, ep=3), "layer_c5"),
        (replace(base, overrides={"w13": "tensor<4x7x8xf32>"}), "layer_c2"),
        (replace(base, overrides={"y": "tensor<?x9xf32>"}), "layer_c1"),
        (replace(base, phase="decode"), "layer_c7"),
    ]
    return cases


# (label, moe-opt arguments) run on every valid layer.
def pipelines(rng):
    budget = rng.choice([4096, 50000, 1 << 40])
    decode = rng.choice([1, 2, 8])
    return [
        ("cpu", ["--moe-cpu-pipeline"]),
        ("cpu-tp-fp8", ["--moe-cpu-pipeline=dedupe-tp=true dispatch-quantization=fp8-e4m3-g128"]),
        ("cpu-fp8-dequant", ["--moe-cpu-pipeline=dispatch-quantization=fp8-e4m3-g32-ue8m0 "
                             "fp8-gemm=false lower-to-llvm=false"]),
        ("cuda", ["--moe-cuda-pipeline"]),
        ("cuda-wgmma", ["--moe-cuda-pipeline=chip=sm_90a prefill-mma=wgmma prefill-block=128x256 "
                        "prefill-stages=3"]),
        ("cuda-wgmma-fused", ["--moe-cuda-pipeline=chip=sm_90a prefill-mma=wgmma "
                              "prefill-block=128x256 prefill-stages=3 fuse-swiglu=true"]),
        ("phases+chunks+cpu",
         [f"--moe-specialize-phase=decode-max-tokens={decode}",
          f"--moe-plan-chunks=budget-bytes={budget} max-tokens-per-rank=64",
          "--moe-cpu-pipeline=dedupe-tp=true dispatch-quantization=fp8-e4m3-g32-ue8m0"]),
        ("passes",
         ["--moe-dedupe-tp-dispatch", "--moe-decompose-layer",
          "--moe-fuse-quant-dispatch=scheme=fp8-e4m3-g128", "--moe-plan-buffers",
          "--convert-moe-to-linalg", "--moe-verify-collectives", "--convert-moe-to-runtime"]),
    ]


# Option-induced refusals that are not a verifier gap (a budget below one token).
ALLOWED_ERRORS = ("does not fit one token",)


def moe_opt(source, args, timeout=120):
    return subprocess.run([tool("moe-opt"), "--verify-each", "-", *args], input=source,
                          capture_output=True, text=True, timeout=timeout)


def crashed(result):
    return result.returncode < 0 or result.returncode > 1 or any(
        m in result.stderr for m in CRASH_MARKERS)


def check_batch(label, args, layers):
    """Runs `args` on all layers at once (split input); on a failure, one by one.
    Returns the failures as (layer name, label, message)."""
    batch = "\n// -----\n".join(layer.source() for layer in layers)
    result = moe_opt(batch, ["--split-input-file", *args])
    if result.returncode == 0 and not crashed(result):
        return []
    failures = []
    for layer in layers:
        one = moe_opt(layer.source(), args)
        if one.returncode == 0 and not crashed(one):
            continue
        if not crashed(one) and any(a in one.stderr for a in ALLOWED_ERRORS):
            continue
        failures.append((layer.name, label, one.stderr[-2000:], layer.source()))
    return failures


def test_valid_layers_lower_through_every_pipeline():
    rng = random.Random(SEED)
    layers = [random_layer(rng, i) for i in range(VALID_LAYERS)]
    # Every generated layer is valid: the verifier alone accepts them all.
    parsed = moe_opt("\n// -----\n".join(l.source() for l in layers), ["--split-input-file"])
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    jobs = [(label, args, layers[i::2]) for label, args in pipelines(rng) for i in range(2)]
    with ThreadPoolExecutor(WORKERS) as pool:
        failures = [f for fs in pool.map(lambda j: check_batch(*j), jobs) for f in fs]
    assert not failures, "\n\n".join(f"{n} [{label}]:\n{src}\n{msg}"
                                     for n, label, msg, src in failures[:5])


@pytest.mark.parametrize("layer,rule", invalid_layers(),
                         ids=[f"{rule}-{i}" for i, (_, rule) in enumerate(invalid_layers())])
def test_invalid_layers_are_rejected_with_a_diagnostic(layer, rule):
    for args in ([], ["--moe-cpu-pipeline"]):
        result = moe_opt(layer.source(), args)
        assert not crashed(result), result.stderr
        assert result.returncode == 1, layer.source()
        assert "error:" in result.stderr
    assert rule in result.stderr, result.stderr


MUTATIONS = [0, 1, 3, -1, 1 << 31, 1 << 32, 1 << 62, (1 << 63) - 1, "?"]


def mutate(rng, source):
    """Replaces one number of `source` (a dimension, a size attribute) by an edge value."""
    import re
    numbers = [m for m in re.finditer(r"(?<![\w.#%])\d+(?![\w.])", source)]
    m = rng.choice(numbers)
    value = rng.choice(MUTATIONS)
    if value == "?" and source[m.end():m.end() + 1] != "x":
        value = 0
    return source[:m.start()] + str(value) + source[m.end():]


def test_mutated_layers_are_rejected_or_lower():
    """A number changed to 0, -1, 2^31, 2^62, ... is either rejected by the
    verifier (a diagnostic, no crash) or the mutant lowers."""
    rng = random.Random(SEED + 1)
    layers = [random_layer(rng, i) for i in range(MUTANTS)]
    mutants = [mutate(rng, layer.source()) for layer in layers]

    def check(source):
        lowered = moe_opt(source, ["--moe-cpu-pipeline"])
        if crashed(lowered):
            return ("crash", source, lowered.stderr[-2000:])
        if lowered.returncode == 0:
            return None
        verified = moe_opt(source, [])
        if crashed(verified):
            return ("crash in the verifier", source, verified.stderr[-2000:])
        if verified.returncode == 0:
            return ("accepted by the verifier, failed to lower", source, lowered.stderr[-2000:])
        if "error:" not in verified.stderr:
            return ("rejected without a diagnostic", source, verified.stderr[-2000:])
        return None

    with ThreadPoolExecutor(WORKERS) as pool:
        problems = [p for p in pool.map(check, mutants) if p]
    assert not problems, "\n\n".join(f"{why}:\n{src}\n{err}" for why, src, err in problems[:5])
