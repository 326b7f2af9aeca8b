#!/usr/bin/env python3
"""Differential check of moe.route: convert-moe-to-cpu against convert-moe-to-linalg.

Compiles the same route-only function twice with build/bin/moe-compile:

  new: the function as written (the CPU pipeline lowers moe.route with
       convert-moe-to-cpu: GEMM + per-token top-k by selection, O(T E k));
  old: the function pre-lowered by `moe-opt --convert-moe-to-linalg` (the
       rank-based O(T E^2) lowering), so moe-compile sees no moe op;

runs both on the same inputs (random, exact ties, all-equal rows, NaN rows and
elements, NaN router rows, NaN bias entries, +-inf logits, 0 and 1 tokens) and
compares: expert ids equal, weights equal within f32 rounding (and both
against the float64 numpy reference, python/moec/reference.py, on the tokens
without NaN). Exits 1 on any difference.

  python3 test/Integration/CPU/route_differential.py [--build DIR] [--keep DIR]

The two lowerings form the router GEMM's sums in different orders (the CPU
GEMM on vector<8xf32> accumulators), so logits may differ in the last bit; an
id difference is then only possible where two selection scores are within
rounding of each other ("near ties"). Such tokens are listed separately and
fail the check only with --strict. Exact ties (identical router rows, equal
scores) must always agree.
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "python"))

import ml_dtypes  # noqa: E402

from moec import reference  # noqa: E402
from moec.memref import CompiledFunction  # noqa: E402

NP_TYPE = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}

# (name, experts, hidden, routing)
CASES = [
    ("softmax_top2", 8, 16, dict(score="softmax", top_k=2, normalize=True)),
    ("softmax_top1_raw", 4, 24, dict(score="softmax", top_k=1)),
    ("softmax_all", 4, 16, dict(score="softmax", top_k=4, normalize=False)),
    ("softmax_scaled", 12, 20, dict(score="softmax", top_k=3, routed_scaling_factor=1.5)),
    ("sigmoid_top3", 8, 16, dict(score="sigmoid", top_k=3, normalize=True)),
    ("sigmoid_bias", 10, 16, dict(score="sigmoid", top_k=2, normalize=True, bias=True)),
    ("sigmoid_groups_bias", 16, 16, dict(score="sigmoid", top_k=4, n_group=4, topk_group=2,
                                         normalize=True, routed_scaling_factor=2.5, bias=True)),
    ("softmax_groups", 16, 32, dict(score="softmax", top_k=3, n_group=8, topk_group=3)),
    ("groups_keep_all", 8, 16, dict(score="sigmoid", top_k=2, n_group=4, topk_group=4,
                                    normalize=True, bias=True)),
    ("dsv3_like", 64, 64, dict(score="sigmoid", top_k=8, n_group=8, topk_group=4,
                               normalize=True, routed_scaling_factor=2.5, bias=True)),
]


def route_source(experts, hidden, routing, dtype):
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
    k, t = routing["top_k"], dtype
    return f"""
