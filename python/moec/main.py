"""The main job: compile each example MoE layer, run it on CPU ranks, check it.

For every config (the shipped examples by default) and element type, it
compiles the layer with moe-compile for --ranks expert-parallel ranks, runs it
with mpirun on loopback (each rank on its own tokens), and every rank compares
its output with the single-process numpy reference. It prints the plan, the
errors and the runtime's counters as a JSON report. Exits 1 when any rank's
error is over tolerance or any rank fails.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from .distributed import SCENARIOS, tokens_per_rank
from .toolchain import ROOT, build_dir, compile_config, tool

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


def mpirun(ranks, *command, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), MOE_BUILD_DIR=str(build_dir()),
               OMPI_MCA_btl="self,vader", OMPI_MCA_btl_vader_single_copy_mechanism="none")
    # The layer's OpenMP threads share the cores among the ranks (unless set).
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // ranks)))
    return subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                           *command], env=env, capture_output=True, text=True, timeout=timeout)


def run_ranks(library, plan_path, ranks, tokens, seed, scenario, tolerance, work,
              token_counts=None, tp=1, phase="auto", placement=None,
              expert_rows_quantization="none"):
    """Runs the layer on `ranks` MPI ranks; returns (per-rank results, mpirun)."""
    out = Path(work) / (f"ranks-{Path(library).stem}-{scenario}-{ranks}-{phase}"
                        + ("-placed" if placement else ""))
    out.mkdir(exist_ok=True)
    for stale in [*out.glob("rank*.json"), *out.glob("y*.npy")]:
        stale.unlink()
    extra = ["--token-counts", ",".join(map(str, token_counts))] if token_counts else []
    extra += ["--tp", str(tp), "--phase", phase]
    extra += ["--placement", str(placement)] if placement else []
    extra += ["--expert-rows-quantization", expert_rows_quantization]
    done = mpirun(ranks, sys.executable, "-m", "moec.distributed", "--library", str(library),
                  "--plan", str(plan_path), "--tokens", str(tokens), "--seed", str(seed),
                  "--scenario", scenario, "--tolerance", str(tolerance), "--out", str(out),
                  *extra)
    results = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    return results, done


DECODE_MAX_TOKENS = 8  # decode variant: at most this many tokens per rank


def phase_of(result):
    totals = result["counters"]["totals"]
    if totals.get("dispatch_calls_decode"):
        return "decode"
    return "prefill" if totals.get("dispatch_calls_prefill") else "local"


def report(results, dtype, verbose):
    """Each rank's outcome (printed with --verbose); True when all match."""
    ok = True
    for r in results:
        ok &= r["ok"]
        if verbose:
            print(f"  rank {r['rank']}: {r['tokens']} tokens, {phase_of(r)} variant, "
                  f"checksum sum(y)={r['checksum'][0]:.6f} sum|y|={r['checksum'][1]:.6f}, "
                  f"error vs reference: max_abs={r['max_abs']:.3e} max_rel={r['max_rel']:.3e} "
                  f"(tolerance {TOLERANCE[dtype]:.0e}) {'OK' if r['ok'] else 'FAIL'}")
    return ok


def table_row(config, dtype, ranks, results, ok):
    """(layer, dtype, variant, ranks, max error, pass/fail) of one run."""
    variants = sorted({phase_of(r) for r in results}) or ["-"]
    error = max((r["max_rel"] for r in results), default=float("nan"))
    return [Path(config).parent.name, dtype, "/".join(variants), str(ranks),
            f"{error:.1e}", "pass" if ok else "FAIL"]


def describe_phases(plan):
    for name in ("prefill", "decode"):
        p = plan["phases"].get(name)
        if p:
            spaces = ", ".join(f"{w['name']} {w['bytes']} B" for w in p["workspaces"])
            print(f"  {name}: {p['layout']}; up to {p['max_tokens_per_rank']} tokens per rank; "
                  f"on the wire per rank and call at most: dispatch "
                  f"{p['dispatch_bytes_per_call_max']} B, combine {p['combine_bytes_per_call_max']} B "
                  f"({p['dispatch_bytes_per_token']:.0f} + {p['combine_bytes_per_token']:.0f} B per "
                  f"token: {p['per_token_note']}); workspaces: {spaces}")
    print(f"  phase selection: {plan['phases']['selection']}")


