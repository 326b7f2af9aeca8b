#!/usr/bin/env python3
"""Runs the GPU route kernel's IR on the CPU and checks it against a float64 reference.

For each routing config: lower a route-only function with `moe-opt
--convert-moe-to-gpu`, take the last `gpu.launch` (the warp-per-token route
kernel of RouteGPU.cpp, never run on a GPU here) and interpret its printed
body, every SSA value an array of 32 lanes in lockstep, a row per warp (warps
share only buffers; there is no barrier). Lane-varying `scf.if` runs masked; a
shuffle there, or an unknown op, raises. The logits buffer gets random f32
logits (no GEMM), or, where the router's GEMM splits its depth and T <= 64,
the depth partials buffer gets them as parts that add up exactly. Ids must equal the float64 reference's below (HF semantics,
cross-checked with python/moec/reference.py) but on near ties (margins in
(0, 1e-5), listed apart); exact ties go to the lower index; weights within
1e-5 relative. Exits 1 on any failure.

  python3 test/Integration/GPU/route_warp_emulation.py [--build DIR] [--seed N]
"""
import argparse
import itertools
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "python"))
from moec import reference as moec_reference  # noqa: E402

TOL = 1e-5
BF16 = ml_dtypes.bfloat16
DTYPE = {"index": np.int64, "i32": np.int32, "i1": np.bool_, "f32": np.float32, "bf16": BF16}
BIASES = ("correction_bias", "logit_bias")  # the optional operands, in order
# name: (experts, routing)
CONFIGS = {
    "a_dsv3_like_e64": (64, dict(score="sigmoid", top_k=4, n_group=8, topk_group=4, normalize=True,
                                 scale=2.5, correction_bias=True)),
    "b_dsv3_e256": (256, dict(score="sigmoid", top_k=8, n_group=8, topk_group=4, normalize=True,
                              scale=2.5, correction_bias=True)),
    "c_qwen3_e128": (128, dict(score="softmax", top_k=8, normalize=True)),
    "d_dsv2_group_max": (64, dict(score="softmax", top_k=6, n_group=8, topk_group=3,
                                  group_max=True, scale=16.0)),
    "e_logits_bf16": (32, dict(score="softmax", top_k=4, logits_bf16=True)),
    "f_gpt_oss_logit_bias": (32, dict(score="softmax", top_k=4, normalize=True, logit_bias=True)),
    # Qwen3-30B-A3B's router: its decode form splits the depth 8 ways, the
    # route kernel adding the partial sums up to 64 tokens.
    "g_split_depth_h2048": (128, dict(score="softmax", top_k=8, normalize=True, hidden=2048)),
}


def route_source(experts, r):
    """A route-only function for one config (x and router weight bf16, H = 64
    unless the config says)."""
    fields = [r["score"], f"top_k = {r['top_k']}"]
    if r.get("n_group", 1) > 1:
        fields.append(f"n_group = {r['n_group']}, topk_group = {r['topk_group']}")
    fields += ["normalize"] * bool(r.get("normalize"))
    fields += [f"scale = {r.get('scale')}"] * ("scale" in r)
    fields += [f for f in ("correction_bias", "group_max", "logits_bf16") if r.get(f)]
    hidden = r.get("hidden", 64)
    args, uses = [f"%x: tensor<?x{hidden}xbf16>", f"%w: tensor<{experts}x{hidden}xbf16>"], ""
    for key, word in zip(BIASES, ("bias", "logit_bias")):
        if r.get(key):
            args.append(f"%{word}: tensor<{experts}xf32>")
            uses += f" {word} %{word}"
    out = f"tensor<?x{r['top_k']}xi32>, tensor<?x{r['top_k']}xf32>"
    types = ", ".join(a.split(": ")[1] for a in args)
    return (f"func.func @route({', '.join(args)}) -> ({out}) {{\n"
            f"  %ids, %weights = moe.route %x, %w{uses} routing <{', '.join(fields)}>\n"
            f"    : ({types}) -> ({out})\n  return %ids, %weights : {out}\n}}\n")


def lower(source, build):
    return subprocess.run([str(build / "bin" / "moe-opt"), "--convert-moe-to-gpu"], input=source,
                          capture_output=True, text=True, check=True).stdout


