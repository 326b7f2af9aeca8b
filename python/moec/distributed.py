"""One MPI rank of a multi-rank run (started by mpirun from moec.main).

Every rank builds the same full weights from the seed, keeps its block of
experts, runs the compiled layer on its own tokens and compares the result
with the single-process numpy reference for those tokens. It writes a JSON
result (errors, counters) to --out/rank<r>.json.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

from . import fp8, reference
from .layer import run_layer
from .runtime import Runtime
from .weights import DTYPES, make_inputs

SCENARIOS = ("uniform", "one-rank", "empty-rank", "one-expert")


def tokens_per_rank(scenario, ranks, tokens):
    counts = [tokens + 3 * r for r in range(ranks)]  # uneven on purpose
    if scenario == "empty-rank":
        counts[0] = 0
    return counts


def steer_to_last_rank(plan, x, weights, ranks):
    """Makes every token choose experts of the last rank only."""
    local = plan["experts"] // ranks
    target = slice((ranks - 1) * local, ranks * local)
    if "correction_bias" in weights:  # selection-only bias: weights unaffected
        weights["correction_bias"][target] += 50.0
    else:
        x[:] = np.abs(x.astype(np.float32)).astype(x.dtype)
        boost = np.full(plan["hidden_size"], 20.0 / plan["hidden_size"], np.float32)
        router = weights["router_weight"].astype(np.float32)
        router[target] += boost
        weights["router_weight"] = router.astype(weights["router_weight"].dtype)


def steer_to_expert_zero(plan, x, weights):
    """Makes every token choose expert 0 (as one of its top-k)."""
    x[:] = np.abs(x.astype(np.float32)).astype(x.dtype)
    router = weights["router_weight"].astype(np.float32)
    router[0] += 100.0 / plan["hidden_size"]
    weights["router_weight"] = router.astype(weights["router_weight"].dtype)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", choices=SCENARIOS, default="uniform")
    parser.add_argument("--tolerance", type=float, required=True)
    parser.add_argument("--token-counts", help="tokens of each rank, e.g. 500,200,256")
    parser.add_argument("--tp", type=int, default=1,
                        help="tensor-parallel group size: tp consecutive ranks hold the same tokens")
    parser.add_argument("--phase", choices=("auto", "prefill", "decode"), default="auto",
                        help="for layers compiled with --decode-max-tokens")
    parser.add_argument("--placement",
                        help="moe-eplb output: a layer's phy2log and share place the experts "
                             "(the layer must be compiled with --physical-experts)")
    parser.add_argument("--placement-layer", type=int, default=0,
                        help="which layer of --placement (default 0; a DeepSeek-V3 trace's "
                             "first layers are dense)")
    parser.add_argument("--expert-rows-quantization", choices=("none", *fp8.SCHEMES),
                        default="none",
                        help="the reference's experts see the rows an FP8 dispatch delivers "
                             "(quantized and dequantized by moec.fp8)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    runtime = Runtime("mpi")
    rank, ranks = runtime.rank, runtime.size
    plan = json.loads(Path(args.plan).read_text())
    groups = ranks // args.tp  # token sets: one per tensor-parallel group
    counts = ([int(c) for c in args.token_counts.split(",")] if args.token_counts
              else tokens_per_rank(args.scenario, groups, args.tokens))
    if len(counts) != groups:
        raise SystemExit(f"--token-counts gives {len(counts)} token sets, expected {groups}")
    x_all, weights = make_inputs(plan, sum(counts), args.seed)
    if args.scenario == "one-rank":
        steer_to_last_rank(plan, x_all, weights, ranks)
    if args.scenario == "one-expert":
        steer_to_expert_zero(plan, x_all, weights)
    group = rank // args.tp
    start = sum(counts[:group])
    x = x_all[start:start + counts[group]]

    local = plan["experts"] // ranks
    mine = np.arange(rank * local, (rank + 1) * local)
    args_in_order = dict(weights)
    if args.placement:  # this rank's slots hold replicas of these experts
        placement = json.loads(Path(args.placement).read_text())
        layers = placement["layers"]
        if not 0 <= args.placement_layer < len(layers):
            raise SystemExit(f"--placement-layer {args.placement_layer}: {args.placement} has "
                             f"layers 0 to {len(layers) - 1}")
        if placement.get("devices", ranks) != ranks:
            raise SystemExit(f"--placement {args.placement}: planned for "
                             f"{placement['devices']} devices, the job has {ranks} ranks")
        placed = layers[args.placement_layer]
        phys_to_log = np.array(placed["phy2log"], np.int32)
        if phys_to_log.size and not 0 <= phys_to_log.min() <= phys_to_log.max() < plan["experts"]:
            raise SystemExit(f"--placement {args.placement}: phy2log names experts "
                             f"{phys_to_log.min()} to {phys_to_log.max()}, the layer has "
                             f"{plan['experts']} (a placement for another model?)")
        if len(phys_to_log) % ranks != 0:
            raise SystemExit(f"--placement {args.placement}: {len(phys_to_log)} slots do not "
                             f"divide over {ranks} ranks")
        slots = len(phys_to_log) // ranks
        mine = phys_to_log[rank * slots:(rank + 1) * slots]
    # Each rank holds its experts' weights (and their FP8 scales and biases).
    for name in ("w13", "w2", "w13_scale", "w2_scale", "w13_bias", "w2_bias"):
        if name in weights:
            args_in_order[name] = np.ascontiguousarray(weights[name][mine])
    if args.placement:
        args_in_order["phys_to_log"] = phys_to_log
        args_in_order["replica_share"] = np.array(placed["share"], np.float32)
    elif ranks > 1:
        args_in_order["expert_rank"] = (np.arange(plan["experts"]) // local).astype(np.int32)

    runtime.reset_counters()
    heap_before = runtime.heap_live()
    runtime.reset_heap_peak()
    y = run_layer(args.library, plan, x, args_in_order, args.phase).astype(np.float64)
    heap_peak = runtime.heap_peak() - heap_before
    np.save(Path(args.out, f"y{rank}.npy"), y)
    quantization = fp8.SCHEMES.get(args.expert_rows_quantization)
    expert_rows = (lambda rows: fp8.fake_quantize(quantization, rows)) if quantization else None
    ref = reference.layer(x, weights, plan, expert_rows)
    ids, _ = reference.route(x, weights["router_weight"], plan["routing"],
                             weights.get("correction_bias"), weights.get("router_bias"))
    scale = float(np.max(np.abs(ref))) if ref.size else 1.0
    max_abs = float(np.max(np.abs(y - ref))) if ref.size else 0.0
    result = {
        "rank": rank, "ranks": ranks, "tokens": counts[group],
        "shape_ok": y.shape == ref.shape,
        "max_abs": max_abs, "max_rel": max_abs / scale if scale else 0.0,
        "checksum": [float(y.sum()), float(np.abs(y).sum())],
        "tokens_per_expert": np.bincount(ids.ravel(), minlength=plan["experts"]).tolist(),
        "experts_hit_ranks": sorted({int(e) // local for e in ids.ravel()}),
        "distinct_token_ranks": int(sum(len({int(e) // local for e in row}) for row in ids)),
        "counters": runtime.counters(),
        "heap_peak_bytes": heap_peak,
        "output_file": str(Path(args.out, f"y{rank}.npy")),
        "output_bytes": int(x.shape[0] * x.shape[1] * x.dtype.itemsize),
    }
    result["ok"] = bool(result["shape_ok"] and np.all(np.isfinite(y))
                        and result["max_rel"] <= args.tolerance)
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))
    try:
        runtime.barrier("host.done")
    except RuntimeError as error:
        runtime.exit_failed(error)
    runtime.finalize()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
