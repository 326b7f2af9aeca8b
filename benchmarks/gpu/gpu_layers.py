"""Checks and times moe-compile's CUDA layers on one GPU, against PyTorch.

For a machine with a GPU, PyTorch and no MLIR: the libraries come from
benchmarks/gpu/build_layers.sh (run where the compiler is) and the mgpu*
runtime (libmoert_cuda) is built there from source (run_gpu_layers.sh).

For each layer of the manifest and each token count it
- calls the library's entry on PyTorch's current stream with device
  pointers and one workspace of `<entry>_workspace_bytes(T)` bytes,
- compares the output with a float64 PyTorch reference written from the
  HuggingFace model definitions (routing, groups, SwiGLU, shared expert),
- times it with CUDA events (warm-up, then repeated runs, median and min)
  side by side with PyTorch in the layer's dtype (a per-expert loop, and
  torch._grouped_mm where it exists) and with the floors: the bytes of
  the expert weights the batch touches over the HBM bandwidth, and the
  FLOPs over the tensor-core peak,
- checks that the entry returns before the GPU finishes (no host
  synchronisation), runs on a side stream, and leaks no device memory.
Prints a table and writes a JSON file.
"""
import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

# Peak figures of the cards this runs on (dense bf16 tensor cores, HBM).
PEAKS = {
    "H100": {"hbm_bytes_per_s": 3.35e12, "bf16_flops": 989e12},
    "H200": {"hbm_bytes_per_s": 4.8e12, "bf16_flops": 989e12},
}