class Op:
    """One printed op: name, results, operand names, leading words, type, regions."""

    def __init__(self, text):
        self.text, self.regions = text, []
        m = re.match(r"(?:(%[^=]+?) = )?([a-z_]+\.[a-z_]+)\s*(.*)$", text)
        if not m:
            raise ValueError(f"cannot parse: {text}")
        self.results = []
        for r in m.group(1).split(", ") if m.group(1) else []:  # %a, %b or %a:3
            name, _, count = r.partition(":")
            self.results += [f"{name}#{i}" for i in range(int(count))] if count else [name]
        self.name, rest = m.group(2), m.group(3)
        self.body, _, self.type = rest.rpartition(" : ") if " : " in rest else (rest, "", "")
        self.operands = re.findall(r"%[\w#]+", self.body)
        self.words = re.findall(r"(?<![%\w#.])[a-z_]+\b", self.body.split("%")[0])


def parse_region(lines, i):
    """Ops from lines[i] up to the closing '}' (or '} else {'); returns (ops, i)."""
    ops = []
    while i < len(lines) and not lines[i].strip().startswith("}"):
        line = lines[i].strip()
        op, i = Op(line.removesuffix(" {")), i + 1
        while line.endswith("{"):  # its regions, the next one after '} else {'
            region, i = parse_region(lines, i)
            op.regions.append(region)
            line, i = lines[i].strip(), i + 1
        ops.append(op)
    return ops, i


def split_kernel(text):
    """(the function's top-level ops above the last launch by result name, that
    launch with its body parsed, the function's argument names)."""
    lines = text.splitlines()
    func = next(i for i, line in enumerate(lines) if "func.func @route" in line)
    launch = max(i for i, line in enumerate(lines) if "gpu.launch " in line)
    outer, depth = {}, 0
    for line in lines[func + 1:launch]:
        if depth == 0 and line.strip().startswith("%"):
            op = Op(line.strip())
            outer.update((r, op) for r in op.results)
        depth += line.rstrip().endswith("{") - line.strip().startswith("}")
    kernel = Op(lines[launch].strip().removesuffix(" {"))
    kernel.regions.append(parse_region(lines, launch + 1)[0])
    return outer, kernel, re.findall(r"(%arg\d+):", lines[func])


def uniform(v, mask, what):
    active = v[mask]
    if active.size == 0 or (active != active.flat[0]).any():
        raise RuntimeError(f"{what} is not uniform over the active lanes")
    return active.flat[0].item()


def unsigned(a):
    return a.view({np.dtype(np.int32): np.uint32, np.dtype(np.int64): np.uint64}[a.dtype])


def cmpf(pred, a, b):
    ordered = ~np.isnan(a) & ~np.isnan(b)
    if pred in ("ord", "uno"):
        return ordered if pred == "ord" else ~ordered
    base = {"eq": a == b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b, "ne": a != b}
    return base[pred[1:]] & ordered if pred[0] == "o" else base[pred[1:]] | ~ordered


def cmpi(pred, a, b):
    if pred[0] == "u":
        a, b = unsigned(a), unsigned(b)
    return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b,
            "ge": a >= b}[pred[1:] if pred[0] in "su" else pred]