def check(config, dtype, ranks, tokens, seed, scenario, work, verbose):
    """A prefill batch (`tokens` on rank 0) and a decode step, both picked by
    the compiled entry from the token counts. Returns (ok, table rows,
    counters)."""
    max_tokens = max(tokens_per_rank(scenario, ranks, tokens))
    library, plan = compile_config(config, work, dtype, ep=ranks, max_tokens_per_rank=max_tokens,
                                   decode_max_tokens=DECODE_MAX_TOKENS,
                                   name=f"layer_{Path(config).parent.name}".replace("-", "_"))
    plan_path = Path(work) / f"{Path(library).stem}.plan.json"
    if verbose:
        describe(plan, tokens)
        layout = plan["layout"]
        print(f"  layout: ep={layout['ep']} tp={layout['tp']}, "
              f"{layout.get('local_experts', plan['experts'])} experts per rank, "
              f"chunking {plan['chunking']}")
        describe_phases(plan)
    results, done = run_ranks(library, plan_path, ranks, tokens, seed, scenario,
                              TOLERANCE[dtype], work)
    prefill_ok = done.returncode == 0 and len(results) == ranks
    if verbose:
        for r in results:
            print(f"  rank {r['rank']} routing, tokens per expert: {r['tokens_per_expert']}")
    prefill_ok &= report(results, dtype, verbose)
    step = [min(DECODE_MAX_TOKENS, 1 + r) for r in range(ranks)]
    if verbose:
        print(f"  decode step: {step} tokens per rank")
    decoded, decode_done = run_ranks(library, plan_path, ranks, step[0], seed, "uniform",
                                     TOLERANCE[dtype], work, token_counts=step)
    decode_ok = (decode_done.returncode == 0 and len(decoded) == ranks
                 and report(decoded, dtype, verbose))
    for run in (done, decode_done):
        if run.returncode != 0:
            print(f"  mpirun exited {run.returncode}:\n{run.stderr.strip()}")
    rows = [table_row(config, dtype, ranks, results, prefill_ok),
            table_row(config, dtype, ranks, decoded, decode_ok)]
    counters = {"layer": str(config), "dtype": dtype, "ranks": ranks, "scenario": scenario,
                "prefill": [r["counters"] for r in results],
                "decode": [r["counters"] for r in decoded]}
    return prefill_ok and decode_ok, rows, counters


def hf_layer_weights(tensors, layer, plan):
    """A MoE layer's arguments from a HuggingFace checkpoint's tensors, by
    the HuggingFace names (written here from the transformers checkpoints,
    independently of the compiler's loader)."""
    prefix = f"model.layers.{layer}.mlp."
    if plan["model_type"] == "gpt_oss":
        return gpt_oss_layer_weights(tensors, prefix)
    if plan["model_type"] == "mixtral":
        prefix = f"model.layers.{layer}.block_sparse_moe."
    gate, up, down = (("w1", "w3", "w2") if plan["model_type"] == "mixtral"
                      else ("gate_proj", "up_proj", "down_proj"))
    experts = range(plan["experts"])
    weights = {
        "router_weight": tensors[prefix + "gate.weight"],
        "w13": np.stack([np.concatenate([tensors[f"{prefix}experts.{e}.{gate}.weight"],
                                         tensors[f"{prefix}experts.{e}.{up}.weight"]])
                         for e in experts]),
        "w2": np.stack([tensors[f"{prefix}experts.{e}.{down}.weight"] for e in experts]),
    }
    if plan["routing"]["correction_bias"]:
        weights["correction_bias"] = tensors[prefix + "gate.e_score_correction_bias"].reshape(-1)
    if plan["shared_intermediate_size"]:
        shared = prefix + "shared_experts."
        weights["shared_w13"] = np.concatenate([tensors[shared + "gate_proj.weight"],
                                                tensors[shared + "up_proj.weight"]])
        weights["shared_w2"] = tensors[shared + "down_proj.weight"]
    return weights


def gpt_oss_layer_weights(tensors, prefix):
    """gpt-oss keeps its experts fused and transposed (gate_up_proj [E, H, 2I]
    with gate and up in alternate columns, down_proj [E, I, H]) and biases on
    the router and both expert projections."""
    gate_up = tensors[prefix + "experts.gate_up_proj"].transpose(0, 2, 1)
    gate_up_bias = tensors[prefix + "experts.gate_up_proj_bias"]
    return {
        "router_weight": tensors[prefix + "router.weight"],
        "router_bias": tensors[prefix + "router.bias"],
        "w13": np.concatenate([gate_up[:, 0::2], gate_up[:, 1::2]], axis=1),
        "w2": tensors[prefix + "experts.down_proj"].transpose(0, 2, 1),
        "w13_bias": np.concatenate([gate_up_bias[:, 0::2], gate_up_bias[:, 1::2]], axis=1),
        "w2_bias": tensors[prefix + "experts.down_proj_bias"],
    }


