#!/usr/bin/env python3
"""One MPI rank of the expert-parallel benchmark (started by bench_layers.py via mpirun).

Every rank makes the router (and shared expert) and only its own block of
experts from the seeded per-expert streams of common.make_weights, takes its
own tokens, calls the compiled layer (1 warm-up + --repeats timed calls, the
runtime's counters reset before each) and prints one line
`<out>/rank<r>.json`: whole-call times, the per-phase seconds (dispatch,
combine) and `compute_ns` when the runtime reports it (median over calls).

With one rank and an ep=1 library it is the one-process baseline: it holds
--token-sets token sets (the union of what N ranks hold) and every expert.
"""
import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import common  # noqa: E402  (puts python/ on the path)
from moec.layer import check_arguments  # noqa: E402
from moec.memref import CompiledFunction  # noqa: E402
from moec.runtime import Runtime  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--library", required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--tokens-per-set", type=int, required=True)
    p.add_argument("--token-sets", type=int, default=1,
                   help="one process: hold this many ranks' token sets")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-seconds", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="each rank writes rank<r>.json here")
    args = p.parse_args()

    runtime = Runtime("mpi")
    common.pin_threads(1)
    rank, ranks = runtime.rank, runtime.size
    plan = json.loads(Path(args.plan).read_text())
    experts = plan["experts"]
    local = experts // ranks
    mine = range(rank * local, (rank + 1) * local)
    weights = common.make_weights(plan, args.seed, experts=mine)
    if ranks > 1:
        weights["expert_rank"] = (np.arange(experts) // local).astype(np.int32)
        sets = [rank]
    else:
        sets = range(args.token_sets)
    x = np.concatenate([common.make_tokens(plan, args.tokens_per_set, args.seed, stream=1000 + s)
                        for s in sets])
    ordered = check_arguments(plan, x, weights)
    if "phase_argument" in plan["entry_point"]:  # 0: the phase by the agreed token count
        ordered = [*ordered, 0]
    fn = CompiledFunction(args.library, plan["entry_point"]["symbol"].removeprefix("_mlir_ciface_"),
                          [(2, np.float32)])

    calls, dispatch, combine, compute, counters = [], [], [], [], None
    waits = []
    call_cpu, compute_cpu = [], []

    def call():
        nonlocal counters
        runtime.reset_counters()
        start, cpu_start = time.perf_counter(), time.process_time()
        y = fn(*ordered)
        calls.append(time.perf_counter() - start)
        call_cpu.append(time.process_time() - cpu_start)
        counters = runtime.counters()
        phases = counters.get("phase_seconds", {})
        dispatch.append(float(phases.get("dispatch", 0.0) or 0.0))
        combine.append(float(phases.get("combine", 0.0) or 0.0))
        # peer_wait_ns: the part of both phases spent until every peer had
        # arrived at a collective (the busiest rank's compute, a shared core).
        waits.append(float(common.find_key(counters, "peer_wait_ns") or 0) * 1e-9)
        # compute_ns: time between each dispatch and its combine; a layer
        # without EP collectives (the one-process baseline) has no such span
        # (compute_calls 0), so its whole call is its compute.
        c = common.find_key(counters, "compute_ns")
        measured = c is not None and (common.find_key(counters, "compute_calls") or 0) > 0
        compute.append(float(c) * 1e-9 if measured else None)
        # compute_cpu_ns: the CPU time of that span (ranks may share cores).
        cpu = common.find_key(counters, "compute_cpu_ns")
        compute_cpu.append(float(cpu) * 1e-9 if measured and cpu is not None else None)
        return y

    # Every rank must make the same number of calls (collectives): with a time
    # budget, the slowest rank's warm-up decides for all.
    y = call()
    repeats = args.repeats
    if args.max_seconds:
        first = agree_max(runtime, calls[0])
        repeats = 0 if first >= args.max_seconds else max(
            1, min(repeats, int((args.max_seconds - first) / max(first, 1e-9))))
    if repeats:
        del calls[:], dispatch[:], combine[:], compute[:], call_cpu[:], compute_cpu[:], waits[:]
        for _ in range(repeats):
            y = call()
    runtime.barrier("bench.done")
    med = lambda v: float(np.median(v))  # noqa: E731
    result = {
        "rank": rank, "ranks": ranks, "tokens": int(x.shape[0]),
        "call": common.summary(calls),
        "dispatch_s": med(dispatch), "combine_s": med(combine), "peer_wait_s": med(waits),
        "transfer_s": med([d + c - w for d, c, w in zip(dispatch, combine, waits)]),
        "compute_s": None if any(c is None for c in compute) else med(compute),
        "call_cpu_s": med(call_cpu),
        "compute_cpu_s": None if any(c is None for c in compute_cpu) else med(compute_cpu),
        "checksum": float(np.abs(y).sum()),
        "counters": counters,
    }
    # A file per rank: mpirun may splice the ranks' stdout lines together.
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))
    runtime.finalize()
    return 0


def agree_max(runtime, seconds):
    """The largest `seconds` over the ranks (moert_allreduce_i64, op 1 = max, in
    microseconds), so that every rank makes the same number of calls."""
    import ctypes
    value = (ctypes.c_int64 * 1)(int(seconds * 1e6))
    if runtime.lib.moert_allreduce_i64(b"bench.warmup", value, 1, 1) != 0:
        raise RuntimeError(runtime.lib.moert_last_error().decode())
    return value[0] * 1e-6


if __name__ == "__main__":
    sys.exit(main())
