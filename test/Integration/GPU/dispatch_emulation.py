#!/usr/bin/env python3
"""Runs the GPU dispatch kernels' IR on the CPU and checks every result bit for bit.

For each case: lower a dispatch-only function (`moe.dispatch`, the padded
layout) with `moe-opt --convert-moe-to-gpu` and interpret the whole
function with kernel_emulator.py: the host code (allocations, the `scf.if`
that launches one fused bookkeeping kernel for T*k <= 2048 choices, else
three), then each kernel, all threads of a block in lockstep, workgroup
memory fresh per block, a race detector between barriers, uniform barriers
and warp ops checked, reads of unwritten memory refused. dispatched (bf16
rows), row_expert, slot and expert_offsets must equal, bit for bit, the
reference below, written from moe.dispatch's description in MoEOps.td and
cross-checked with the CPU lowering (moe-compile, convert-moe-to-cpu) where
the build has it. Exits 1 on any mismatch.

  python3 test/Integration/GPU/dispatch_emulation.py [--build DIR] [--seed N]
      [--no-cpu] [--only CASE ...] [--skip CASE ...] [--mutations]

--mutations instead perturbs the lowered IR text (in memory) in ways each
case must catch: a barrier or warp sync dropped (the race detector), a
constant changed, a barrier made divergent; exits 1 if one goes unnoticed.
"""
import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_emulator as emulator  # noqa: E402
from mutations import run_mutations  # noqa: E402

BF16 = emulator.BF16
# Up to this many choices the host launches the fused bookkeeping kernel
# (DispatchGPU.cpp: kBlockChoices).
FUSED_LIMIT = 2048
RESULTS = ("dispatched", "row_expert", "slot", "expert_offsets")


class Case(NamedTuple):
    name: str
    experts: int
    k: int
    tokens: int
    pattern: str  # how expert_ids are drawn: see expert_ids
    tile: int = 16
    hidden: int = 64
    dtype: str = "bf16"


CASES = [  # T*k <= 2048: the fused bookkeeping kernel
    Case("one_choice", 8, 1, 1, "distinct"),
    Case("seven_choices_e64", 64, 1, 7, "skewed"),
    Case("e256_k8_t8", 256, 8, 8, "distinct"),
    Case("every_expert_per_token", 8, 8, 8, "distinct"),
    Case("e8_k2_t32", 8, 2, 32, "distinct"),
    Case("foreign_ids_e8", 8, 2, 40, "foreign"),
    Case("out_of_range_ids_e8", 8, 2, 40, "out_of_range"),
    # Fails: the fused kernel loads expert_ids[0, 0] of the empty ids (the
    # pytest marks it xfail until DispatchGPU.cpp's expertOf guards it).
    Case("no_tokens", 64, 2, 0, "distinct"),
    Case("all_foreign", 64, 2, 50, "all_foreign"),
    Case("no_row_tile_e64", 64, 2, 100, "skewed", tile=1),
    Case("element_copies_h20", 256, 2, 50, "distinct", hidden=20),
    Case("f32_rows_e64", 64, 8, 20, "distinct", dtype="f32"),
    Case("one_expert_e8_k2", 8, 2, 1000, "one_expert"),
    Case("limit_e64_k2", 64, 2, 1024, "skewed"),
    Case("limit_e256_k8", 256, 8, 256, "foreign"),
    # T*k > 2048: three bookkeeping kernels
    Case("above_limit_e8_k1", 8, 1, 2049, "distinct"),
    Case("three_blocks_e64_k2", 64, 2, 2500, "skewed"),
    Case("three_blocks_e256_k8", 256, 8, 625, "distinct"),
    Case("three_blocks_foreign_e256", 256, 8, 625, "foreign"),
    Case("one_expert_e64_k1", 64, 1, 5000, "one_expert"),
    Case("out_of_range_e8_k2", 8, 2, 2100, "out_of_range"),
]