def check_checkpoint(example, dtype, tokens, seed, work):
    """moe-compile --model on an example's checkpoint, then every MoE layer
    against the numpy reference with the checkpoint's own weights (read by
    the safetensors package). Returns (ok, table rows)."""
    from safetensors.torch import load_file  # the main job's set-up installs it
    from . import load
    from .reference import layer as reference_layer
    from .weights import DTYPES
    out = Path(work) / f"model-{example.name}-{dtype}"
    subprocess.run([tool("moe-compile"), "--model", str(example), "-o", str(out),
                    "--dtype", dtype], check=True, capture_output=True, text=True)
    model = load(out)
    tensors = {name: t.float().numpy()
               for path in sorted(example.glob("*.safetensors"))
               for name, t in load_file(path).items()}
    ok, rows = True, []
    for index, compiled in sorted(model.layers.items()):
        plan = compiled.plan
        rng = np.random.default_rng(seed + index)
        x = rng.standard_normal((tokens, plan["hidden_size"])).astype(DTYPES[dtype])
        ref = reference_layer(x.astype(np.float64), hf_layer_weights(tensors, index, plan), plan)
        y = np.asarray(compiled(x), np.float64)
        error = float(np.abs(y - ref).max() / np.abs(ref).max())
        passed = error <= TOLERANCE[dtype]
        ok &= passed
        rows.append([f"{example.name}:layer{index}", dtype, "checkpoint", "1", f"{error:.1e}",
                     "pass" if passed else "FAIL"])
    return ok, rows


def print_table(rows):
    header = ["layer", "dtype", "variant", "ranks", "max error", "result"]
    widths = [max(len(str(v)) for v in column) for column in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", type=Path,
                        help="HuggingFace config.json (repeatable; default: examples/*/config.json)")
    parser.add_argument("--dtype", choices=["f32", "bf16", "all"], default="all")
    parser.add_argument("--ranks", type=int, default=2, help="expert-parallel MPI ranks")
    parser.add_argument("--tokens", type=int, default=32, help="tokens on rank 0 (rank r: +3r)")
    parser.add_argument("--scenario", choices=SCENARIOS, default="uniform")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float,
                        help="override the per-dtype tolerance (max |y-ref| / max |ref|)")
    parser.add_argument("--counters", type=Path, default=Path("moe-main-counters.json"),
                        help="where the runtime's counters of every run go (JSON)")
    parser.add_argument("--verbose", action="store_true",
                        help="also print each layer's plan and each rank's outcome")
    args = parser.parse_args(argv)
    if args.tolerance is not None:
        TOLERANCE.update(f32=args.tolerance, bf16=args.tolerance)
    configs = args.config or sorted((ROOT / "examples").glob("*/config.json"))
    dtypes = ["f32", "bf16"] if args.dtype == "all" else [args.dtype]
    failures, checkpoints, rows, counters = 0, 0, [], []
    with tempfile.TemporaryDirectory(prefix="moe-main-") as work:
        for config in configs:
            for dtype in dtypes:
                if args.verbose:
                    print(f"== {config} ({dtype}, {args.ranks} ranks, {args.scenario}) ==")
                try:
                    ok, layer_rows, layer_counters = check(
                        config, dtype, args.ranks, args.tokens, args.seed, args.scenario, work,
                        args.verbose)
                    rows += layer_rows
                    counters.append(layer_counters)
                except Exception as e:  # a failed compile is reported, not a traceback
                    print(f"  {config} ({dtype}): FAILED: {e}")
                    rows.append([Path(config).parent.name, dtype, "-", str(args.ranks), "-",
                                 "FAIL"])
                    ok = False
                failures += not ok
        # The shipped checkpoints: moe-compile --model, one process.
        for config in configs:
            if not (config.parent / "model.safetensors").exists():
                continue
            for dtype in dtypes:
                try:
                    ok, layer_rows = check_checkpoint(config.parent, dtype, args.tokens,
                                                      args.seed, work)
                    rows += layer_rows
                except Exception as e:  # a failed compile is reported, not a traceback
                    detail = getattr(e, "stderr", "") or ""
                    print(f"  {config.parent} ({dtype}, --model): FAILED: {e} {detail}")
                    rows.append([config.parent.name, dtype, "checkpoint", "1", "-", "FAIL"])
                    ok = False
                failures += not ok
                checkpoints += 1
    print(f"scenario {args.scenario}, {args.ranks} expert-parallel ranks on MPI; max error = "
          f"max |y - ref| / max |ref| over ranks (tolerance f32 {TOLERANCE['f32']:.0e}, "
          f"bf16 {TOLERANCE['bf16']:.0e})")
    print_table(rows)
    args.counters.write_text(json.dumps(counters, indent=1))
    print(f"runtime counters: {args.counters.resolve()}")
    total = len(configs) * len(dtypes) + checkpoints
    print(f"{total - failures} of {total} layers match the reference "
          f"({checkpoints} of them compiled from checkpoints with --model)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
