#!/usr/bin/env python3
"""Runs the GPU tensor-core GEMM kernels' IR on the CPU against float64 references.

Each case lowers a small function with `moe-opt --convert-moe-to-gpu` and
interprets the whole of it with kernel_emulator.py (`run_function`): the
host code, every kernel, blocks in lockstep with the race detector, uniform
barriers and whole-warp `nvvm.mma.sync` checked, reads of unwritten memory
refused. `nvvm.mma.sync` is m16n8k16 row.col bf16 x bf16 + f32 in the PTX
ISA's fragment layout; `nvgpu.ldmatrix` and cp.async (`device_async_copy`,
landing at the `device_async_wait` that completes its group) as the PTX ISA
describes them, so the prefill form runs too.

Route cases (`moe.route`, x [T, H] and the router weight [E, H] bf16): the
router GEMM's decode form splits its depth among blocks along z and writes
partial sums that the route kernel adds up to T = 64; above, the prefill form
writes the logits. Reference: logits = x @ w.T in float64, then the routing
of route_warp_emulation.reference (HF semantics). Ids must match except on
near ties (a margin of the selection scores below NEAR), weights within
WEIGHT_TOL relative; ids and weights written once each.

GEMM cases (`moe.dispatch` + `moe.grouped_matmul` [+ `moe.activation kind
swiglu`]): rows dispatched as dispatch_emulation.reference lays them out,
then per row of expert e out = rows @ W[e].T in float64
rounded to bf16, rows of no expert 0 (MoEOps.td); swiglu = silu(gate) * up
of those bf16 values. The forms that ran are told by the ops executed (mma.sync
without ldmatrix: decode; ldmatrix: prefill), and must be the one expected. Dynamic rows: the host picks the decode form up to
E * (64 + 15) rows, every row is compared. Static worst-case rows: both forms
launch, each kernel leaving at once unless offsets[E] says it is its form;
rows past offsets[E] are not written (not compared). Tolerance: |got - want|
<= want * 2^-7 + 1e-3 * max|want| (bf16 rounding of an f32 sum).

  python3 test/Integration/GPU/gemm_decode_emulation.py [--build DIR] [--seed N]
      [--only CASE ...] [--mutations]

--mutations perturbs the lowered IR (in memory) in ways its case must catch:
mma operands swapped, a depth bound off, a guard's predicate changed, a
barrier dropped, ...; exits 1 if one goes unnoticed.
"""
import argparse
import collections
import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(HERE))
import dispatch_emulation as dispatch  # noqa: E402
import kernel_emulator as emulator  # noqa: E402
from mutations import run_mutations  # noqa: E402
import route_warp_emulation as routing  # noqa: E402

BF16 = emulator.BF16
NEAR = 1e-4  # selection-score margins below this are near ties (ids may differ)
WEIGHT_TOL = 1e-4  # routing weights, relative


class RouteCase(NamedTuple):
    name: str
    experts: int
    hidden: int
    routing: dict
    tokens: int
    form: str  # the router GEMM's form the host must pick: decode (split depth) or prefill


SOFTMAX2 = dict(score="softmax", top_k=2, normalize=True)
DSV3 = dict(score="sigmoid", top_k=8, n_group=8, topk_group=4, normalize=True, scale=2.5,
            correction_bias=True)
QWEN3 = dict(score="softmax", top_k=8, normalize=True)

ROUTE_CASES = [
    RouteCase("route_e64_h1024_t1", 64, 1024, SOFTMAX2, 1, "decode"),
    RouteCase("route_e64_h1024_t17", 64, 1024, SOFTMAX2, 17, "decode"),
    RouteCase("route_e64_h1024_t64", 64, 1024, SOFTMAX2, 64, "decode"),
    RouteCase("route_e64_h1024_t65", 64, 1024, SOFTMAX2, 65, "prefill"),
    RouteCase("route_dsv3_e256_h2048_t9", 256, 2048, DSV3, 9, "decode"),
    RouteCase("route_dsv3_e256_h2048_t64", 256, 2048, DSV3, 64, "decode"),
    RouteCase("route_qwen3_e128_h2048_t5", 128, 2048, QWEN3, 5, "decode"),
    RouteCase("route_dsv3_e256_h2048_t80", 256, 2048, DSV3, 80, "prefill"),
]