def dispatch_source(experts, k, hidden, tile, dtype):
    """A dispatch-only function (the C interface for the CPU cross-check)."""
    rows, ids = f"tensor<?x{hidden}x{dtype}>", f"tensor<?x{k}xi32>"
    out = f"{rows}, tensor<?xi32>, {ids}, tensor<{experts + 1}xi32>"
    tiling = f" row_tile = {tile}" if tile > 1 else ""
    return (f"func.func @dispatch(%x: {rows}, %ids: {ids}) -> ({out})\n"
            f"    attributes {{llvm.emit_c_interface}} {{\n"
            f"  %d, %re, %s, %o = moe.dispatch %x, %ids num_experts = {experts}{tiling}\n"
            f"    : ({rows}, {ids}) -> ({out})\n"
            f"  return %d, %re, %s, %o : {out}\n}}\n")


def lower(source, build):
    return subprocess.run([str(build / "bin" / "moe-opt"), "--convert-moe-to-gpu"], input=source,
                          capture_output=True, text=True, check=True).stdout


def expert_ids(rng, pattern, tokens, k, experts):
    """[T, k] i32 ids. distinct: k different experts a token, uniform;
    skewed: the same, expert e drawn with weight 1 / (e + 1) (empty experts);
    one_expert: every choice the last expert (k > 1 repeats it in a token);
    foreign: distinct, a quarter negative (-1, -7, INT32_MIN: another rank's);
    all_foreign: every id -1; out_of_range: distinct, some >= E, some negative."""
    if pattern in ("one_expert", "all_foreign"):
        return np.full((tokens, k), experts - 1 if pattern == "one_expert" else -1, np.int32)
    keys = rng.random((tokens, experts))
    if pattern == "skewed":  # Gumbel top-k: k draws without replacement, weights 1 / (e + 1)
        keys = -np.log(np.arange(1, experts + 1)) - np.log(-np.log(keys))
    ids = np.argsort(-keys, axis=1)[:, :k].astype(np.int32)
    if pattern in ("foreign", "out_of_range"):
        hit = rng.random(ids.shape) < 0.25
        bad = [-1, -7, np.iinfo(np.int32).min] + [experts, experts + 5, 2**31 - 1] * (
            pattern == "out_of_range")
        ids[hit] = rng.choice(np.array(bad, np.int32), hit.sum())
    return ids


