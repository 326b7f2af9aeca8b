#!/usr/bin/env python3
"""CPU benchmark of compiled MoE layers (issue 10): compiled vs numpy vs torch vs the FLOP floor.

Compiles the two layers of benchmarks/cpu/configs/ (a Qwen3-30B-A3B-shaped and
a DeepSeek-like MoE block), runs them for each token count and prints, side by
side: compiled, numpy (OpenBLAS, per-expert loop) and torch CPU times
(min/median), the FLOP floor from a measured sgemm peak, ratios, % of peak and
the max error of each against the float64 reference (python/moec/reference.py).
Then routing and dispatch alone (compiled moe.route / moe.dispatch vs numpy
argpartition / argsort), expert parallelism over MPI ranks (runtime counters)
and compile times. Every side runs single-threaded unless --threads says
otherwise; each (layer, threads) configuration runs in its own process with
OMP_NUM_THREADS / OPENBLAS_NUM_THREADS set before numpy loads.

A program that prints figures, not a test: it fails only if something crashes.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "python"))

from moec.toolchain import build_dir, compile_config, compile_mlir  # noqa: E402  (no numpy)

LAYERS = {
    "qwen3": HERE / "configs" / "qwen3-30b-a3b-moe.json",
    "deepseek": HERE / "configs" / "deepseek-like-moe.json",
}
FULL_TOKENS = [1, 16, 128, 512, 2048]
QUICK_TOKENS = [1, 16]

# ------------------------------------------------------------------ routing / dispatch IR
# The results of moe.dispatch, in order: (name, rank, element type, shape with
# T = tokens, N = T*k rows, E = experts, H = hidden, K = top-k). When the op
# gains a result (expert_offsets), add it here; the IR and the caller follow.
DISPATCH_RESULTS = [
    ("dispatched", 2, "x", "?xH"),
    ("row_expert", 1, "i32", "?"),
    ("slot", 2, "i32", "?xK"),
]


def _tensor(shape, elem, e, h, k):
    dims = shape.replace("E", str(e)).replace("H", str(h)).replace("K", str(k))
    return f"tensor<{dims}x{elem}>"


def routing_source(experts, hidden, top_k):
    """Three entries: route, dispatch (given ids), route + dispatch (softmax top-k,
    normalized, as Qwen3)."""
    x = f"tensor<?x{hidden}xf32>"
    wr = f"tensor<{experts}x{hidden}xf32>"
    ids, weights = f"tensor<?x{top_k}xi32>", f"tensor<?x{top_k}xf32>"
    outs = [_tensor(shape, "f32" if elem == "x" else elem, experts, hidden, top_k)
            for _, _, elem, shape in DISPATCH_RESULTS]
    names = ", ".join(f"%d{n}" for n in range(len(outs)))
    attr = "attributes {llvm.emit_c_interface}"
    route = (f"moe.route %x, %wr routing <softmax, top_k = {top_k}, normalize>\n"
             f"      : ({x}, {wr}) -> ({ids}, {weights})")
    dispatch = (f"moe.dispatch %x, %ids num_experts = {experts}\n"
                f"      : ({x}, {ids}) -> ({', '.join(outs)})")
    return f"""
