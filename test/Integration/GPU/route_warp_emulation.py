#!/usr/bin/env python3
"""Runs the GPU route kernel's IR on the CPU and checks it against a float64 reference.

For each routing config: lower a route-only function with `moe-opt
--convert-moe-to-gpu`, take the last `gpu.launch` (the warp-per-token route
kernel of RouteGPU.cpp, never run on a GPU here) and interpret its printed
body with kernel_emulator.py, every SSA value an array of 32 lanes in
lockstep, a row per warp (warps share only buffers; there is no barrier).
Lane-varying `scf.if` runs masked; a shuffle there, or an unknown op, raises.
The logits buffer gets random f32 logits (no GEMM), or, where the router's
GEMM splits its depth and T <= 64, the depth partials buffer gets them as
parts that add up exactly. Ids must equal the float64 reference's below (HF semantics,
cross-checked with python/moec/reference.py) but on near ties (margins in
(0, 1e-5), listed apart); exact ties go to the lower index; weights within
1e-5 relative. Exits 1 on any failure.

  python3 test/Integration/GPU/route_warp_emulation.py [--build DIR] [--seed N]
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_emulator as emulator  # noqa: E402
from moec import reference as moec_reference  # noqa: E402

TOL = 1e-5
BF16 = emulator.BF16
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
    outer, kernel, func_args = emulator.split_kernel(text, "route")
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
    if by_type:
        raise NotImplementedError(f"buffers {list(by_type)}")
    memory = {name: emulator.Buffer(array, name) for name, array in buffers.items()}
    host = emulator.Threads({}, outer=outer, dims={"%arg0": (tokens,)})
    emulator.launch(kernel, memory, host)
    ids_writes, weight_writes = (np.zeros(b.shape, np.int64) if memory[n].writes is None
                                 else memory[n].writes
                                 for n, b in buffers.items() if b is ids or b is weights)
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
