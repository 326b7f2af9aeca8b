#!/usr/bin/env python3
"""One layer compiled with several sets of moe-compile flags, run interleaved.

On a shared, noisy machine two figures taken minutes apart can differ by 20%;
runs interleaved round by round (variant 0, 1, ..., numpy, then again) share
the noise, and the minimum of each is compared. Prints per variant the
minimum time, GFLOP/s, the ratio to numpy's per-expert loop (f32, same
thread count) and the largest difference from variant 0's output.

  python3 benchmarks/cpu/compare_variants.py --layer deepseek --tokens 2048 \\
      --variant "--packed-min-rows 0" --variant "--packed-min-rows 24"

Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS of the environment (set both).
"""
import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import common  # noqa: E402
from moec.layer import check_arguments  # noqa: E402
from moec.memref import CompiledFunction  # noqa: E402
from moec.toolchain import tool  # noqa: E402

LAYERS = {"qwen3": "qwen3-30b-a3b-moe.json", "deepseek": "deepseek-like-moe.json"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", choices=sorted(LAYERS), default="qwen3")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--dtype", choices=["f32", "bf16", "fp8"], default="f32",
                        help="fp8: bf16 activations, FP8 expert weights (numpy: f32 "
                             "on the weights they stand for)")
    parser.add_argument("--variant", action="append", default=[],
                        help="moe-compile flags of one variant (repeat; '' = defaults)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.variant:
        parser.error("give at least one --variant")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    with tempfile.TemporaryDirectory(prefix="moe-variants-") as work:
        compare(args, Path(work))


def compare(args, work):
    config = HERE / "configs" / LAYERS[args.layer]
    dtype = args.dtype
    if dtype == "fp8":
        config, dtype = common.fp8_config(config, work), "bf16"
    variants = []
    for i, flags in enumerate(args.variant):
        library, plan_path = work / f"v{i}.so", work / f"v{i}.plan.json"
        started = time.perf_counter()
        subprocess.run([tool("moe-compile"), "--config", str(config), "--dtype", dtype,
                        "--entry", "moe_layer", "--plan", str(plan_path), "-o", str(library),
                        *shlex.split(flags)], check=True)
        seconds = time.perf_counter() - started
        plan = json.loads(plan_path.read_text())
        fn = CompiledFunction(str(library), "moe_layer", [(2, common.NP_DTYPE[args.dtype])])
        variants.append((flags, plan, fn, seconds))

    plan = variants[0][1]
    w32 = common.make_weights(plan, args.seed)
    weights = common.cast(w32, args.dtype)
    x32 = common.make_tokens(plan, args.tokens, args.seed)
    x = x32.astype(common.NP_DTYPE[args.dtype])
    w_numpy = common.dequantized(w32) if args.dtype == "fp8" else w32
    ordered = [check_arguments(p, x, weights)[1:] for _, p, _, _ in variants]
    best = [float("inf")] * (len(variants) + 1)
    outputs = [None] * len(variants)
    for _ in range(args.rounds):
        for i, (_, _, fn, _) in enumerate(variants):
            started = time.perf_counter()
            y = fn(x, *ordered[i])
            best[i] = min(best[i], time.perf_counter() - started)
            outputs[i] = np.asarray(y, dtype=np.float32)
        started = time.perf_counter()
        common.numpy_layer(x32, w_numpy, plan)
        best[-1] = min(best[-1], time.perf_counter() - started)

    flops = common.layer_flops(plan, args.tokens)
    print(f"{args.layer} {args.dtype} T={args.tokens}, min of {args.rounds} interleaved rounds")
    print(f"{'variant':<32} {'compile s':>9} {'min ms':>9} {'GFLOP/s':>8} {'c/np':>6} {'diff vs 0':>9}")
    scale = np.abs(outputs[0]).max() or 1.0
    for i, (flags, _, _, seconds) in enumerate(variants):
        diff = np.abs(outputs[i] - outputs[0]).max() / scale
        print(f"{flags or '(defaults)':<32} {seconds:9.2f} {best[i] * 1e3:9.2f} "
              f"{flops / best[i] / 1e9:8.1f} {best[i] / best[-1]:6.2f} {diff:9.1e}")
    print(f"{'numpy (f32 per-expert loop)':<32} {'':>9} {best[-1] * 1e3:9.2f} "
          f"{flops / best[-1] / 1e9:8.1f}")


if __name__ == "__main__":
    main()