func.func @route(%x: {x}, %wr: {wr}) -> ({ids}, {weights}) {attr} {{
  %ids, %w = {route}
  return %ids, %w : {ids}, {weights}
}}
func.func @dispatch(%x: {x}, %ids: {ids}) -> ({', '.join(outs)}) {attr} {{
  {names} = {dispatch}
  return {names} : {', '.join(outs)}
}}
func.func @route_dispatch(%x: {x}, %wr: {wr}) -> ({', '.join(outs)}, {weights}) {attr} {{
  %ids, %w = {route}
  {names} = {dispatch}
  return {names}, %w : {', '.join(outs)}, {weights}
}}
"""


# ------------------------------------------------------------------ formatting

def ms(seconds):
    if seconds is None:
        return "-"
    v = seconds * 1e3
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def pair(m):
    return f"{ms(m['min_s'])}/{ms(m['median_s'])}" + ("" if m["runs"] >= 5 else f" ({m['runs']})")


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def table(header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


# ------------------------------------------------------------------ workers (subprocesses)

def run_worker(kind, spec, threads, work, timeout=None):
    """Runs `kind` in a child process pinned to `threads`; returns its JSON."""
    import common  # noqa: F401  (only for thread_env; numpy loads here, harmless)
    spec_path = Path(work) / f"spec-{kind}-{time.monotonic_ns()}.json"
    out_path = spec_path.with_suffix(".out.json")
    spec_path.write_text(json.dumps({**spec, "threads": threads, "out": str(out_path)}))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", kind,
                           str(spec_path)], env=common.thread_env(threads), timeout=timeout)
    if done.returncode != 0 or not out_path.exists():
        raise RuntimeError(f"{kind} worker ({threads} threads) exited {done.returncode}")
    return json.loads(out_path.read_text())


def worker_layer(spec):
    """One layer at one thread count: every dtype and token count."""
    import numpy as np
    import common
    from moec import reference
    from moec.layer import check_arguments
    from moec.memref import CompiledFunction
    common.pin_threads(spec["threads"])
    plan = spec["plan"]
    repeats, budget = spec["repeats"], spec["budget_s"]
    log = lambda *a: print(f"    [{plan['model_type']} {spec['threads']}t]", *a, flush=True)  # noqa
    started = time.perf_counter()
    w32 = common.make_weights(plan, spec["seed"])
    log(f"weights made in {time.perf_counter() - started:.1f} s")
    peak = common.sgemm_peak()
    w64 = {k: v.astype(np.float64) for k, v in w32.items()} if spec["errors"] else None
    torch_note = "skipped" if spec["skip_torch"] else common.torch_status()
    results = {"sgemm_peak_flops": peak, "torch": torch_note, "rows": []}
    for dtype in spec["dtypes"]:
        lib = spec["libraries"][dtype]
        wd = common.cast(w32, dtype)
        # With FP8 weights numpy, torch and the reference use the values the
        # codes stand for.
        w_np = common.dequantized(w32) if dtype == "fp8" else w32
        w_ref = ({k: v.astype(np.float64) for k, v in w_np.items()}
                 if dtype == "fp8" and w64 else w64)
        ordered = check_arguments(lib["plan"], common.make_tokens(plan, 1).astype(
            common.NP_DTYPE[dtype]), wd)[1:]
        fn = CompiledFunction(lib["library"], lib["plan"]["entry_point"]["symbol"]
                              .removeprefix("_mlir_ciface_"), [(2, common.NP_DTYPE[dtype])])
        torch_layer = None
        if torch_note.startswith("torch "):
            try:
                torch_layer, how = common.make_torch_layer(
                    w_np, plan, "bf16" if dtype == "fp8" else dtype, not spec["torch_own"])
                results["torch"] = f"{torch_note}; {how}"
            except Exception as error:
                results["torch"] = f"{torch_note}: failed ({error})"
        for tokens in spec["tokens"]:
            x32 = common.make_tokens(plan, tokens, spec["seed"])
            x = x32.astype(common.NP_DTYPE[dtype])
            row = {"dtype": dtype, "tokens": tokens, "threads": spec["threads"],
                   "flops": common.layer_flops(plan, tokens)}
            ref = reference.layer(x32.astype(np.float64), w_ref, plan) if w_ref else None
            y, t = common.measure(lambda: fn(x, *ordered), repeats, budget)
            row["compiled"] = common.summary(t)
            if ref is not None:
                row["compiled"].update(common.rel_error(y, ref))
            # numpy has no bf16 GEMM: its column is always f32 (on the same values)
            y, t = common.measure(lambda: common.numpy_layer(x32, w_np, plan), repeats, budget)
            row["numpy"] = common.summary(t)
            if ref is not None:
                row["numpy"].update(common.rel_error(y, ref))
            if torch_layer is not None:
                y, t = common.measure(lambda: torch_layer(x32), repeats, budget)
                row["torch"] = common.summary(t)
                if ref is not None:
                    row["torch"].update(common.rel_error(y, ref))
            log(f"{dtype} T={tokens}: compiled {ms(row['compiled']['median_s'])} ms, "
                f"numpy {ms(row['numpy']['median_s'])} ms")
            results["rows"].append(row)
    return results


def worker_routing(spec):
    """Compiled moe.route / moe.dispatch vs numpy at one (T, E)."""
    import numpy as np
    import common
    from moec import reference
    from moec.memref import CompiledFunction
    common.pin_threads(spec["threads"])
    t, e, h, k = spec["tokens"], spec["experts"], spec["hidden"], spec["top_k"]
    repeats, budget = spec["repeats"], spec["budget_s"]
    routing = {"score": "softmax", "top_k": k, "normalize": True}
    rng = np.random.default_rng([spec["seed"], 7, e])
    x = rng.standard_normal((t, h), dtype=np.float32)
    wr = rng.standard_normal((e, h), dtype=np.float32) / np.float32(np.sqrt(h))
    d_results = [(rank, np.float32 if elem == "x" else np.int32)
                 for _, rank, elem, _ in DISPATCH_RESULTS]
    lib = spec["library"]
    route = CompiledFunction(lib, "route", [(2, np.int32), (2, np.float32)])
    dispatch = CompiledFunction(lib, "dispatch", d_results)
    both = CompiledFunction(lib, "route_dispatch", d_results + [(2, np.float32)])
    out = {"tokens": t, "experts": e, "hidden": h, "top_k": k}

    (ids, weights), times = common.measure(lambda: route(x, wr), repeats, budget)
    out["compiled_route"] = common.summary(times)
    ref_ids, ref_w = reference.route(x, wr, routing)
    out["route_ids_equal"] = float(np.mean(np.all(ids == ref_ids, axis=1)))
    out["route_weight_max_abs"] = float(np.max(np.abs(weights - ref_w)))
    logits = x @ wr.T
    _, times = common.measure(lambda: x @ wr.T, repeats)
    out["numpy_router_gemm"] = common.summary(times)
    (np_ids, _), times = common.measure(lambda: common.numpy_topk(logits, routing), repeats)
    out["numpy_topk"] = common.summary(times)
    _, times = common.measure(lambda: common.numpy_route(x, wr, routing), repeats)
    out["numpy_route"] = common.summary(times)
    out["numpy_ids_equal"] = float(np.mean(np.all(np.sort(np_ids, 1) == np.sort(ref_ids, 1), 1)))

    res, times = common.measure(lambda: dispatch(x, ref_ids), repeats, budget)
    out["compiled_dispatch"] = common.summary(times)
    np_res, times = common.measure(lambda: common.numpy_dispatch(x, ref_ids), repeats)
    out["numpy_dispatch"] = common.summary(times)
    out["dispatch_equal"] = bool(all(np.array_equal(a, b) for a, b in zip(res, np_res)))
    del res, np_res
    _, times = common.measure(lambda: both(x, wr), repeats, budget)
    out["compiled_route_dispatch"] = common.summary(times)
    return out


def worker_peak(spec):
    import common
    common.pin_threads(spec["threads"])
    return {"sgemm_peak_flops": common.sgemm_peak()}


WORKERS = {"layer": worker_layer, "routing": worker_routing, "peak": worker_peak}


def worker_main(kind, spec_path):
    spec = json.loads(Path(spec_path).read_text())
    result = WORKERS[kind](spec)
    Path(spec["out"]).write_text(json.dumps(result))
    return 0


# ------------------------------------------------------------------ sections

def section_layers(args, work, report):
    import common  # for fp8_config (numpy loads here, harmless)
    compiled = {}
    compile_rows = []
    for name in args.layers:
        for dtype in args.dtypes:
            start = time.perf_counter()
            config = LAYERS[name] if dtype != "fp8" else common.fp8_config(LAYERS[name], work)
            library, plan = compile_config(config, work, "bf16" if dtype == "fp8" else dtype,
                                           name=f"bench_{name}{'_fp8' if dtype == 'fp8' else ''}",
                                           max_tokens_per_rank=max(args.tokens),
                                           decode_max_tokens=args.decode_max_tokens)
            seconds = time.perf_counter() - start
            compiled[(name, dtype)] = {"library": str(library), "plan": plan}
            compile_rows.append([name, dtype, f"{seconds:.2f}",
                                 f"{Path(library).stat().st_size / 1e3:.0f}"])
            report["compile"].append({"layer": name, "dtype": dtype, "seconds": seconds})
    print("\n== compile time per layer (moe-compile --config, wall) ==")
    print(table(["layer", "dtype", "seconds", "library kB"], compile_rows))

    for name in args.layers:
        plan = compiled[(name, args.dtypes[0])]["plan"]
        r = plan["routing"]
        print(f"\n== layer {name}: {LAYERS[name].relative_to(ROOT)} ==")
        print(f"   H={plan['hidden_size']} I={plan['intermediate_size']} E={plan['experts']} "
              f"top-{plan['top_k']} {r['score']}"
              + (f" groups {r['topk_group']}/{r['n_group']}" if r["n_group"] > 1 else "")
              + (" +bias" if r["correction_bias"] else "")
              + f" scale {r['routed_scaling_factor']} shared I={plan['shared_intermediate_size']}")
        for threads in args.threads:
            spec = {"plan": plan, "dtypes": args.dtypes, "tokens": args.tokens,
                    "repeats": args.repeats, "budget_s": args.max_seconds, "seed": args.seed,
                    "skip_torch": args.skip_torch, "torch_own": args.torch_own, "errors": not args.no_errors,
                    "libraries": {d: compiled[(name, d)] for d in args.dtypes}}
            try:
                res = run_worker("layer", spec, threads, work)
            except Exception as error:  # report it and go on with the next one
                print(f"!! {name}, {threads} threads failed: {error}", flush=True)
                continue
            peak = res["sgemm_peak_flops"]
            report["layers"].append({"layer": name, "threads": threads, **res})
            print(f"\n-- {name}, {threads} thread{'s' if threads > 1 else ''} "
                  f"(every side); sgemm peak {peak / 1e9:.1f} GFLOP/s; {res['torch']} --")
            print("   times in ms, min/median of N runs ((n) when fewer than 5); err = max|y-ref|/max|ref|"
                  " vs float64; numpy is f32 in every row")
            rows = []
            for row in res["rows"]:
                c, n, t = row["compiled"], row["numpy"], row.get("torch")
                floor = row["flops"] / peak
                rows.append([row["dtype"], row["tokens"], pair(c), pair(n),
                             pair(t) if t else "-", ms(floor),
                             ratio(c["median_s"], n["median_s"]),
                             ratio(c["median_s"], t["median_s"]) if t else "-",
                             f"{100 * floor / c['median_s']:.1f}",
                             f"{100 * floor / n['median_s']:.1f}",
                             f"{c.get('max_rel', float('nan')):.1e}",
                             f"{n.get('max_rel', float('nan')):.1e}",
                             f"{t.get('max_rel', float('nan')):.1e}" if t else "-"])
            print(table(["dtype", "T", "compiled", "numpy", "torch", "floor", "c/np", "c/torch",
                         "c %pk", "np %pk", "err c", "err np", "err torch"], rows))


def section_routing(args, work, report):
    print(f"\n== routing and dispatch alone: T={args.route_tokens}, H={args.route_hidden}, "
          f"top-{args.route_topk} softmax, 1 thread; ms min/median ==")
    print("   numpy route = router GEMM (x @ Wr.T) + softmax + argpartition top-k;"
          " numpy dispatch = stable argsort + gather")
    rows = []
    for experts in args.route_experts:
        start = time.perf_counter()
        library = compile_mlir(routing_source(experts, args.route_hidden, args.route_topk),
                               work, f"routing_e{experts}")
        seconds = time.perf_counter() - start
        spec = {"library": str(library), "tokens": args.route_tokens, "experts": experts,
                "hidden": args.route_hidden, "top_k": args.route_topk, "repeats": args.repeats,
                "budget_s": args.max_seconds, "seed": args.seed}
        res = run_worker("routing", spec, 1, work)
        res["compile_s"] = seconds
        report["routing"].append(res)
        cr, nr = res["compiled_route"], res["numpy_route"]
        cd, nd = res["compiled_dispatch"], res["numpy_dispatch"]
        rows.append([experts, pair(cr), pair(nr), pair(res["numpy_router_gemm"]),
                     pair(res["numpy_topk"]), ratio(cr["median_s"], nr["median_s"]),
                     f"{100 * res['route_ids_equal']:.2f}", pair(cd), pair(nd),
                     ratio(cd["median_s"], nd["median_s"]),
                     "yes" if res["dispatch_equal"] else "NO",
                     pair(res["compiled_route_dispatch"]), f"{seconds:.2f}"])
    print(table(["E", "c route", "np route", "np gemm", "np top-k", "route c/np", "ids=ref %",
                 "c dispatch", "np argsort", "disp c/np", "same", "c route+disp",
                 "compile s"], rows))


def run_ep(library, plan_path, ranks, token_sets, tokens, args, work, tag):
    out = Path(work) / f"ep-{tag}"
    out.mkdir(exist_ok=True)
    import common
    env = common.thread_env(1)
    env.update(MOE_BUILD_DIR=str(build_dir()), OMPI_MCA_btl="self,vader",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
           sys.executable, str(HERE / "ep_worker.py"), "--library", str(library),
           "--plan", str(plan_path), "--tokens-per-set", str(tokens),
           "--token-sets", str(token_sets), "--repeats", str(args.repeats),
           "--max-seconds", str(args.max_seconds), "--seed", str(args.seed),
           "--out", str(out)]
    for stale in out.glob("rank*.json"):
        stale.unlink()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    results = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    if done.returncode != 0 or len(results) != ranks:
        raise RuntimeError(f"mpirun -np {ranks} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return sorted(results, key=lambda r: r["rank"])


def section_ep(args, work, report):
    print(f"\n== expert parallelism on MPI ranks (loopback, {os.cpu_count()} cores, 1 thread per "
          f"rank, {args.ep_tokens} tokens per rank, f32); ms ==")
    print("   compute = runtime counter compute_ns when the runtime reports it, else the whole call;"
          " d+c = dispatch + combine phase seconds; wait = of d+c, the time until every peer had"
          " arrived at a collective (runtime peer_wait_ns); moved = d+c - wait")
    rows = []
    for name in args.layers:
        for ranks in args.ep_ranks:
            try:
                ep_one(name, ranks, args, work, report, rows)
            except Exception as error:  # a failed compile or run: report it, go on
                print(f"!! EP{ranks} {name} failed: {str(error)[:400]}", flush=True)
    print(table(["layer", "ranks", "rank", "tokens", "call", "compute", "dispatch", "combine",
                 "d+c %", "wait", "moved %", "one process", "speed-up", "cpu", "one cpu", "cpu speed-up",
                 "expert GFLOP", "share %", "cpu/FLOP"], rows))
    print("   cpu = CPU time of the rank's compute span (runtime compute_cpu_ns); one cpu = CPU "
          "time of the one-process call; with more ranks than cores only the CPU figures show "
          "each rank's share of the work")
    print("   expert GFLOP = the rank's routed-expert FLOPs (runtime expert_choices_received x "
          "6·H·I); share = of all ranks' sum (ideal 100/ranks); cpu/FLOP = the rank's CPU time "
          "per expert FLOP over the one process's (no work wasted or repeated: about 1, less by "
          "the one process's router and shared expert, which its whole-call CPU time includes)")


def ep_one(name, ranks, args, work, report, rows):
    """One EP run (N ranks) and its one-process baseline; appends table rows."""
    import common
    total = ranks * args.ep_tokens
    lib1, plan1 = compile_config(LAYERS[name], work, "f32", name=f"ep1_{name}",
                                 max_tokens_per_rank=total)
    one = run_ep(lib1, Path(lib1).with_suffix(".plan.json"), 1, ranks, args.ep_tokens,
                 args, work, f"{name}-1x{ranks}")[0]
    lib, plan = compile_config(LAYERS[name], work, "f32", name=f"ep_{name}", ep=ranks,
                               max_tokens_per_rank=args.ep_tokens)
    res = run_ep(lib, Path(lib).with_suffix(".plan.json"), ranks, 1, args.ep_tokens,
                 args, work, f"{name}-{ranks}")

    one_t = one["compute_s"] if one["compute_s"] is not None else one["call"]["median_s"]
    flops_per_choice = expert_flops_per_choice(plan)
    one_flops = total * plan["top_k"] * flops_per_choice
    for r in res:
        r["expert_flops"] = (common.find_key(r["counters"], "expert_choices_received") or 0) \
            * flops_per_choice
    all_flops = sum(r["expert_flops"] for r in res) or 1
    report["ep"].append({"layer": name, "ranks": ranks, "one_process": one,
                         "one_process_flops": one_flops, "per_rank": res})
    for r in res:
        comp = r["compute_s"] if r["compute_s"] is not None else r["call"]["median_s"]
        dc = r["dispatch_s"] + r["combine_s"]
        rows.append([name, ranks, r["rank"], r["tokens"], pair(r["call"]),
                     ms(r["compute_s"]) if r["compute_s"] is not None else "n/a",
                     ms(r["dispatch_s"]), ms(r["combine_s"]),
                     f"{100 * dc / r['call']['median_s']:.1f}", ms(r["peer_wait_s"]),
                     f"{100 * r['transfer_s'] / r['call']['median_s']:.1f}",
                     f"{total} tok: {ms(one_t)}", f"{one_t / comp:.2f} (ideal {ranks})",
                     ms(r.get("compute_cpu_s")) if r.get("compute_cpu_s") else "n/a",
                     ms(one.get("call_cpu_s")) if one.get("call_cpu_s") else "n/a",
                     f"{one['call_cpu_s'] / r['compute_cpu_s']:.2f}"
                     if r.get("compute_cpu_s") and one.get("call_cpu_s") else "n/a",
                     f"{r['expert_flops'] / 1e9:.2f}",
                     f"{100 * r['expert_flops'] / all_flops:.1f}",
                     f"{cpu_per_flop(r, one, one_flops):.2f}" if cpu_per_flop(r, one, one_flops)
                     else "n/a"])


def compare_exchanges(args, work, report, key, forms, tokens_list, compile_args):
    """Two forms of a layer's exchange side by side on the same ranks and
    tokens: `forms` maps each form's name to its compile_config options (on
    top of `compile_args`); prints whole-call and exchange-phase times of the
    slowest rank and whether every rank's output is the same."""
    first, second = forms
    rows = []
    report[key] = []
    for name in args.layers:
        for ranks in args.ep_ranks:
            libs = {form: compile_config(LAYERS[name], work, "f32",
                                         name=f"{key}_{form.replace('-', '_')}_{name}",
                                         ep=ranks, **compile_args, **options)[0]
                    for form, options in forms.items()}
            for tokens in tokens_list:
                got = {form: run_ep(lib, Path(lib).with_suffix(".plan.json"), ranks, 1, tokens,
                                    args, work, f"{key}{form}-{name}-{ranks}-{tokens}")
                       for form, lib in libs.items()}
                slowest = {f: max(r["call"]["median_s"] for r in res) for f, res in got.items()}
                moved = {f: max(r["dispatch_s"] + r["combine_s"] for r in res)
                         for f, res in got.items()}
                same = all(abs(a["checksum"] - b["checksum"]) <= 1e-5 * max(abs(a["checksum"]), 1)
                           for a, b in zip(got[first], got[second]))
                report[key].append({"layer": name, "ranks": ranks, "tokens": tokens,
                                    "per_rank": got})
                rows.append([name, ranks, tokens, ms(slowest[first]), ms(slowest[second]),
                             ratio(slowest[second], slowest[first]), ms(moved[first]),
                             ms(moved[second]), "yes" if same else "NO"])
    print(table(["layer", "ranks", "tokens/rank", first, second, f"{second}/{first}",
                 f"{first} d+c", f"{second} d+c", "same y"], rows))
    print("   d+c = the runtime's dispatch + combine phase seconds (what the layer computes "
          "itself, the gather's id map and rank-order sum or the packing and sums, is counted "
          "in the call, not in d+c); same y = each rank's checksum equal within 1e-5")