# ---------------------------------------------------------------- the library
def _moec_cuda():
    """python/moec/cuda.py on its own: the GPU machine has torch but not the
    rest of the moec package's dependencies."""
    path = Path(__file__).resolve().parents[2] / "python" / "moec" / "cuda.py"
    spec = importlib.util.spec_from_file_location("moec_cuda", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cuda = _moec_cuda()
Descriptor, GpuLayer, TORCH_DTYPES = _cuda.Descriptor, _cuda.GpuLayer, _cuda.TORCH_DTYPES


# ---------------------------------------------------------------- reference
def route(x, p, plan):
    """(ids [T,k], weights [T,k]) in float64, from the HF definitions:
    scores by softmax or sigmoid, DeepSeek's correction bias moving the
    choice only, group-limited choice by the sum of each group's two best
    scores, weights from the unbiased scores, normalised and scaled."""
    r = plan["routing"]
    logits = x @ p["router_weight"].double().T
    if "router_bias" in p:
        logits = logits + p["router_bias"].double()
    scores = torch.softmax(logits, -1) if r["score"] == "softmax" else torch.sigmoid(logits)
    choice = scores + p["correction_bias"].double() if "correction_bias" in p else scores
    groups = r.get("n_group", 1) or 1
    if groups > 1:
        t, e = choice.shape
        grouped = choice.view(t, groups, e // groups)
        best = 1 if r.get("group_score") == "max" else 2
        group_score = grouped.topk(best, -1).values.sum(-1)
        keep = torch.zeros(t, groups, dtype=torch.bool, device=x.device)
        keep.scatter_(1, group_score.topk(r["topk_group"], -1).indices, True)
        choice = choice.masked_fill(~keep.repeat_interleave(e // groups, 1), -math.inf)
    order = torch.sort(choice, dim=-1, descending=True, stable=True)
    ids = order.indices[:, : r["top_k"]]
    weights = scores.gather(1, ids)
    if r.get("normalize"):
        weights = weights / weights.sum(-1, keepdim=True)
    # How far the last chosen expert is ahead of the first one left out.
    route.margin = (order.values[:, r["top_k"] - 1] - order.values[:, r["top_k"]]) \
        if choice.shape[1] > r["top_k"] else torch.full_like(order.values[:, 0], math.inf)
    return ids, weights * r.get("routed_scaling_factor", 1.0)


def swiglu_mlp(rows, w13, w2, quantize=None):
    """The expert MLP; `quantize` (fp8_rows) stands for the rows each GEMM
    reads where they are quantized first."""
    quantize = quantize or (lambda r: r)
    h = quantize(rows) @ w13.T
    gate, up = h.chunk(2, -1)
    return quantize(torch.nn.functional.silu(gate) * up) @ w2.T


# Elements of a row per scale of FP8 rows (--gpu-fp8-rows).
FP8_ROW_GROUP = 128


def fp8_rows(rows, group=FP8_ROW_GROUP):
    """`rows` as the FP8 rows prefill form reads them (QuantizeGPU.cpp):
    rounded to bf16 (the GEMM's input), then per `group` of a row scale =
    amax / 448 in f32 and codes = e4m3(x / scale), times the scale."""
    x = rows.to(torch.bfloat16).float().unflatten(-1, (-1, group))
    scale = x.abs().amax(-1, keepdim=True) / 448
    codes = (x / torch.where(scale > 0, scale, 1)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return (codes.float() * scale).flatten(-2).to(rows.dtype)


def quantizes_rows(plan, tokens):
    """Whether the layer's routed GEMMs quantize their rows at `tokens`: FP8
    rows asked for (plan report) and the prefill form taken, which the host
    chooses above 64 rows per expert on average of the dispatch's padded
    rows (T k + min(E, T k) 15; GroupedMatmulGPU.cpp)."""
    if not plan.get("gpu", {}).get("prefill_gemm", {}).get("fp8_rows"):
        return False
    pairs, experts = tokens * plan["top_k"], plan["experts"]
    return pairs + min(experts, pairs) * 15 > experts * (64 + 15)


def expert_weight(p, name, expert, dtype):
    """Expert `expert` of p[name] in `dtype`: FP8 codes (a `<name>_scale`
    of block scales beside them, blocks of p["block"]) times their block's
    scale."""
    w = p[name][expert]
    if name + "_scale" not in p:
        return w.to(dtype)
    rows, depth = p["block"]
    scale = p[name + "_scale"][expert].to(dtype)
    full = scale.repeat_interleave(rows, 0)[: w.shape[0]].repeat_interleave(depth, 1)[:, : w.shape[1]]
    return w.to(dtype) * full


def reference(x, p, plan):
    """The MoE block in float64 (weights widened one expert at a time); the
    routed experts' rows quantized as the layer does (quantizes_rows)."""
    xs = x.double()
    ids, weights = route(xs, p, plan)
    margin = route.margin
    quantize = fp8_rows if quantizes_rows(plan, x.shape[0]) else None
    y = torch.zeros_like(xs)
    for expert in ids.unique().tolist():
        tok, slot = (ids == expert).nonzero(as_tuple=True)
        out = swiglu_mlp(xs[tok], expert_weight(p, "w13", expert, torch.float64),
                         expert_weight(p, "w2", expert, torch.float64), quantize)
        y.index_add_(0, tok, out * weights[tok, slot, None])
    if "shared_w13" in p:
        shared = swiglu_mlp(xs, p["shared_w13"].double(), p["shared_w2"].double())
        if "shared_gate" in p:
            shared = shared * torch.sigmoid(xs @ p["shared_gate"].double().T)
        y += shared
    return y, ids, margin


# ---------------------------------------------------------------- peers
def torch_loop(x, p, plan, ids_weights=None):
    """PyTorch in the layer's dtype: routing, then a loop over the experts
    that have tokens (what HF's eager MoE blocks do)."""
    ids, weights = ids_weights or route(x.float().double(), p, plan)
    weights = weights.to(x.dtype)
    y = torch.zeros_like(x)
    for expert in ids.unique().tolist():
        tok, slot = (ids == expert).nonzero(as_tuple=True)
        out = swiglu_mlp(x[tok], p["w13"][expert], p["w2"][expert])
        y.index_add_(0, tok, out * weights[tok, slot, None])
    if "shared_w13" in p:
        y += swiglu_mlp(x, p["shared_w13"], p["shared_w2"])
    return y


def torch_grouped(x, p, plan, transposed, ids_weights=None):
    """The experts as two torch._grouped_mm calls over expert-sorted rows."""
    ids, weights = ids_weights or route(x.float().double(), p, plan)
    k = ids.shape[1]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=plan["experts"])
    offsets = torch.cumsum(counts, 0).to(torch.int32)
    rows = x[order // k]
    h = torch._grouped_mm(rows, transposed["w13"], offs=offsets)
    gate, up = h.chunk(2, -1)
    out = torch._grouped_mm(torch.nn.functional.silu(gate) * up, transposed["w2"], offs=offsets)
    y = torch.zeros_like(x)
    y.index_add_(0, order // k, out * weights.flatten()[order, None].to(x.dtype))
    if "shared_w13" in p:
        y += swiglu_mlp(x, p["shared_w13"], p["shared_w2"])
    return y


def grouped_gemm_calls(x, p, plan, transposed, ids_weights):
    """The two torch._grouped_mm calls of torch_grouped alone, on rows
    sorted and activated beforehand: the GEMMs to hold ours against."""
    ids, _ = ids_weights
    k = ids.shape[1]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    offsets = torch.cumsum(torch.bincount(flat, minlength=plan["experts"]), 0).to(torch.int32)
    rows = x[order // k]
    gate, up = torch._grouped_mm(rows, transposed["w13"], offs=offsets).chunk(2, -1)
    act = torch.nn.functional.silu(gate) * up

    def gemms():
        torch._grouped_mm(rows, transposed["w13"], offs=offsets)
        torch._grouped_mm(act, transposed["w2"], offs=offsets)
    return gemms


# ---------------------------------------------------------------- measuring
def time_gpu(fn, runs, budget_s):
    """Median and min of CUDA-event times in ms (warm-up first); fewer runs
    (at least 3) when one run would take the budget."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    first = start.elapsed_time(end)
    runs = max(3, min(runs, int(budget_s * 1000 / max(first, 1e-3))))
    times = []
    for _ in range(runs):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times), runs


# Spread of the FP8 codes of even and of odd experts (make_inputs).
FP8_SIGMA = (100.0, 0.01)


def make_inputs(plan, tokens, generator):
    h, i = plan["hidden_size"], plan["intermediate_size"]
    p = {}
    for param in plan["entry_point"]["parameters"]:
        name, shape = param["name"], [tokens if s < 0 else s for s in param["shape"]]
        weight = name.removesuffix("_scale")
        fan_in = {"w2": i, "shared_w2": plan.get("shared_intermediate_size") or i}.get(weight, h)
        scale = 0.1 if name == "correction_bias" else 1.0 if name == "x" else fan_in ** -0.5
        if param["dtype"] == "fp8_e4m3":
            # Codes of about N(0, sigma^2), clamped to E4M3's range, drawn one
            # expert at a time: sigma 100 for even experts (every magnitude),
            # 0.01 for odd ones (mostly E4M3 subnormals, below 2^-6).
            codes = torch.empty(shape, device="cuda", dtype=torch.float8_e4m3fn)
            for e in range(shape[0]):
                codes[e] = torch.randn(shape[1:], generator=generator, device="cuda",
                                       dtype=torch.bfloat16).mul_(FP8_SIGMA[e % 2]).clamp_(-448, 448)
            p[name] = codes
        elif name != weight:
            # Block scales of FP8 weights: each block its own, 0.5-1.5 times
            # the scale that gives the weights a standard deviation of
            # fan_in^-0.5.
            p[name] = torch.rand(shape, generator=generator, device="cuda").add_(0.5).mul_(scale)
            p[name][0::2] /= FP8_SIGMA[0]
            p[name][1::2] /= FP8_SIGMA[1]
        else:
            # Drawn in the parameter's own dtype: a DeepSeek-V3 layer's experts
            # are 22 GB in bf16, and would not fit twice in f32.
            p[name] = torch.randn(shape, generator=generator, device="cuda",
                                  dtype=TORCH_DTYPES[param["dtype"]]).mul_(scale)
    if plan.get("expert_weights", {}).get("format") == "fp8_e4m3":
        p["block"] = plan["expert_weights"]["block"]
    return p


def dequantized(p, dtype):
    """p with FP8 expert weights (and their scales) replaced by `dtype`
    weights: what the PyTorch peers multiply."""
    if "w13_scale" not in p:
        return p
    out = {n: v for n, v in p.items() if not n.endswith("_scale") and n != "block"}
    for name in ("w13", "w2"):
        out[name] = torch.empty(p[name].shape, dtype=dtype, device=p[name].device)
        for e in range(p[name].shape[0]):
            out[name][e] = expert_weight(p, name, e, torch.float32)
    return out


def touched_weight_bytes(plan, ids, p):
    per_expert = p["w13"][0].numel() * p["w13"].element_size() + p["w2"][0].numel() * p["w2"].element_size()
    shared = sum(p[n].numel() * p[n].element_size() for n in ("shared_w13", "shared_w2") if n in p)
    return ids.unique().numel() * per_expert + shared + p["router_weight"].numel() * p["router_weight"].element_size()


def flops(plan, tokens, p):
    h, i = plan["hidden_size"], plan["intermediate_size"]
    routed = 2 * tokens * plan["top_k"] * 3 * h * i
    shared = 2 * tokens * 3 * h * (plan.get("shared_intermediate_size") or 0) if "shared_w13" in p else 0
    return routed + shared + 2 * tokens * h * plan["experts"]


def tokens_to_run(entry, plan, asked):
    """The token counts to check: those asked for (up to the library's
    max_tokens; each above is reported and skipped), else the manifest's."""
    if not asked:
        return list(entry["tokens"])
    limit = plan.get("gpu", {}).get("max_tokens")
    for t in asked:
        if limit is not None and t > limit:
            print(f"# {entry['name']}: T={t} skipped, the library takes at most {limit} tokens",
                  flush=True)
    return [t for t in asked if limit is None or t <= limit]


def check_layer(entry, root, args, peaks, results):
    plan = json.loads((root / entry["plan"]).read_text())
    layer = GpuLayer(root / entry["library"], plan)
    dtype = TORCH_DTYPES[plan["element_type"]]
    generator = torch.Generator(device="cuda").manual_seed(0)
    tokens_list = tokens_to_run(entry, plan, args.tokens)
    for tokens in tokens_list:
        row = {"layer": entry["name"], "tokens": tokens, "dtype": plan["element_type"]}
        if "prefill_gemm" in plan.get("gpu", {}):  # the GEMM shape the library was built with
            row["prefill_gemm"] = plan["gpu"]["prefill_gemm"]
        results.append(row)
        try:
            p = make_inputs(plan, tokens, generator)
            inputs = [p[param["name"]] for param in plan["entry_point"]["parameters"]]
            out = torch.full((tokens, plan["hidden_size"]), float("nan"), dtype=dtype, device="cuda")
            row["workspace_bytes"] = layer.workspace_bytes(tokens)
            gpu = plan.get("gpu", {})
            if gpu.get("max_tokens") == tokens:  # the plan report's figure is the library's
                row["plan_workspace_equal"] = gpu["workspace_bytes_at_max_tokens"] == row["workspace_bytes"]
            workspace = torch.empty(max(row["workspace_bytes"], 1), dtype=torch.uint8, device="cuda")
            keep, call_args = layer.prepare(inputs, out, workspace)
            torch.cuda.synchronize()
            layer.call(call_args)
            torch.cuda.synchronize()
            ref, ids, margin = reference(p["x"], p, plan)
            scale = ref.abs().max().item() or 1.0
            # A token whose k-th and (k+1)-th experts score within 1e-5 of
            # each other may choose either in f32 (the logits' sums run in
            # another order than the float64 reference's): such near-ties
            # are counted and their error reported apart.
            errors = (out.double() - ref).abs().amax(-1) / scale
            tie = margin < 1e-5
            row["near_tie_tokens"] = int(tie.sum())
            row["near_tie_max_error_rel"] = errors[tie].max().item() if tie.any() else 0.0
            row["max_abs_error_rel"] = errors[~tie].max().item() if (~tie).any() else 0.0
            row["empty_experts"] = plan["experts"] - ids.unique().numel()
            row["ok"] = bool(math.isfinite(row["max_abs_error_rel"]) and
                             row["max_abs_error_rel"] <= args.tolerance[plan["element_type"]] and
                             row.get("plan_workspace_equal", True))
            # The same call on a side stream, ordered after its inputs' writes.
            side = torch.cuda.Stream()
            out2 = torch.full_like(out, float("nan"))
            keep2, call_args2 = layer.prepare(inputs, out2, workspace)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                layer.call(call_args2, side)
            side.synchronize()
            row["side_stream_equal"] = bool(torch.equal(out2, out))
            if args.check_only:
                continue
            if args.profile:
                print_kernel_profile(layer, call_args, row)
            # No host synchronisation: the call returns while the GPU works.
            torch.cuda.synchronize()
            torch.cuda._sleep(50_000_000)  # keeps the GPU busy ~20-50 ms
            t0 = time.perf_counter()
            layer.call(call_args)
            row["host_call_ms"] = (time.perf_counter() - t0) * 1e3
            torch.cuda.synchronize()
            free_before = torch.cuda.mem_get_info()[0]
            ours = time_gpu(lambda: layer.call(call_args), args.runs, args.budget_s)
            row["ours_ms"], row["ours_min_ms"], row["runs"] = ours
            row["leaked_bytes"] = free_before - torch.cuda.mem_get_info()[0]
            routing = route(p["x"].float().double(), p, plan)
            touched = touched_weight_bytes(plan, ids, p)
            # FP8 weights: the peers multiply the bf16 weights they stand for.
            p = dequantized(p, dtype)
            row["torch_loop_ms"] = time_gpu(lambda: torch_loop(p["x"], p, plan, routing),
                                            args.runs, args.budget_s)[0]
            if hasattr(torch, "_grouped_mm") and dtype == torch.bfloat16:
                # [E, K, N] views of the [E, N, K] weights (K contiguous).
                transposed = {n: p[n].transpose(1, 2) for n in ("w13", "w2")}
                try:
                    row["torch_grouped_ms"] = time_gpu(
                        lambda: torch_grouped(p["x"], p, plan, transposed, routing),
                        args.runs, args.budget_s)[0]
                except RuntimeError as e:  # shapes the kernel does not take
                    row["torch_grouped_error"] = str(e).splitlines()[0][:120]
                if args.profile and "torch_grouped_ms" in row:
                    # Its two GEMMs alone, for ours in the profile (kernel_ms).
                    try:
                        gemms = grouped_gemm_calls(p["x"], p, plan, transposed, routing)
                        row["torch_grouped_gemms_ms"] = time_gpu(gemms, args.runs,
                                                                 args.budget_s)[0]
                        print(f"  torch._grouped_mm GEMMs alone: "
                              f"{row['torch_grouped_gemms_ms']:.3f} ms", flush=True)
                    except RuntimeError as e:
                        row["torch_grouped_gemms_error"] = str(e).splitlines()[0][:120]
            row["hbm_floor_ms"] = touched / peaks["hbm_bytes_per_s"] * 1e3
            row["compute_floor_ms"] = flops(plan, tokens, p) / peaks["bf16_flops"] * 1e3
            row["hbm_floor_share"] = row["hbm_floor_ms"] / row["ours_ms"]
            # Last: a failed capture should not disturb the figures above.
            time_graph_replay(layer, call_args, out, args, row)
        except Exception as e:  # report and go on: one device session
            row["ok"] = False
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        finally:
            print(format_row(row), flush=True)
            p = inputs = out = workspace = keep = call_args = None
            torch.cuda.empty_cache()


def time_graph_replay(layer, call_args, out, args, row):
    """The call captured in a CUDA graph and replayed, as serving engines run
    decode: the kernels without the host's launch gaps. The entry can be
    captured because it neither synchronises, allocates nor creates a
    stream; the replay must give the call's output bit for bit."""
    try:
        expected = out.clone()
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, capture_error_mode="relaxed"):
            layer.call(call_args)  # on the capture stream (the current one here)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        row["graph_equal"] = bool(torch.equal(out, expected))
        row["ours_graph_ms"], row["ours_graph_min_ms"], _ = time_gpu(graph.replay, args.runs,
                                                                      args.budget_s)
        if not row["graph_equal"]:
            row["ok"] = False
    except Exception as e:  # the capture is a measurement: report it and go on
        row["graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


def print_kernel_profile(layer, call_args, row):
    """Each kernel of one call, in launch order: grid, block and time (CUPTI,
    through torch.profiler; the kernels all carry the entry's name)."""
    from torch.profiler import ProfilerActivity, profile
    layer.call(call_args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        layer.call(call_args)
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    total = sum(e.device_time for e in kernels)
    row["kernel_ms"] = [e.device_time / 1e3 for e in kernels]
    print(f"  profile {row['layer']} T={row['tokens']}: {len(kernels)} kernels, {total / 1e3:.3f} ms")
    for i, e in enumerate(kernels):
        print(f"  {i:3d} {e.device_time / 1e3:9.4f} ms {e.device_time / max(total, 1e-9) * 100:5.1f}% {e.name[:40]}")


def format_row(row):
    def f(key, fmt="{:.3f}"):
        v = row.get(key)
        return fmt.format(v) if isinstance(v, (int, float)) else "-"
    if "error" in row:
        return f"{row['layer']:<20} T={row['tokens']:<5} ERROR {row['error']}"
    return (f"{row['layer']:<20} T={row['tokens']:<5} ok={row.get('ok')!s:<5} "
            f"err={f('max_abs_error_rel', '{:.2e}')} ties={row.get('near_tie_tokens', '-')} side={row.get('side_stream_equal')!s:<5} "
            f"ours={f('ours_ms')} ms (min {f('ours_min_ms')}) graph={f('ours_graph_ms')} "
            f"torch-loop={f('torch_loop_ms')} "
            f"grouped_mm={f('torch_grouped_ms')} hbm-floor={f('hbm_floor_ms', '{:.4f}')} "
            f"compute-floor={f('compute_floor_ms', '{:.4f}')} floor-share={f('hbm_floor_share', '{:.4f}')} "
            f"host-call={f('host_call_ms')} ms leak={row.get('leaked_bytes', '-')} "
            f"ws={row.get('workspace_bytes', '-')} empty-experts={row.get('empty_experts', '-')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=Path, default=Path("benchmarks/gpu/layers"),
                        help="directory with manifest.json (build_layers.sh)")
    parser.add_argument("--only", default="", help="comma-separated layer names")
    parser.add_argument("--tokens", default="",
                        help="comma-separated token counts, up to a library's max_tokens "
                             "(default: the manifest's)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=2.0, help="timing budget per measurement")
    parser.add_argument("--check-only", action="store_true", help="correctness only, no timing")
    parser.add_argument("--profile", action="store_true", help="print each kernel's time (one call)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--in-process", action="store_true", help="all layers in this process")
    args = parser.parse_args()
    args.tokens = [int(t) for t in args.tokens.split(",") if t]
    args.tolerance = {"f32": 1e-4, "bf16": 2e-2}
    name = torch.cuda.get_device_name()
    peaks = next((v for k, v in PEAKS.items() if k in name), PEAKS["H100"])
    if not args.only or "," in args.only:
        print(f"# {name}, torch {torch.__version__}, peaks {peaks}", flush=True)
    manifest = json.loads((args.layers / "manifest.json").read_text())
    only = set(filter(None, args.only.split(",")))
    results = []
    # Expert-parallel layers run under mpirun (gpu_ep.py).
    entries = [e for e in manifest["layers"]
               if e.get("ep", 1) == 1 and (not only or e["name"] in only)]
    if len(entries) == 1 or args.in_process:
        for entry in entries:
            check_layer(entry, args.layers, args, peaks, results)
    else:
        # One process per layer: a failure inside compiled code ends the
        # process (it has no error path), and the other layers still run.
        for entry in entries:
            rows = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu_layers.{entry['name']}.json"
            rows.unlink(missing_ok=True)
            command = [sys.executable, __file__, "--layers", str(args.layers), "--only", entry["name"],
                       "--runs", str(args.runs), "--budget-s", str(args.budget_s), "--json", str(rows)]
            command += ["--tokens", ",".join(map(str, args.tokens))] if args.tokens else []
            command += ["--check-only"] if args.check_only else []
            command += ["--profile"] if args.profile else []
            code = subprocess.run(command).returncode
            if rows.exists():
                results += json.loads(rows.read_text())["rows"]
            else:
                results.append({"layer": entry["name"], "ok": False,
                                "error": f"the process ended with code {code} (see above)"})
    if args.json:
        args.json.write_text(json.dumps({"device": name, "torch": torch.__version__,
                                         "date": time.strftime("%Y-%m-%d"), "rows": results}, indent=1))
    bad = [r for r in results if not r.get("ok")]
    print(f"# {len(results) - len(bad)} of {len(results)} correct", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