func.func @route(%x: tensor<?x{hidden}x{t}>, %w: tensor<{experts}x{hidden}x{t}>{bias_arg})
    -> (tensor<?x{k}xi32>, tensor<?x{k}xf32>) attributes {{llvm.emit_c_interface}} {{
  %ids, %weights = moe.route %x, %w{bias_use} routing <{", ".join(fields)}>
    : (tensor<?x{hidden}x{t}>, tensor<{experts}x{hidden}x{t}>{bias_type})
      -> (tensor<?x{k}xi32>, tensor<?x{k}xf32>)
  return %ids, %weights : tensor<?x{k}xi32>, tensor<?x{k}xf32>
}}
"""


def compile_both(build, source, out_dir, stem):
    src = out_dir / f"{stem}.mlir"
    src.write_text(source)
    old_src = out_dir / f"{stem}.linalg.mlir"
    subprocess.run([str(build / "bin" / "moe-opt"), str(src), "--convert-moe-to-linalg",
                    "-o", str(old_src)], check=True)
    libs = {}
    for name, path in (("new", src), ("old", old_src)):
        lib = out_dir / f"{stem}.{name}.so"
        subprocess.run([str(build / "bin" / "moe-compile"), str(path), "-o", str(lib)],
                       check=True)
        libs[name] = CompiledFunction(lib, "route", [(2, np.int32), (2, np.float32)])
    return libs


def inputs(experts, hidden, routing, tokens, rng):
    """Yields (label, x, w, bias, nan_tokens) cases."""
    bias = (0.1 * rng.standard_normal(experts)).astype(np.float32) if routing.get("bias") else None

    def base():
        x = rng.standard_normal((tokens, hidden)).astype(np.float32)
        w = (rng.standard_normal((experts, hidden)) / np.sqrt(hidden)).astype(np.float32)
        return x, w

    x, w = base()
    yield "random", x, w, bias, []
    # Exact ties: pairs of identical router rows, and tokens whose x is 0 (every logit 0).
    x, w = base()
    w[1] = w[0]
    w[experts - 1] = w[2]
    if experts >= 8:
        w[5] = w[4] = w[3]
    x[::3] = 0.0
    yield "ties", x, w, bias, []
    # An all-equal bias with ties in the scores (group scores tie too).
    if bias is not None:
        yield "ties_flat_bias", x, w, np.zeros_like(bias), []
    # NaN tokens: whole rows, one element.
    x, w = base()
    nan_tokens = [t for t in (1, 4, 5) if t < tokens]
    for t in nan_tokens:
        x[t, t % hidden] = np.nan
    yield "nan_tokens", x, w, bias, nan_tokens
    # NaN experts: router rows (and a bias entry).
    x, w = base()
    w[0] = np.nan
    w[experts // 2] = np.nan
    b = bias
    if bias is not None:
        b = bias.copy()
        b[1] = np.nan
    yield "nan_experts", x, w, b, list(range(tokens))
    # Huge logits: +-inf (softmax gets inf - inf = NaN rows, sigmoid gets exact 0 / 1 ties).
    x, w = base()
    x[::2] *= 1e30
    yield "huge", x, w, bias, list(range(0, tokens, 2))
    # Small integers: every logit is exact whatever the summation order, so
    # both lowerings see bitwise equal scores (many exact ties), and a bias a
    # few ulp apart makes selection scores that differ in the last bits only.
    x = rng.integers(-2, 3, (tokens, hidden)).astype(np.float32)
    w = rng.integers(-1, 2, (experts, hidden)).astype(np.float32)
    if routing["score"] == "softmax":
        x *= np.float32(0.25)
    yield "integer", x, w, bias, []
    if bias is not None:
        ulps = rng.integers(-3, 4, experts).astype(np.float32)
        b = (np.float32(0.5) + ulps * np.float32(2 ** -24)).astype(np.float32)
        yield "integer_bias_ulps", x, w, b, []
    # Tiny differences: scores a few ulp apart.
    x, w = base()
    w[1] = w[0] * np.float32(1 + 2 ** -22)
    w[3] = np.nextafter(w[2], np.float32(np.inf))
    yield "near_ties", x, w, bias, []


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--keep", type=Path, help="keep the compiled files here")
    parser.add_argument("--strict", action="store_true", help="near ties must agree too")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        return check(args, args.keep)
    with tempfile.TemporaryDirectory(prefix="route-diff-") as out_dir:
        return check(args, Path(out_dir))


def check(args, out_dir):
    rng = np.random.default_rng(args.seed)
    failures, near, checked = 0, 0, 0
    for dtype in ("f32", "bf16"):
        for name, experts, hidden, routing in CASES:
            fns = compile_both(args.build, route_source(experts, hidden, routing, dtype),
                               out_dir, f"{name}_{dtype}")
            for tokens in (0, 1, 37):
                for label, x, w, bias, nan_tokens in inputs(experts, hidden, routing, tokens, rng):
                    xa, wa = x.astype(NP_TYPE[dtype]), w.astype(NP_TYPE[dtype])
                    call = [xa, wa] + ([bias] if bias is not None else [])
                    new_ids, new_w = fns["new"](*call)
                    old_ids, old_w = fns["old"](*call)
                    checked += 1
                    where = f"{name} {dtype} T={tokens} {label}"
                    k = routing["top_k"]
                    if new_ids.shape != (tokens, k) or old_ids.shape != (tokens, k):
                        print(f"FAIL {where}: shapes {new_ids.shape} {old_ids.shape}")
                        failures += 1
                        continue
                    if tokens and (new_ids.min() < 0 or new_ids.max() >= experts or any(
                            len(set(r.tolist())) != k for r in new_ids)):
                        print(f"FAIL {where}: invalid or repeated ids\n{new_ids}")
                        failures += 1
                    differ = np.nonzero((new_ids != old_ids).any(axis=1))[0]
                    # Near ties are told apart from real differences by the
                    # float64 selection scores.
                    for t in differ:
                        a, b = set(new_ids[t].tolist()), set(old_ids[t].tolist())
                        if label == "near_ties" and not args.strict:
                            near += 1
                            print(f"near tie {where} token {t}: new {new_ids[t]} old {old_ids[t]}")
                        else:
                            failures += 1
                            print(f"FAIL {where} token {t}: new {new_ids[t]} old {old_ids[t]}"
                                  f" ({sorted(a ^ b)} differ)")
                    same = np.setdiff1d(np.arange(tokens), differ)
                    nw, ow = new_w[same], old_w[same]
                    both_nan = np.isnan(nw) & np.isnan(ow)
                    close = np.isclose(nw, ow, rtol=1e-5, atol=0) | both_nan
                    if not close.all():
                        bad = np.nonzero(~close.all(axis=1))[0]
                        failures += 1
                        print(f"FAIL {where}: weights differ at tokens {same[bad]}:\n"
                              f"{nw[bad]}\n{ow[bad]}")
                    # Against numpy on the tokens without NaN and inf.
                    clean = [t for t in range(tokens) if t not in nan_tokens]
                    if clean and label not in ("ties", "ties_flat_bias", "near_ties", "integer",
                                                   "integer_bias_ulps"):
                        ref_ids, ref_w = reference.route(xa[clean], wa, routing, bias)
                        if not (ref_ids == new_ids[clean]).all() or not np.allclose(
                                new_w[clean], ref_w, rtol=1e-5, atol=0):
                            failures += 1
                            print(f"FAIL {where}: differs from the numpy reference")
    print(f"{checked} input sets, {failures} failures, {near} near-tie id differences")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