def section_ep_exchange(args, work, report):
    """The decode layout's two exchanges side by side: packed on the host
    (moert_ep_dispatch_into_*) and the all-gather form (--ep-all-gather), on
    the same ranks and tokens, both into the layer's buffers."""
    slots = max(args.exchange_tokens)
    print(f"\n== decode exchange on MPI ranks: packed vs all-gather (--ep-into-buffers, "
          f"{slots} slots, f32, 1 thread per rank); whole-call ms, the slowest rank's median ==")
    compare_exchanges(args, work, report, "ep_exchange",
                      {"packed": {}, "all-gather": {"ep_all_gather": True}},
                      args.exchange_tokens,
                      dict(max_tokens_per_rank=slots, decode_max_tokens=slots,
                           ep_into_buffers=True))


def section_ep_pack(args, work, report):
    """The prefill exchange's two packings side by side: by the runtime on the
    host (moert_ep_dispatch_into_*) and by the layer's own ops
    (--ep-pack-in-layer), on the same ranks and tokens, both into the layer's
    buffers."""
    print("\n== prefill exchange on MPI ranks: packed by the runtime vs by the layer "
          "(--ep-into-buffers, f32, 1 thread per rank); whole-call ms, the slowest rank's "
          "median ==")
    compare_exchanges(args, work, report, "ep_pack",
                      {"runtime": {}, "layer": {"ep_pack_in_layer": True}}, args.pack_tokens,
                      dict(max_tokens_per_rank=max(args.pack_tokens), ep_into_buffers=True))