class GemmCase(NamedTuple):
    name: str
    function: str  # grouped (dynamic rows), static (worst-case rows), + _swiglu
    experts: int
    n: int  # the GEMM's output columns (2 I with swiglu)
    hidden: int  # K
    tokens: int
    k: int
    pattern: str  # expert ids: dispatch_emulation.expert_ids, or "counts:c0,c1,..." (static)
    form: str  # decode or prefill


GEMM_CASES = [
    GemmCase("grouped_e8_t1", "grouped", 8, 64, 128, 1, 2, "distinct", "decode"),
    GemmCase("grouped_e8_t7", "grouped", 8, 64, 128, 7, 2, "distinct", "decode"),
    GemmCase("grouped_e8_t40_foreign", "grouped", 8, 64, 128, 40, 2, "foreign", "decode"),
    GemmCase("grouped_e4_k256_t21", "grouped", 4, 64, 256, 21, 2, "skewed", "decode"),
    GemmCase("grouped_e8_swiglu_t9", "grouped_swiglu", 8, 128, 128, 9, 2, "distinct", "decode"),
    GemmCase("grouped_e8_t400_prefill", "grouped", 8, 64, 128, 400, 2, "distinct", "prefill"),
    # Static rows (T * k + min(E, T * k) * 15): decode up to E * (64 + 15) used rows.
    GemmCase("static_e2_used64", "static", 2, 64, 128, 80, 2, "counts:20,17", "decode"),
    GemmCase("static_e2_used144", "static", 2, 64, 128, 80, 2, "counts:64,79", "decode"),
    GemmCase("static_e2_swiglu_used112", "static_swiglu", 2, 64, 128, 80, 2, "counts:40,50",
             "decode"),
    # used = E * (64 + 15) = 1264 exactly: the last decode case.
    GemmCase("static_e16_used1264", "static", 16, 64, 128, 640, 2, "counts:" + ",".join(
        ["80"] * 15 + ["64"]), "decode"),
    GemmCase("static_e2_used160_prefill", "static", 2, 64, 128, 80, 2, "counts:80,80", "prefill"),
    GemmCase("static_e2_swiglu_prefill", "static_swiglu", 2, 64, 128, 80, 2, "counts:80,80",
             "prefill"),
]


def lower(source, build):
    return subprocess.run([str(build / "bin" / "moe-opt"), "--convert-moe-to-gpu"], input=source,
                          capture_output=True, text=True, check=True).stdout


def gemm_source(case):
    """dispatch + grouped_matmul [+ swiglu] over dynamic or static rows."""
    e, n, h, tile = case.experts, case.n, case.hidden, 16
    static = case.function.startswith("static")
    tokens = str(case.tokens) if static else "?"
    rows = (str(case.tokens * case.k + min(e, case.tokens * case.k) * (tile - 1)) if static
            else "?")
    x, ids = f"tensor<{tokens}x{h}xbf16>", f"tensor<{tokens}x{case.k}xi32>"
    w = f"tensor<{e}x{n}x{h}xbf16>"
    out = f"tensor<{rows}x{n}xbf16>"
    result = f"tensor<{rows}x{n // 2}xbf16>" if case.function.endswith("swiglu") else out
    lines = [f"func.func @gemm(%x: {x}, %ids: {ids}, %w: {w}) -> {result} {{",
             f"  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = {e} "
             f"row_tile = {tile}",
             f"    : ({x}, {ids}) -> (tensor<{rows}x{h}xbf16>, tensor<{rows}xi32>, {ids}, "
             f"tensor<{e + 1}xi32>)",
             f"  %h = moe.grouped_matmul %rows, %w, %re offsets %off",
             f"    : (tensor<{rows}x{h}xbf16>, {w}, tensor<{rows}xi32>, tensor<{e + 1}xi32>) "
             f"-> {out}"]
    if case.function.endswith("swiglu"):
        lines += [f"  %a = moe.activation %h kind swiglu : ({out}) -> {result}",
                  f"  return %a : {result}"]
    else:
        lines.append(f"  return %h : {out}")
    return "\n".join(lines + ["}", ""])


