"""The main job: compile each example MoE layer, run it on the CPU, check it.

For every config (the shipped examples by default) and element type, it
compiles the layer with moe-compile, runs it on seeded inputs, and compares the
output with the numpy reference. Exits 1 when any error is over tolerance.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from . import reference
from .layer import run_layer
from .toolchain import ROOT, compile_config
from .weights import make_inputs

# Max |y - ref| / max |ref|. f32 differs from the float64 reference by
# summation order only; bf16 rounds x, the weights and every op's output to
# 8 significant bits (2^-8 = 3.9e-3 relative per rounding).
TOLERANCE = {"f32": 1e-5, "bf16": 2e-2}


def describe(plan, tokens):
    r = plan["routing"]
    groups = f", groups {r['topk_group']}/{r['n_group']}" if r["n_group"] > 1 else ""
    bias = ", selection bias" if r["correction_bias"] else ""
    print(f"  plan: {plan['model_type']} {plan['element_type']}: x[{tokens},{plan['hidden_size']}], "
          f"{plan['experts']} experts of intermediate {plan['intermediate_size']}, "
          f"top-{plan['top_k']}, shared expert intermediate {plan['shared_intermediate_size']}")
    print(f"  routing: {r['score']}{groups}{bias}, normalize={r['normalize']}, "
          f"scale={r['routed_scaling_factor']}")


def check(config, dtype, tokens, seed, work):
    library, plan = compile_config(config, work, dtype, name=f"layer_{Path(config).parent.name}".replace("-", "_"))
    describe(plan, tokens)
    x, weights = make_inputs(plan, tokens, seed)
    y = run_layer(library, plan, x, weights).astype(np.float64)
    ref = reference.layer(x, weights, plan)
    ids, _ = reference.route(x, weights["router_weight"], plan["routing"], weights.get("correction_bias"))
    load = np.bincount(ids.ravel(), minlength=plan["experts"])
    print(f"  tokens per expert: {load.tolist()}")
    max_abs = float(np.max(np.abs(y - ref)))
    max_rel = max_abs / float(np.max(np.abs(ref)))
    ok = bool(np.all(np.isfinite(y))) and max_rel <= TOLERANCE[dtype]
    print(f"  checksum: sum(y)={y.sum():.6f} sum|y|={np.abs(y).sum():.6f}")
    print(f"  error vs reference: max_abs={max_abs:.3e} max_rel={max_rel:.3e} "
          f"(tolerance {TOLERANCE[dtype]:.0e}) {'OK' if ok else 'FAIL'}")
    return ok


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", type=Path,
                        help="HuggingFace config.json (repeatable; default: examples/*/config.json)")
    parser.add_argument("--dtype", choices=["f32", "bf16", "all"], default="all")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    configs = args.config or sorted((ROOT / "examples").glob("*/config.json"))
    dtypes = ["f32", "bf16"] if args.dtype == "all" else [args.dtype]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="moe-main-") as work:
        for config in configs:
            for dtype in dtypes:
                print(f"== {config} ({dtype}) ==")
                try:
                    ok = check(config, dtype, args.tokens, args.seed, work)
                except Exception as e:  # a failed compile is reported, not a traceback
                    print(f"  FAILED: {e}")
                    ok = False
                failures += not ok
    total = len(configs) * len(dtypes)
    print(f"{total - failures} of {total} layers match the reference")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