def section_ep_fp8_codes(args, work, report):
    """An FP8 dispatch (g128) into the layer's buffers, its rows dequantized on
    receipt (--fp8-gemm=false) or read as codes by the gate/up GEMM
    (moert_ep_dispatch_fp8_into_*), on the same ranks and tokens."""
    print("\n== FP8 dispatch into the layer's buffers on MPI ranks: dequantized on receipt vs "
          "codes read by the GEMM (--ep-into-buffers --dispatch-quant fp8-e4m3-g128, f32, 1 "
          "thread per rank); whole-call ms, the slowest rank's median ==")
    compare_exchanges(args, work, report, "ep_fp8_codes",
                      {"dequantized": {"fp8_gemm": False}, "codes": {"fp8_gemm": True}},
                      args.pack_tokens,
                      dict(max_tokens_per_rank=max(args.pack_tokens), ep_into_buffers=True,
                           dispatch_quant="fp8-e4m3-g128"))


def expert_flops_per_choice(plan):
    """FLOPs of one (token, expert) pair in the routed experts: gate, up, down."""
    return 6 * plan["hidden_size"] * plan["intermediate_size"]


def cpu_per_flop(rank, one, one_flops):
    """The rank's compute CPU time per expert FLOP over the one process's (1.0
    when every rank computes its own experts' rows once, at the same speed)."""
    if not (rank.get("compute_cpu_s") and one.get("call_cpu_s") and rank["expert_flops"]):
        return None
    return (rank["compute_cpu_s"] / rank["expert_flops"]) / (one["call_cpu_s"] / one_flops)