@contextlib.contextmanager
def counting_ops():
    """Counts the ops kernels execute, per (launch number, op name); an op run by a
    chunk of blocks counts once."""
    executed, run = collections.Counter(), emulator.Threads.exec

    def counted(self, op, mask):
        if self.geometry is not None:
            executed[len(self.parent.launches), op.name] += 1
        return run(self, op, mask)
    emulator.Threads.exec = counted
    try:
        yield executed
    finally:
        emulator.Threads.exec = run


def forms_run(executed):
    """The GEMM forms whose tensor cores ran, in launch order: prefill where the
    launch's mma.sync operands came by ldmatrix, decode where not."""
    launches = sorted({n for (n, name), count in executed.items()
                       if name == "nvvm.mma.sync" and count})
    return ["prefill" if executed[n, "nvgpu.ldmatrix"] else "decode" for n in launches]


def route_source(case):
    return routing.route_source(case.experts, dict(case.routing, hidden=case.hidden))


class Lowered:
    """The lowered IR per source text, made once."""

    def __init__(self, build):
        self.build, self.texts = build, {}

    def __call__(self, source):
        if source not in self.texts:
            self.texts[source] = lower(source, self.build)
        return self.texts[source]


def case_rng(name, seed):
    names = [c.name for c in ROUTE_CASES + GEMM_CASES]
    return np.random.default_rng([seed, names.index(name)])


# --- Route ----------------------------------------------------------------------------

def route_reference(r, logits, bias):
    """routing.reference with near ties below NEAR."""
    saved, routing.TOL = routing.TOL, NEAR
    try:
        return routing.reference(r, logits, bias, None)
    finally:
        routing.TOL = saved


def written_once(buffer, name):
    problems = []
    if buffer.init is not None and not buffer.init.all():
        problems.append(f"{name}: {int((~buffer.init).sum())} elements never written")
    if buffer.writes is not None and (buffer.writes != 1).any():
        problems.append(f"{name}: elements written {sorted(set(buffer.writes.ravel()))} times")
    return problems


def router_form(host):
    """The router GEMM's form that ran: decode (blocks of 256 threads, its depth split
    among blocks along z when the depth allows) or prefill (blocks of 128)."""
    grid, block = host.launches[0]
    if block == [256, 1, 1]:
        return "decode" if grid[2] == 1 else f"decode split {grid[2]}"
    return "prefill"


def run_route(case, text, rng):
    """(problems, summary) of one route case."""
    r, e, h = case.routing, case.experts, case.hidden
    x = rng.standard_normal((case.tokens, h)).astype(BF16)
    w = (rng.standard_normal((e, h)) / np.sqrt(h) * 2.0).astype(BF16)
    args = [x, w]
    bias = None
    if r.get("correction_bias"):
        bias = rng.uniform(-0.1, 0.1, e).astype(np.float32)
        args.append(bias)
    logits = x.astype(np.float64) @ w.astype(np.float64).T
    ref_ids, ref_w, near, _ = route_reference(r, logits, bias)
    try:
        with counting_ops() as executed:
            host = emulator.run_function(text, "route", *args)
    except (emulator.KernelError, NotImplementedError, IndexError, KeyError, TypeError,
            ValueError) as error:
        return [f"{type(error).__name__}: {str(error)[:400]}"], ""
    ids, weights = host.results
    problems = written_once(ids, "ids") + written_once(weights, "weights")
    form = router_form(host)
    if form.split(" ")[0] != case.form or forms_run(executed) != [case.form]:
        problems.append(f"the router GEMM took the {form} form ({forms_run(executed)} ran), "
                        f"expected {case.form}")
    got_ids, got_w = ids.array, weights.array.astype(np.float64)
    bad_ids = (got_ids != ref_ids).any(axis=1)
    tolerated = bad_ids & near
    for t in np.flatnonzero(bad_ids & ~near)[:3]:
        problems.append(f"token {t}: ids {got_ids[t].tolist()}, expected {ref_ids[t].tolist()}")
    same = ~bad_ids
    err = np.abs(got_w - ref_w) / np.maximum(np.abs(ref_w), 1e-30)
    max_err = float(err[same].max()) if same.any() else 0.0
    for t in np.flatnonzero(same & (err > WEIGHT_TOL).any(axis=1))[:3]:
        problems.append(f"token {t}: weights {got_w[t].tolist()}, expected {ref_w[t].tolist()}")
    summary = (f"{form:15s} {len(host.launches)} kernels, {int(tolerated.sum())} near ties, "
               f"max weight rel err {max_err:.1e}")
    return problems, summary