def divide(a, b, signed=False, ceil=False, rem=False):
    """Integer division (truncating when signed); x / 0 gives junk, not an error."""
    if signed:
        q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
        return np.where((a < 0) != (b < 0), -q, q)
    ua, ub = unsigned(a), np.maximum(unsigned(b), 1)
    return (ua % ub if rem else ua // ub + (ceil & (ua % ub != 0))).view(a.dtype)


ARITH = {  # name -> f(operands) on lane arrays; the result is cast to the op's type
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b, "arith.divsi": lambda a, b: divide(a, b, signed=True),
    "arith.divui": divide, "arith.ceildivui": lambda a, b: divide(a, b, ceil=True),
    "arith.remui": lambda a, b: divide(a, b, rem=True),
    "arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b,
    "arith.xori": lambda a, b: a ^ b, "arith.select": lambda c, a, b: np.where(c, a, b),
    "arith.addf": lambda a, b: a + b, "arith.subf": lambda a, b: a - b,
    "arith.mulf": lambda a, b: a * b, "arith.divf": lambda a, b: a / b,
    "arith.negf": lambda a: -a, "arith.maximumf": np.maximum, "arith.maxnumf": np.fmax,
    "math.exp": np.exp, "arith.index_cast": lambda a: a,
    "arith.extui": lambda a: a if a.dtype == np.bool_ else unsigned(a),
    "arith.extf": lambda a: a, "arith.truncf": lambda a: a,  # bf16 <-> f32 by the cast
    "arith.cmpi": cmpi, "arith.cmpf": cmpf,
}


class Warps:
    """The launch body run by W warps of 32 lanes: values are [W, 32] arrays,
    `mask` the active lanes, `div[w]` whether warp w is in divergent code."""

    def __init__(self, outer, buffers, tokens, warps):
        self.outer, self.buffers, self.tokens = outer, buffers, tokens
        self.shape, self.env = (warps, 32), {}
        self.everywhere = (np.ones(self.shape, bool), np.zeros((warps, 1), bool))  # mask, div
        self.writes = {name: np.zeros(b.shape, np.int64) for name, b in buffers.items()}

    def get(self, name):
        if name not in self.env:  # defined above the launch: a uniform value
            if name not in self.outer:
                raise KeyError(f"value {name} is not defined")
            self.exec(self.outer[name], *self.everywhere)
        return self.env[name]

    def full(self, value, dtype):
        return np.full(self.shape, value, dtype)

    def run(self, ops, mask, div):
        """Runs a region; returns the values its scf.yield passes on (or [])."""
        for op in ops:
            if op.name in ("scf.yield", "gpu.terminator"):
                return [self.get(v) for v in op.operands]
            self.exec(op, mask, div)
        return []

    def exec(self, op, mask, div):
        handler = getattr(self, "op_" + op.name.replace(".", "_"), None)
        if handler:
            return handler(op, mask, div)
        if op.name not in ARITH:
            raise NotImplementedError(f"the interpreter does not know {op.name}: {op.text}")
        args = [self.get(v) for v in op.operands]
        if op.name in ("arith.cmpi", "arith.cmpf"):  # i1 results
            self.env[op.results[0]] = ARITH[op.name](op.words[0], *args)
        else:
            result_type = DTYPE[op.type.split(" to ")[-1]]
            self.env[op.results[0]] = ARITH[op.name](*args).astype(result_type)

    def op_arith_constant(self, op, mask, div):
        text, ty = op.body.strip(), op.type
        if text in ("true", "false"):
            value, ty = text == "true", "i1"
        elif ty == "f32" and text.startswith("0x"):  # NaN, infinities
            value = np.uint32(int(text, 16)).view(np.float32)
        elif ty in ("f32", "index", "i32"):
            value = float(text) if ty == "f32" else int(text)
        else:
            raise NotImplementedError(f"constant {op.text}")
        self.env[op.results[0]] = self.full(value, DTYPE[ty])

    def op_tensor_dim(self, op, mask, div):  # above the launch: the token count
        if op.operands[0] != "%arg0" or self.get(op.operands[1])[0, 0] != 0:
            raise NotImplementedError(op.text)
        self.env[op.results[0]] = self.full(self.tokens, np.int64)

    def address(self, op, names, mask):
        """The buffer and the active lanes' indices, bounds checked."""
        name, buffer = names[0], self.buffers[names[0]]
        elem = re.match(r"memref<(?:[?\d]+x)*(\w+)", op.type).group(1)
        if DTYPE[elem] != buffer.dtype or len(names) - 1 != buffer.ndim:
            raise TypeError(f"{op.text} does not fit buffer {buffer.dtype}{buffer.shape}")
        index = tuple(self.get(i)[mask] for i in names[1:])
        for d, ix in enumerate(index):
            if ((ix < 0) | (ix >= buffer.shape[d])).any():
                raise IndexError(f"out of bounds: {op.text} at {ix.tolist()} of {buffer.shape}")
        return name, buffer, index

    def op_memref_load(self, op, mask, div):
        _, buffer, index = self.address(op, op.operands, mask)
        result = np.zeros(self.shape, buffer.dtype)
        result[mask] = buffer[index]
        self.env[op.results[0]] = result

    def op_memref_store(self, op, mask, div):
        name, buffer, index = self.address(op, op.operands[1:], mask)
        value = self.get(op.operands[0])
        flat = np.ravel_multi_index(index, buffer.shape)
        if value.dtype != buffer.dtype or len(np.unique(flat)) != len(flat):
            raise RuntimeError(f"wrong type, or lanes racing on an element: {op.text}")
        buffer[index] = value[mask]
        self.writes[name][index] += 1

    def op_gpu_shuffle(self, op, mask, div):
        rows = mask.any(axis=1)
        if op.words != ["xor"] or (div[:, 0] & rows).any() or not mask[rows].all():
            raise RuntimeError(f"shuffle in divergent code, or not xor: {op.text}")
        value, offset, width = (self.get(v) for v in op.operands)
        if uniform(width, mask, "shuffle width") != 32:
            raise NotImplementedError(op.text)
        lane = np.arange(32)[None, :]
        valid = (lane ^ offset) < 32  # else the lane gets its own value (PTX shfl.sync)
        source = np.where(valid, lane ^ offset, lane)
        self.env[op.results[0]] = np.take_along_axis(value, source, axis=1)
        self.env[op.results[1]] = valid

    def op_scf_if(self, op, mask, div):
        cond = self.get(op.operands[0])
        masks = (mask & cond, mask & ~cond)
        div = div | (masks[0].any(1) & masks[1].any(1))[:, None]
        outs = [self.run(region, m, div) if m.any() else None
                for region, m in zip(op.regions, masks)]
        for i, name in enumerate(op.results):  # a branch no lane ran yields junk
            values = [o[i] if o else None for o in outs]
            fill = next(v for v in values if v is not None)
            self.env[name] = np.where(cond, *(fill if v is None else v for v in values))

    def op_scf_for(self, op, mask, div):
        iv, lb, ub, step = op.operands[:4]
        inners, values = op.operands[4::2], [self.get(v) for v in op.operands[5::2]]
        for i in range(*(uniform(self.get(v), mask, f"bound {v}") for v in (lb, ub, step))):
            self.env[iv] = self.full(i, np.int64)
            self.env.update(zip(inners, values))
            values = self.run(op.regions[0], mask, div)
        self.env.update(zip(op.results, values))


def depth_partials(logits, splits):
    """[splits, 64, E] f32 partial sums whose sum in order of s is `logits`
    exactly: its top 8 significant bits, the next 8, the rest, then zeros
    (an infinity whole in the first)."""
    parts = np.zeros((splits, 64, logits.shape[1]), np.float32)
    finite = np.isfinite(logits)
    rest = np.where(finite, logits, 0).astype(np.float32)
    for s in range(min(splits, 3)):
        parts[s, :len(logits)] = rest if s == 2 else rest.astype(BF16).astype(np.float32)
        rest = rest - parts[s, :len(logits)]
    parts[0, :len(logits)][~finite] = logits[~finite]
    return parts


def launch(text, roles, r, logits, inputs):
    """Runs the route kernel on these logits (inputs: bias role -> vector).
    Where the router's GEMM splits its depth, T <= 64 gives the logits as
    depth partials and NaN logits, else NaN partials.
    Returns ids, weights and how often each id and weight was written."""
    outer, kernel, func_args = split_kernel(text)
    role = dict(zip(func_args, roles))
    (tokens, experts), k = logits.shape, r["top_k"]
    ids, weights = np.full((tokens, k), -1, np.int32), np.full((tokens, k), np.nan, np.float32)
    by_type = {f"memref<?x{experts}xf32>": logits, f"memref<?x{k}xi32>": ids,
               f"memref<?x{k}xf32>": weights}
    partials = re.compile(rf"memref<(\d+)x64x{experts}xf32>")
    split = next((partials.fullmatch(op.type) for op in outer.values()
                  if op.name == "memref.alloc" and partials.fullmatch(op.type)), None)
    if split:
        if tokens <= 64:
            parts = depth_partials(logits, int(split.group(1)))
            by_type[f"memref<?x{experts}xf32>"] = np.full_like(logits, np.nan)
        else:
            parts = np.full((int(split.group(1)), 64, experts), np.nan, np.float32)
        by_type[split.group(0)] = parts
    buffers = {}
    for name, op in outer.items():  # the biases' views of the arguments, and the allocs
        if op.name == "bufferization.to_buffer" and role[op.operands[0]] in inputs:
            buffers[name] = np.asarray(inputs[role[op.operands[0]]], np.float32)
        elif op.name == "memref.alloc" and op.type in by_type:
            buffers[name] = by_type.pop(op.type)
    m = re.fullmatch(r"gpu\.launch blocks\((.*)\) in \((.*)\) threads\((.*)\) in \((.*)\)",
                     kernel.text)
    if by_type or not m:
        raise NotImplementedError(f"buffers {list(by_type)} or the launch form: {kernel.text}")
    sizes = re.findall(r"(%\w+) = (%\w+)", m.group(2) + ", " + m.group(4))
    probe = Warps(outer, {}, tokens, 1)
    dims = [uniform(probe.get(v), probe.everywhere[0], v) for _, v in sizes]
    if dims[3] != 32:
        raise NotImplementedError(f"blockDim.x = {dims[3]}, not a warp")
    # A row per warp: block x, y, z, then thread x (the lanes), y, z.
    warp_ids = np.array(list(itertools.product(*map(range, dims[:3] + [1] + dims[4:]))), np.int64)
    run = Warps(outer, buffers, tokens, len(warp_ids))
    for j, name in enumerate(re.findall(r"%\w+", m.group(1) + ", " + m.group(3))):
        run.env[name] = np.repeat(warp_ids[:, j:j + 1], 32, axis=1) + (j == 3) * np.arange(32)
    run.env.update((name, run.full(d, np.int64)) for (name, _), d in zip(sizes, dims))
    with np.errstate(all="ignore"):
        run.run(kernel.regions[0], *run.everywhere)
    ids_writes, weight_writes = (run.writes[n] for n, b in buffers.items()
                                 if b is ids or b is weights)
    return ids, weights, np.where(ids_writes == weight_writes, ids_writes, -1)


def reference(r, logits, bias, logit_bias):
    """float64 routing from the HF definitions: ids, weights, and per token
    whether it has a near tie and whether it has an exact one."""
    z = np.asarray(logits, np.float64) + (0.0 if logit_bias is None else logit_bias)
    if r.get("logits_bf16"):
        z = z.astype(np.float32).astype(BF16).astype(np.float64)
    if r["score"] == "softmax":
        e = np.exp(z - z.max(axis=1, keepdims=True))
        scores = e / e.sum(axis=1, keepdims=True)
    else:
        scores = 1.0 / (1.0 + np.exp(-z))
    selection = scores + bias if bias is not None else scores.copy()
    tokens, experts = scores.shape
    margins = []
    groups, kept = r.get("n_group", 1), r.get("topk_group", 1)
    if groups > 1 and kept < groups:
        best = -np.sort(-selection.reshape(tokens, groups, -1), axis=2)
        group_score = best[..., 0] if r.get("group_max") else best[..., 0] + best[..., 1]
        order = np.argsort(-group_score, axis=1, kind="stable")  # ties: lower group first
        keep = np.zeros((tokens, groups), bool)
        np.put_along_axis(keep, order[:, :kept], True, axis=1)
        selection = np.where(np.repeat(keep, experts // groups, axis=1), selection, -np.inf)
        ranked = np.take_along_axis(group_score, order, axis=1)
        margins.append(ranked[:, kept - 1:kept] - ranked[:, kept:kept + 1])
    k = r["top_k"]
    order = np.argsort(-selection, axis=1, kind="stable")  # ties: lower expert first
    ranked = np.take_along_axis(selection, order[:, :k + 1], axis=1)
    with np.errstate(invalid="ignore"):  # -inf - -inf: an exact tie
        margins.append(np.nan_to_num(ranked[:, :-1] - ranked[:, 1:], nan=0.0))
    margin = np.concatenate(margins, axis=1)
    weights = np.take_along_axis(scores, order[:, :k], axis=1)
    if r.get("normalize"):
        weights = weights / weights.sum(axis=1, keepdims=True)
    return (order[:, :k].astype(np.int32), weights * r.get("scale", 1.0),
            ((margin > 0) & (margin < TOL)).any(axis=1), (margin == 0).any(axis=1))


def moec_agrees(r, logits, inputs, ids, weights, near):
    """python/moec/reference.py on the same logits (x = logits, router = I)."""
    z = np.asarray(logits, np.float64) + inputs.get("logit_bias", 0.0)
    if r.get("logits_bf16"):
        z = z.astype(np.float32).astype(BF16).astype(np.float64)
    routing = dict(r, routed_scaling_factor=r.get("scale", 1.0))
    routing["group_score"] = "max" if r.get("group_max") else "sum"
    ids2, w2 = moec_reference.route(z, np.eye(z.shape[1]), routing, inputs.get("correction_bias"))
    same = (ids2 == ids).all(axis=1)
    return bool((same | near).all() and np.allclose(w2[same], weights[same], rtol=1e-12, atol=0))


def cases(experts, r, rng):
    """(name, logits, inputs): 1, 3, 4, 5, 9, 37 tokens, exact ties, -inf logits."""
    def inputs(ties):
        out = {}
        if r.get("correction_bias"):  # zero for ties: sums of biased scores would round apart
            out["correction_bias"] = np.zeros(experts) if ties else rng.uniform(-0.1, 0.1, experts)
        if r.get("logit_bias"):
            out["logit_bias"] = (rng.choice([0.0, 0.5], experts) if ties
                                 else rng.normal(0.0, 1.0, experts))
        return {key: v.astype(np.float32) for key, v in out.items()}

    def normal(tokens):
        return rng.normal(0.0, 2.0, (tokens, experts)).astype(np.float32)

    for tokens in (1, 3, 4, 5, 9, 37) + (64, 65) * ("hidden" in r):
        yield f"T={tokens}", normal(tokens), inputs(False)
    ties = rng.choice([-1.0, 0.0, 0.5, 1.5], (8, experts)).astype(np.float32)
    ties[0], ties[1] = 0.0, normal(1)[0]  # all equal; the best logit thrice
    top = int(np.argmax(ties[1]))
    ties[1, [(top + 7) % experts, (top - 5) % experts]] = ties[1, top]
    yield "ties", ties, inputs(True)
    neg_inf = normal(6)
    neg_inf[rng.random(neg_inf.shape) < 0.2] = -np.inf
    neg_inf[0, :experts // 2] = -np.inf
    yield "-inf", neg_inf, inputs(False)


def check(name, experts, r, build, rng):
    """Runs every case of one config; prints its summary line; returns success."""
    text = lower(route_source(experts, r), build)
    roles = ["x", "w"] + [b for b in BIASES if r.get(b)]
    total = bad = near_ties = exact_ties = 0
    max_err, problems = 0.0, []
    for case, logits, inputs in cases(experts, r, rng):
        ref_ids, ref_w, near, exact = reference(r, logits, inputs.get("correction_bias"),
                                                inputs.get("logit_bias"))
        total, exact_ties = total + len(logits), exact_ties + exact.sum()
        try:
            ids, weights, writes = launch(text, roles, r, logits, inputs)
        except Exception as error:  # noqa: BLE001 (an interpreter error fails the config)
            problems.append(f"{case}: {type(error).__name__}: {error}")
            bad += len(logits)
            continue
        if np.isfinite(logits).all() and not moec_agrees(r, logits, inputs, ref_ids, ref_w, near):
            problems.append(f"{case}: the two references disagree")
            bad += 1
        for t in range(len(logits)):
            err = np.abs(weights[t] - ref_w[t]) / np.maximum(np.abs(ref_w[t]), 1e-30)
            if (writes[t] != 1).any():
                problem = f"writes per choice (ids and weights alike) {writes[t].tolist()}"
            elif (ids[t] != ref_ids[t]).any():
                problem = f"ids {ids[t].tolist()}, expected {ref_ids[t].tolist()}"
            elif err.max() > TOL:
                problem = f"weights {weights[t].tolist()}, expected {ref_w[t].tolist()}"
            else:
                max_err = max(max_err, float(err.max()))
                continue
            tolerated = bool(near[t]) and problem.startswith("ids")
            near_ties, bad = near_ties + tolerated, bad + (not tolerated)
            problems.append(f"{case} token {t}: {'near tie: ' * tolerated}{problem}")
    print(f"{name:22s} E={experts:3d} k={r['top_k']}: {total} tokens, {bad} mismatches, "
          f"{near_ties} near ties, {exact_ties} with exact ties, max weight rel err {max_err:.1e}")
    for line in problems[:8]:
        print("    " + line)
    return bad == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    ok = [check(name, experts, r, args.build, rng) for name, (experts, r) in CONFIGS.items()]
    print(f"{len(ok) - sum(ok)} failing configs of {len(ok)}")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