def print_goals(args, report):
    """The figures the issue's goals are checked with, gathered in one place."""
    print("\n== goals ==")
    by = {(l["layer"], l["threads"]): l for l in report["layers"]}
    for name in args.layers:
        one = by.get((name, 1)) or by.get((name, args.threads[0]))
        if not one:
            continue
        f32 = [r for r in one["rows"] if r["dtype"] == "f32"]
        if f32:
            ratios = [r["compiled"]["median_s"] / r["numpy"]["median_s"] for r in f32]
            print(f"{name}: compiled/numpy f32 ({one['threads']} thread) per T: "
                  + ", ".join(f"T={r['tokens']}: {q:.2f}" for r, q in zip(f32, ratios))
                  + f"  -> {'MET' if max(ratios) <= 1.0 else 'NOT MET'} (goal <= 1.0 everywhere)")
            pre = [r for r in f32 if r["tokens"] >= 512]
            if pre and one["threads"] == 1:
                print(f"{name}: prefill % of single-thread sgemm peak "
                      f"({one['sgemm_peak_flops'] / 1e9:.1f} GFLOP/s): "
                      + ", ".join(f"T={r['tokens']}: {100 * r['flops'] / one['sgemm_peak_flops'] / r['compiled']['median_s']:.1f}%"
                                  for r in pre))
        bf16 = {r["tokens"]: r for r in one["rows"] if r["dtype"] == "bf16" and r["tokens"] <= 16}
        if bf16:
            print(f"{name}: bf16 decode compiled vs f32 numpy: "
                  + ", ".join(f"T={t}: {ms(r['compiled']['median_s'])} vs "
                              f"{ms(r['numpy']['median_s'])} ms ({r['compiled']['median_s'] / r['numpy']['median_s']:.2f}x)"
                              for t, r in bf16.items()))
        two = by.get((name, 2))
        if one["threads"] == 1 and two:
            pairs = [(a, b) for a in one["rows"] for b in two["rows"]
                     if a["dtype"] == b["dtype"] and a["tokens"] == b["tokens"] and a["tokens"] >= 512]
            if pairs:
                print(f"{name}: 2 threads vs 1 thread speed-up (T >= 512): "
                      + ", ".join(f"{a['dtype']} T={a['tokens']}: compiled "
                                  f"{a['compiled']['median_s'] / b['compiled']['median_s']:.2f}x, numpy "
                                  f"{a['numpy']['median_s'] / b['numpy']['median_s']:.2f}x"
                                  for a, b in pairs))
    for r in report["routing"]:
        print(f"routing T={r['tokens']} E={r['experts']}: compiled/numpy(argpartition) "
              f"{r['compiled_route']['median_s'] / r['numpy_route']['median_s']:.2f}; "
              f"dispatch compiled/numpy(argsort) "
              f"{r['compiled_dispatch']['median_s'] / r['numpy_dispatch']['median_s']:.2f}")
    for e in report["ep"]:
        one = e["one_process"]
        one_t = one["compute_s"] if one["compute_s"] is not None else one["call"]["median_s"]
        per = [r["compute_s"] if r["compute_s"] is not None else r["call"]["median_s"]
               for r in e["per_rank"]]
        share = [100 * (r["dispatch_s"] + r["combine_s"]) / r["call"]["median_s"] for r in e["per_rank"]]
        moved = [100 * r["transfer_s"] / r["call"]["median_s"] for r in e["per_rank"]]
        src = "compute_ns" if e["per_rank"][0]["compute_s"] is not None else "whole call"
        cpus = [r.get("compute_cpu_s") for r in e["per_rank"]]
        cpu_text = ""
        if all(cpus) and one.get("call_cpu_s"):
            cpu_text = (f"; CPU time: per-rank max {ms(max(cpus))} ms vs one process "
                        f"{ms(one['call_cpu_s'])} ms ({one['call_cpu_s'] / max(cpus):.2f}x)")
        flops = [r.get("expert_flops", 0) for r in e["per_rank"]]
        flop_text = ""
        if sum(flops):
            flop_text = (f"; expert FLOPs per rank {min(flops) / 1e9:.2f}..{max(flops) / 1e9:.2f} "
                         f"GFLOP, sum {sum(flops) / 1e9:.2f} = one process "
                         f"{e['one_process_flops'] / 1e9:.2f}, largest share "
                         f"{100 * max(flops) / sum(flops):.1f}% (ideal {100 / e['ranks']:.1f}%)")
        print(f"EP{e['ranks']} {e['layer']}: per-rank {src} max {ms(max(per))} ms vs one process "
              f"{ms(one_t)} ms ({one_t / max(per):.2f}x, ideal {e['ranks']}){cpu_text}{flop_text}; "
              f"dispatch+combine share {min(share):.1f}..{max(share):.1f}%, without the wait "
              f"for peers {min(moved):.1f}..{max(moved):.1f}%")
    for c in report["compile"]:
        print(f"compile {c['layer']} {c['dtype']}: {c['seconds']:.2f} s")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    parser.add_argument("--tokens", type=ints, help=f"token counts (default {FULL_TOKENS})")
    parser.add_argument("--layers", type=lambda s: s.split(","), default=list(LAYERS),
                        help=f"comma list of {list(LAYERS)}")
    parser.add_argument("--dtypes", type=lambda s: s.split(","), default=["f32", "bf16"])
    parser.add_argument("--threads", type=ints, default=[1],
                        help="thread counts, e.g. 1,2 (each side uses the same count)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure (>= 5)")
    parser.add_argument("--max-seconds", type=float, default=0.0,
                        help="time budget per figure: fewer runs when they would not fit "
                             "(0: none; --quick: 20)")
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--torch-own", action="store_true",
                        help="torch column: the HF-style loop written here, not transformers' module")
    parser.add_argument("--skip-ep", action="store_true")
    parser.add_argument("--skip-routing", action="store_true")
    parser.add_argument("--skip-layers", action="store_true")
    parser.add_argument("--no-errors", action="store_true",
                        help="skip the float64 reference (saves 4.8 GB and time for qwen3)")
    parser.add_argument("--route-tokens", type=int, default=16384)
    parser.add_argument("--route-experts", type=ints, default=[128, 512])
    parser.add_argument("--route-hidden", type=int, default=2048)
    parser.add_argument("--route-topk", type=int, default=8)
    parser.add_argument("--ep-ranks", type=ints, default=[2, 4])
    parser.add_argument("--ep-tokens", type=int, default=512, help="tokens per rank")
    parser.add_argument("--exchange-tokens", type=ints, default=[1, 8, 32],
                        help="tokens per rank of the decode exchange comparison (the most: slots)")
    parser.add_argument("--pack-tokens", type=ints, default=[32, 256],
                        help="tokens per rank of the prefill packing comparison")
    parser.add_argument("--only-ep-pack", action="store_true",
                        help="of the EP sections, only the prefill packing comparison")
    parser.add_argument("--only-ep-fp8", action="store_true",
                        help="of the EP sections, only the FP8 codes comparison")
    parser.add_argument("--decode-max-tokens", type=int, default=0,
                        help="passed to moe-compile (a decode variant)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="T in {1,16}, 3 repeats, 20 s budget per figure, routing at T=2048, "
                             "EP at 16 tokens per rank")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--work", type=Path, help="keep libraries here (default: a temp dir)")
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(*args.worker)
    if args.quick:
        args.tokens = args.tokens or QUICK_TOKENS
        if args.repeats == 5:
            args.repeats = 3
        args.max_seconds = args.max_seconds or 20.0
        if args.route_tokens == 16384:
            args.route_tokens = 2048
        if args.ep_tokens == 512:
            args.ep_tokens = 16
    args.tokens = args.tokens or FULL_TOKENS
    unknown = [n for n in args.layers if n not in LAYERS]
    if unknown:
        parser.error(f"--layers: unknown {unknown}; known: {list(LAYERS)}")

    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]))
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S')}; cpus: {os.cpu_count()}; "
          f"moe-compile: {build_dir() / 'bin' / 'moe-compile'}")
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
        print(f"cpu: {cpu}")
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.2f}"
          + ("  (WARNING: the machine is busy; figures will be noisy)"
             if load > 0.5 * (os.cpu_count() or 1) else ""))
    report = {"command": sys.argv, "load_at_start": load, "args": {k: str(v) for k, v in vars(args).items()},
              "compile": [], "layers": [], "routing": [], "ep": []}
    with tempfile.TemporaryDirectory(prefix="moe-bench-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        sections = [("layers", section_layers, args.skip_layers),
                    ("routing", section_routing, args.skip_routing),
                    ("ep", section_ep, args.skip_ep or args.only_ep_pack or args.only_ep_fp8),
                    ("ep-exchange", section_ep_exchange,
                     args.skip_ep or args.only_ep_pack or args.only_ep_fp8),
                    ("ep-pack", section_ep_pack, args.skip_ep or args.only_ep_fp8),
                    ("ep-fp8-codes", section_ep_fp8_codes, args.skip_ep or args.only_ep_pack)]
        failed = []
        for name, section, skip in sections:
            if skip:
                continue
            try:
                section(args, work, report)
            except Exception as error:  # report and go on with the other sections
                print(f"\n!! section {name} failed: {error}", flush=True)
                failed.append(name)
        print_goals(args, report)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
        print(f"\nwrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