# --- Grouped GEMM ----------------------------------------------------------------------

def gemm_ids(case, rng):
    """[T, k] expert ids: a dispatch_emulation pattern, or "counts:..." (that many choices
    per expert in random positions, the rest -1)."""
    if not case.pattern.startswith("counts:"):
        return dispatch.expert_ids(rng, case.pattern, case.tokens, case.k, case.experts)
    counts = [int(c) for c in case.pattern.split(":")[1].split(",")]
    flat = np.full(case.tokens * case.k, -1, np.int32)
    chosen = np.repeat(np.arange(case.experts, dtype=np.int32), counts)
    if len(chosen) > flat.size:
        raise ValueError(f"{case.name}: {len(chosen)} choices, {flat.size} places")
    flat[rng.permutation(flat.size)[:len(chosen)]] = chosen
    return flat.reshape(case.tokens, case.k)


def gemm_reference(case, x, ids, w):
    """(dispatch reference, out [rows, n or n/2] as float64 of bf16 values, rows used)."""
    layout = dispatch.reference(x, ids, case.experts, 16)
    rows = layout["dispatched"].astype(np.float64)
    expert = layout["row_expert"]
    out = np.zeros((len(rows), case.n))
    for e in range(case.experts):
        mine = expert == e
        out[mine] = rows[mine] @ w[e].astype(np.float64).T
    out = out.astype(np.float32).astype(BF16).astype(np.float64)
    if case.function.endswith("swiglu"):  # silu(gate) * up of the bf16 GEMM output
        gate, up = out[:, :case.n // 2], out[:, case.n // 2:]
        out = (gate / (1.0 + np.exp(-gate)) * up).astype(np.float32).astype(BF16)
        out = out.astype(np.float64)
    return layout, out, int(layout["expert_offsets"][-1])


def run_gemm(case, text, rng):
    x = rng.standard_normal((case.tokens, case.hidden)).astype(BF16)
    ids = gemm_ids(case, rng)
    w = (rng.standard_normal((case.experts, case.n, case.hidden)) / np.sqrt(case.hidden)
         ).astype(BF16)
    layout, want, used = gemm_reference(case, x, ids, w)
    rows = len(layout["row_expert"])
    limit = case.experts * (64 + 15)
    form = "decode" if (used if case.function.startswith("static") else rows) <= limit else (
        "prefill")
    problems = [] if form == case.form else [f"the case takes the {form} form, "
                                             f"meant {case.form}"]
    try:
        with counting_ops() as executed:
            host = emulator.run_function(text, "gemm", x, ids, w)
    except (emulator.KernelError, NotImplementedError, IndexError, KeyError, TypeError,
            ValueError) as error:
        return problems + [f"{type(error).__name__}: {str(error)[:400]}"], ""
    ran = forms_run(executed)
    if ran != [case.form] * bool(used):
        problems.append(f"GEMM forms run: {ran}, expected {[case.form] * bool(used)}")
    out = host.results[0]
    compared = used if case.function.startswith("static") else rows
    if out.shape != want.shape:
        return problems + [f"result shape {out.shape}, expected {want.shape}"], ""
    if out.init is not None and not out.init[:compared].all():
        where = np.argwhere(~out.init[:compared])
        problems.append(f"{len(where)} elements of the rows compared never written, first "
                        f"at {where[0].tolist()}")
    if out.writes is not None and (out.writes[:compared] > 1).any():
        problems.append(f"elements written {sorted(set(out.writes[:compared].ravel()))} times")
    got = out.array[:compared].astype(np.float64)
    ref = want[:compared]
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    err = np.abs(got - ref)
    bad = ~(err <= np.abs(ref) * 2.0**-7 + 1e-3 * scale)  # NaN (poison) is bad
    if bad.any():
        r, c = np.argwhere(bad)[0]
        problems.append(f"{int(bad.sum())} outputs differ, first [{r}, {c}] (row expert "
                        f"{layout['row_expert'][r]}): {got[r, c]}, expected {ref[r, c]}")
    max_rel = float(err.max() / scale) if scale and err.size else 0.0
    padding = int(((layout["row_expert"][:used]) < 0).sum())
    summary = (f"{'+'.join(ran) or 'no mma':7s} rows {rows:4d} used {used:4d} (padding {padding:3d}) "
               f"{len(host.launches)} kernels, max err {max_rel:.1e} of max|out| {scale:.2f}")
    return problems, summary


# --- Running ---------------------------------------------------------------------------

def source_of(case):
    return route_source(case) if isinstance(case, RouteCase) else gemm_source(case)


def run_case(case, text, seed):
    rng = case_rng(case.name, seed)
    with np.errstate(all="ignore"):
        return (run_route if isinstance(case, RouteCase) else run_gemm)(case, text, rng)


def check(case, lowered, seed):
    start = time.perf_counter()
    problems, summary = run_case(case, lowered(source_of(case)), seed)
    seconds = time.perf_counter() - start
    print(f"{case.name:28s} {summary}: {'ok' if not problems else 'FAIL'} {seconds:.2f} s")
    for line in problems[:6]:
        print("    " + line)
    return not problems


# --- Mutations ---------------------------------------------------------------------------

def launch_of(lines, n):
    """(first, last) line numbers of the n-th gpu.launch in text order."""
    return dispatch.launch_lines(lines, n)


def nth_launch_with(lines, pattern):
    """The number of the first launch whose body has a line matching `pattern`."""
    starts = [i for i, line in enumerate(lines) if "gpu.launch " in line]
    for n in range(len(starts)):
        first, last = launch_of(lines, n)
        if any(re.search(pattern, lines[i]) for i in range(first, last)):
            return n
    raise LookupError(f"no launch with {pattern!r}")


def in_launch(pattern, old, new, where=r"nvvm\.mma\.sync", nth=0):
    """Substitutes old -> new (regex, once) in the nth line matching `pattern` of the
    first launch with a line matching `where`."""
    def mutate(lines):
        n = nth_launch_with(lines, where)
        dispatch.substitute(n, pattern, old, new, nth)(lines)
    return mutate


def drop_in_launch(pattern, where=r"nvvm\.mma\.sync", nth=0):
    def mutate(lines):
        dispatch.drop(nth_launch_with(lines, where), pattern, nth)(lines)
    return mutate


def swap_operands(group, i, j, where=r"nvvm\.mma\.sync", nth=0):
    """Swaps operands i and j of group A, B or C of the nth mma.sync of a launch."""
    def mutate(lines):
        n = nth_launch_with(lines, where)
        k = dispatch.find(lines, n, r"nvvm\.mma\.sync", nth)
        m = re.search(rf"{group}\[([^\]]*)\]", lines[k])
        names = m.group(1).split(", ")
        names[i], names[j] = names[j], names[i]
        lines[k] = lines[k][:m.start(1)] + ", ".join(names) + lines[k][m.end(1):]
    return mutate


def split_end_is_begin(lines):
    """The decode router GEMM's depth loop ends at split * D, not (split + 1) * D."""
    n = nth_launch_with(lines, r"nvvm\.mma\.sync")
    first, last = launch_of(lines, n)
    split = re.findall(r"%[\w-]+", lines[first].split("blocks(")[1].split(")")[0])[2]
    k = dispatch.find(lines, n, rf"= arith\.addi {split}, %c1")
    nxt = lines[k].split(" = ")[0].strip()
    e = dispatch.find(lines, n, rf"= arith\.muli {nxt}, ")
    lines[e] = lines[e].replace(f"arith.muli {nxt},", f"arith.muli {split},")


def loop_start_off(lines):
    """The decode router GEMM's depth loop starts 8 elements late (one lane's 16 bytes)."""
    n = nth_launch_with(lines, r"nvvm\.mma\.sync")
    k = dispatch.find(lines, n, r"scf\.for ")
    start = re.search(r"scf\.for %[\w-]+ = (%[\w-]+) to", lines[k]).group(1)
    lines.insert(k, f"{start}_late = arith.addi {start}, {start}_eight : index")
    lines.insert(k, f"{start}_eight = arith.constant 8 : index")
    lines[k + 2] = lines[k + 2].replace(f"= {start} to", f"= {start}_late to", 1)


def route_sums_three(lines):
    """The route kernel adds 3 of the 4 depth partials (the last one read becomes 0)."""
    name = next(re.match(r"\s*(%\w+) = ", line).group(1) for line in lines
                if re.search(r"= memref\.alloc\(\) : memref<\d+x64x\d+xf32>", line))
    n = len([line for line in lines if "gpu.launch " in line]) - 1  # the route kernel
    k = dispatch.find(lines, n, rf"= memref\.load {name}\[%c3")
    s = dispatch.find(lines, n, r"= arith\.addf ", after=re.escape(lines[k].strip()))
    total, parts = re.match(r"\s*(%\w+) = arith\.addf (%\w+), %\w+", lines[s]).groups()
    lines[s] = f"{total} = arith.addf {parts}, {parts}_zero : f32"
    lines.insert(s, f"{parts}_zero = arith.constant 0.000000e+00 : f32")


def host_threshold(old, new):
    """The host's `arith.cmpi ule, %dim, %c64` choice of the router form."""
    def mutate(lines):
        k = next(i for i, line in enumerate(lines)
                 if re.search(r"= arith\.cmpi ule, %dim, %c64 : index", line))
        lines[k] = lines[k].replace(old, new, 1)
    return mutate


def static_guard(lines):
    """The decode form's `offsets[E] <= limit` becomes `<`, in its GEMM kernel."""
    n = nth_launch_with(lines, r"nvvm\.mma\.sync")
    dispatch.substitute(n, r"arith\.cmpi ule, %\w+, %c\d+(_\d+)? : index", "cmpi ule",
                        "cmpi ult")(lines)


def padding_not_zeroed(lines):
    """Padding rows keep the product of the row the kernel reads for them (every
    `select(row_expert < 0, 0, sum)` of the decode kernel)."""
    first, last = launch_of(lines, nth_launch_with(lines, r"nvvm\.mma\.sync"))
    for k in range(first, last):
        lines[k] = re.sub(r"arith\.select (%\w+), %cst, (%\w+) : f32",
                          r"arith.select \1, \2, \2 : f32", lines[k])


def depth_bound(lines):
    """The decode GEMM's depth loop bound K becomes K minus one warp's slice (a
    quarter of the loop's step: 4 warps take turns)."""
    n = nth_launch_with(lines, r"nvvm\.mma\.sync")
    k = dispatch.find(lines, n, r"scf\.for ")
    bound, step = re.search(r" to (%[\w-]+) step (%[\w-]+)", lines[k]).groups()
    value = {}
    for name in (bound, step):
        c = dispatch.find(lines, n, rf"{re.escape(name)} = arith\.constant \d+ : index")
        value[name] = (c, int(re.search(r"constant (\d+)", lines[c]).group(1)))
    c, k_depth = value[bound]
    lines[c] = lines[c].replace(f"constant {k_depth}", f"constant {k_depth - value[step][1] // 4}")


def silu_sign(lines):
    """swiglu with silu(-gate): the first negf dropped (its uses take its operand)."""
    k = next(i for i, line in enumerate(lines) if "arith.negf" in line)
    result, operand = re.match(r"\s*(%\w+) = arith\.negf (%\w+)", lines[k]).groups()
    del lines[k]
    lines[k] = re.sub(rf"{result}\b", operand, lines[k])


def wait_one_more(lines):
    """The prefill form's in-loop cp.async wait leaves 2 groups pending, not 1."""
    n = nth_launch_with(lines, r"nvgpu\.ldmatrix")
    dispatch.substitute(n, r"nvgpu\.device_async_wait .*numGroups = 1", "numGroups = 1",
                        "numGroups = 2")(lines)


# (label, case, mutation)
MUTATIONS = [
    ("router decode: mma A operands a0, a1 swapped (rows g, g + 8)", "route_e64_h1024_t17",
     swap_operands("A", 0, 1)),
    ("router decode: mma B operands b0, b1 swapped", "route_e64_h1024_t17",
     swap_operands("B", 0, 1)),
    ("router decode: depth split's end = split * D (no depth)", "route_e64_h1024_t17",
     split_end_is_begin),
    ("router decode: depth loop starts 8 late", "route_dsv3_e256_h2048_t9", loop_start_off),
    ("router decode: no barrier before the warps' partials are added", "route_e64_h1024_t17",
     drop_in_launch(r"gpu\.barrier$")),
    ("host: router decode form for T < 64 only (ule -> ult)", "route_e64_h1024_t64",
     host_threshold("cmpi ule", "cmpi ult")),
    ("route kernel: adds 3 of the 4 depth partials", "route_e64_h1024_t17", route_sums_three),
    ("grouped decode: 2nd k16 step's mma C operands c0, c2 swapped", "grouped_e8_t7",
     swap_operands("C", 0, 2, nth=4)),
    ("grouped decode: mma A operands a1, a2 swapped", "grouped_e4_k256_t21",
     swap_operands("A", 1, 2)),
    ("grouped decode: depth bound K minus one warp's slice", "grouped_e4_k256_t21",
     depth_bound),
    ("grouped decode: padding rows not zeroed", "grouped_e8_t40_foreign", padding_not_zeroed),
    ("grouped decode: no barrier before the partials meet", "grouped_e8_t7",
     drop_in_launch(r"gpu\.barrier$")),
    ("static decode: offsets[E] <= limit becomes < (ule -> ult)", "static_e16_used1264",
     static_guard),
    ("static prefill: offsets[E] > limit becomes >= (ugt -> uge)", "static_e16_used1264",
     in_launch(r"arith\.cmpi ugt, %\w+, %c\d+", "cmpi ugt", "cmpi uge",
               where=r"nvgpu\.ldmatrix")),
    ("activation: silu of -gate", "grouped_e8_swiglu_t9", silu_sign),
    ("prefill: cp.async wait leaves 2 groups pending", "grouped_e8_t400_prefill",
     wait_one_more),
    ("prefill: no barrier in the pipelined loop (cp.async into a stage being read)",
     "grouped_e8_t400_prefill", drop_in_launch(r"gpu\.barrier$", where=r"nvgpu\.ldmatrix")),
    ("prefill: ldmatrix transposed", "grouped_e8_t400_prefill",
     in_launch(r"nvgpu\.ldmatrix", "transpose = false", "transpose = true",
               where=r"nvgpu\.ldmatrix")),
]


def check_mutations(lowered, seed, only=None):
    cases = {c.name: c for c in ROUTE_CASES + GEMM_CASES}
    return run_mutations(MUTATIONS, lambda name: lowered(source_of(cases[name])),
                         lambda name, text: run_case(cases[name], text, seed)[0], only)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mutations", action="store_true")
    parser.add_argument("--only", action="append", metavar="CASE")
    args = parser.parse_args()
    lowered = Lowered(args.build)
    start = time.perf_counter()
    if args.mutations:
        missed = check_mutations(lowered, args.seed, args.only)
        print(f"{time.perf_counter() - start:.1f} s")
        return 1 if missed else 0
    cases = [c for c in ROUTE_CASES + GEMM_CASES if not args.only or c.name in args.only]
    ok = [check(case, lowered, args.seed) for case in cases]
    print(f"{len(ok) - sum(ok)} failing cases of {len(ok)} ({time.perf_counter() - start:.1f} s)")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