def reference(x, ids, experts, tile):
    """moe.dispatch's padded layout as MoEOps.td describes it: a choice with
    an id in [0, E) gets a row (negative ids: another rank's; ids >= E, which
    the description leaves open, likewise, as both lowerings read them), slot
    -1 otherwise; each expert's rows in (token, choice) order, padded to a
    multiple of `tile`, experts in order from row 0 (offsets: exclusive
    prefix sums of the padded counts, then the rows used); padding and
    unused rows zero with row_expert -1; T*k + min(E, T*k) * (tile - 1) rows."""
    tokens, k = ids.shape
    valid = (ids >= 0) & (ids < experts)
    counts = np.bincount(ids[valid], minlength=experts)
    offsets = np.concatenate([[0], np.cumsum(-(-counts // tile) * tile)]).astype(np.int32)
    rows = tokens * k + min(experts, tokens * k) * (tile - 1)
    dispatched = np.zeros((rows, x.shape[1]), x.dtype)
    row_expert = np.full(rows, -1, np.int32)
    slot = np.full((tokens, k), -1, np.int32)
    following = offsets[:-1].copy()  # each expert's next row
    for t in range(tokens):
        for j in range(k):
            if valid[t, j]:
                e = ids[t, j]
                slot[t, j] = row = following[e]
                following[e] += 1
                dispatched[row], row_expert[row] = x[t], e
    return dict(zip(RESULTS, (dispatched, row_expert, slot, offsets)))


def bits(a):
    """The array's bits, to compare floats exactly (NaN and -0 included)."""
    return a.view(f"u{a.itemsize}") if a.dtype.kind in "fV" else a


def differences(got, want, name):
    """Lines describing where `got` differs from `want` (empty: equal)."""
    if got.shape != want.shape:
        return [f"{name}: shape {got.shape}, expected {want.shape}"]
    bad = bits(got) != bits(want)
    if bad.ndim == 2 and name == "dispatched":
        bad = bad.any(axis=1)
    where = np.argwhere(bad)
    if not len(where):
        return []
    i = tuple(where[0])
    shown = [np.ravel(a[i])[:4].tolist() for a in (got, want)]
    return [f"{name}: {len(where)} differ, first at {list(map(int, i))}: "
            f"{shown[0]}{' ...' * (got[i].size > 4)}, expected {shown[1]}"]


class CpuLowering:
    """moe.dispatch compiled for the CPU (moe-compile), to cross-check the
    reference; its row count may exceed the reference's (E * (tile - 1) of
    padding), so only the rows it uses are compared, the rest must be empty."""

    def __init__(self, build, workdir):
        self.build, self.workdir, self.functions = build, Path(workdir), {}

    def run(self, case, x, ids):
        from moec.memref import CompiledFunction
        key = (case.experts, case.k, case.hidden, case.tile, case.dtype)
        if key not in self.functions:
            stem = "dispatch_" + "_".join(map(str, key))
            (self.workdir / f"{stem}.mlir").write_text(dispatch_source(*key))
            library = self.workdir / f"{stem}.so"
            subprocess.run([str(self.build / "bin" / "moe-compile"),
                            str(library.with_suffix(".mlir")), "-o", str(library)],
                           check=True, capture_output=True)
            self.functions[key] = CompiledFunction(
                library, "dispatch", [(2, x.dtype), (1, np.int32), (2, np.int32), (1, np.int32)])
        return [np.array(r) for r in self.functions[key](x, ids)]

    def disagreements(self, case, x, ids, want):
        dispatched, row_expert, slot, offsets = self.run(case, x, ids)
        used = int(want["expert_offsets"][-1])
        out = differences(offsets, want["expert_offsets"], "cpu expert_offsets")
        out += differences(slot, want["slot"], "cpu slot")
        out += differences(dispatched[:used], want["dispatched"][:used], "cpu dispatched")
        out += differences(row_expert[:used], want["row_expert"][:used], "cpu row_expert")
        if bits(dispatched[used:]).any() or (row_expert[used:] != -1).any():
            out.append("cpu: rows past the used ones not empty")
        return out


def emulate(text, x, ids):
    """The lowered function run by the emulator: (results by name, the
    Host with its launches)."""
    host = emulator.run_function(text, "dispatch", x, ids)
    return dict(zip(RESULTS, host.results)), host


def run_case(case, text, rng, cpu=None):
    """Runs one case; returns (problems, notes, summary fields)."""
    x = rng.standard_normal((case.tokens, case.hidden)).astype(
        BF16 if case.dtype == "bf16" else np.float32)
    ids = expert_ids(rng, case.pattern, case.tokens, case.k, case.experts)
    want = reference(x, ids, case.experts, case.tile)
    problems, notes = [], []
    if cpu is not None:
        problems += cpu.disagreements(case, x, ids, want)
    try:
        got, host = emulate(text, x, ids)
    except (emulator.KernelError, IndexError, KeyError, TypeError, ValueError) as error:
        return problems + [f"{type(error).__name__}: {error}"], notes, {}
    for name in RESULTS:
        buffer = got[name]
        if buffer.init is not None and not buffer.init.all():
            where = np.argwhere(~buffer.init)[:, 0]
            problems.append(f"{name}: {len(where)} elements never written, first at row "
                            f"{int(where[0])}")
        if buffer.writes is not None and (buffer.writes != 1).any():
            notes.append(f"{name}: elements written {sorted(set(buffer.writes.ravel()))} times")
        problems += differences(buffer.array, want[name], name)
    books = [grid for grid, block in host.launches if block == [1024, 1, 1]]
    path = {1: "fused", 3: "three"}.get(len(books), f"{len(books)} kernels?")
    if path != ("fused" if case.tokens * case.k <= FUSED_LIMIT else "three"):
        problems.append(f"bookkeeping path {path} for {case.tokens * case.k} choices")
    valid = (ids >= 0) & (ids < case.experts)
    fields = dict(path=path, rows=len(want["row_expert"]), used=int(want["expert_offsets"][-1]),
                  empty=int((np.bincount(ids[valid], minlength=case.experts) == 0).sum()),
                  unrouted=int((~valid).sum()))
    return problems, notes, fields


class Lowered:
    """The lowered IR per (experts, k, hidden, tile, dtype), made once."""

    def __init__(self, build):
        self.build, self.texts = build, {}

    def __call__(self, case):
        key = (case.experts, case.k, case.hidden, case.tile, case.dtype)
        if key not in self.texts:
            self.texts[key] = lower(dispatch_source(*key), self.build)
        return self.texts[key]


def case_rng(case, seed):
    """The case's own random stream (the same whichever cases run)."""
    return np.random.default_rng([seed, [c.name for c in CASES].index(case.name)])


def check(case, lowered, seed, cpu):
    """Runs one case; prints its summary line; returns success."""
    start = time.perf_counter()
    problems, notes, f = run_case(case, lowered(case), case_rng(case, seed), cpu)
    seconds = time.perf_counter() - start
    head = (f"{case.name:26s} E={case.experts:3d} k={case.k} T={case.tokens:4d} "
            f"T*k={case.tokens * case.k:4d} tile={case.tile:2d} H={case.hidden} {case.dtype:4s}")
    if f:
        head += (f" {f['path']:5s} rows {f['rows']:5d} used {f['used']:5d} empty experts "
                 f"{f['empty']:3d} unrouted {f['unrouted']:4d}")
    if cpu is not None:
        agrees = not any(p.startswith("cpu") for p in problems)
        head += " (cpu agrees)" if agrees else " (cpu DISAGREES)"
    print(f"{head}: {'ok' if not problems else 'FAIL'} {seconds:.2f} s")
    for line in (problems + notes)[:8]:
        print("    " + line)
    return not problems


# --- Mutations: IR text perturbations the check must catch ----------------------

def launch_lines(lines, n):
    """(first, last) line numbers of the n-th gpu.launch (text order)."""
    first = [i for i, line in enumerate(lines) if "gpu.launch " in line][n]
    indent = len(lines[first]) - len(lines[first].lstrip())
    last = next(i for i in range(first + 1, len(lines))
                if lines[i].startswith(" " * indent + "}"))
    return first, last


def find(lines, n, pattern, nth=0, after=None):
    """The line number of the nth line matching `pattern` in launch n (n
    None: anywhere), after the first one matching `after` if given."""
    first, last = launch_lines(lines, n) if n is not None else (0, len(lines))
    if after is not None:
        first = find(lines, n, after)
    hits = [i for i in range(first, last) if re.search(pattern, lines[i])]
    if len(hits) <= nth:
        raise LookupError(f"no line {pattern!r} (#{nth}) in launch {n}")
    return hits[nth]


def drop(n, pattern, nth=0, after=None):
    def mutate(lines):
        del lines[find(lines, n, pattern, nth, after)]
    return mutate


def substitute(n, pattern, old, new, nth=0, after=None):
    def mutate(lines):
        i = find(lines, n, pattern, nth, after)
        if not re.search(old, lines[i]):
            raise LookupError(f"{old!r} not in {lines[i]}")
        lines[i] = re.sub(old, new, lines[i], count=1)
    return mutate


def fused_threshold(lines):
    """The host's choice count limit of the fused kernel, 2048 -> 4096."""
    name = re.search(r"arith\.cmpi ule, %\w+, (%\w+) : index", lines[find(lines, None, "cmpi ule")])
    substitute(None, rf"{name.group(1)} = arith\.constant 2048 : index", "constant 2048",
               "constant 4096")(lines)


def rank_is_count(lines):
    """The numbering walk's rank: popc of the whole match mask (the count)."""
    match = find(lines, 0, r"nvvm\.match\.sync", nth=1)
    mask = lines[match].split(" = ")[0].strip()
    i = find(lines, 0, r"math\.ctpop", after=re.escape(lines[match].strip()))
    lines[i] = re.sub(r"ctpop %[\w-]+", f"ctpop {mask}", lines[i])


def divergent_barrier(lines):
    """A barrier inside the counting walk's lane-divergent scf.if."""
    i = find(lines, 0, r"scf\.if %\w+ \{$", after=r"nvvm\.match\.sync")
    lines.insert(i + 1, "gpu.barrier")


# Launches in text order: 0 the fused bookkeeping; 1 count, 2 scan, 3 number;
# 4 the copy. (label, case, mutation)
MUTATIONS = [
    ("fused: no barrier after zeroing the per-warp counts", "e8_k2_t32",
     drop(0, r"gpu\.barrier$")),
    ("fused: no barrier between a scan step's read of begins[e - d] and its add", "e8_k2_t32",
     drop(0, r"gpu\.barrier$", after=r"memref\.load %\w+\[%\w+\] : memref<\d+xi32, #gpu")),
    ("fused: no warp sync between the walk's first lane moving a count and the next step",
     "e8_k2_t32", drop(0, r"nvvm\.bar\.warp\.sync", nth=0)),
    ("fused: no warp sync between the lanes reading a count and the first moving it",
     "e8_k2_t32", drop(0, r"nvvm\.bar\.warp\.sync", nth=1)),
    ("fused: a barrier in the lane-divergent counting branch", "e8_k2_t32", divergent_barrier),
    ("fused: padded count rounds with 14 for 15 (the first such constant)", "one_choice",
     substitute(0, r"arith\.constant 15 : i32", r"15 :", "14 :")),
    ("fused: rank = the whole match mask's popc", "e8_k2_t32", rank_is_count),
    ("fused: padding rows' row_expert not written", "e8_k2_t32",
     drop(0, r"memref\.store %c-1_i32[\w]*, %\w+\[%arg\d+\] : memref<\?xi32>")),
    ("host: fused kernel up to 4096 choices", "above_limit_e8_k1", fused_threshold),
    ("count kernel: no barrier after zeroing the per-warp counts", "three_blocks_e64_k2",
     drop(1, r"gpu\.barrier$")),
    ("scan kernel: the blocks' prefixes not stored", "three_blocks_e64_k2",
     drop(2, r"memref\.store %arg\d+, %\w+\[%arg\d+, %arg\d+\] : memref<\?x\d+xi32>")),
    ("copy kernel: token >= 0 becomes token > 0", "e8_k2_t32",
     substitute(4, r"arith\.cmpi sge", "sge", "sgt")),
]


def check_mutations(lowered, seed):
    """Runs each mutation's case on the mutated text; returns how many were missed."""
    cases = {case.name: case for case in CASES}
    return run_mutations(
        MUTATIONS, lambda name: lowered(cases[name]),
        lambda name, text: run_case(cases[name], text, case_rng(cases[name], seed))[0],
        width=84)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU lowering cross-check")
    parser.add_argument("--mutations", action="store_true")
    parser.add_argument("--only", action="append", metavar="CASE", help="run only these cases")
    parser.add_argument("--skip", action="append", default=[], metavar="CASE")
    args = parser.parse_args()
    cases = [c for c in CASES if (not args.only or c.name in args.only) and c.name not in args.skip]
    lowered = Lowered(args.build)
    if args.mutations:
        return 1 if check_mutations(lowered, args.seed) else 0
    has_cpu = not args.no_cpu and (args.build / "bin" / "moe-compile").exists()
    with tempfile.TemporaryDirectory() as workdir:
        cpu = CpuLowering(args.build, workdir) if has_cpu else None
        ok = [check(case, lowered, args.seed, cpu) for case in cases]
    print(f"{len(ok) - sum(ok)} failing cases of {len(ok)}")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
