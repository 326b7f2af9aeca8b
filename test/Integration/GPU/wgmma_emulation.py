#!/usr/bin/env python3
"""Runs the sm_90a grouped GEMM kernels (wgmma prefill blocks, FP8 forms) on the CPU.

Each case lowers a dispatch and a grouped GEMM with `moe-opt
--convert-moe-to-gpu=prefill-mma=wgmma ...` and interprets the whole function
with kernel_emulator.py: wgmma m64nNk16 bf16 and m64nNk32 E4M3 from swizzled
shared memory (descriptors decoded as the PTX ISA gives them, tensor_cores.py),
the warpgroup's fences (wgmma.fence, fence.proxy.async), commit and wait
groups, accumulators in flight refused until waited for; the decode forms'
mma.sync as before. Every output row is compared with a float64 reference:

- bf16: out = rows @ W[e]^T rounded to bf16; fused SwiGLU (`fuse-swiglu`):
  silu(gate) * up of the f32 sums in the prefill epilogue, of the GEMM's bf16
  output in the decode form (its activation kernel);
- FP8 weights (E4M3 codes, an f32 scale per 128 x 128 block: W = code x
  scale), bf16 rows (W8A16; both forms);
- FP8 rows (`fp8-rows`): the prefill form first quantizes the dispatched rows
  per 128 of depth (scale = amax / 448 in f32, codes = E4M3(x / scale),
  round to nearest even, saturated; zeros scale 0), written here from the
  PTX ISA's cvt.rn.satfinite and the scheme of docs/FP8Dispatch.md, then
  out = sum over blocks of (row codes . weight codes) x row scale x weight
  scale; the decode form keeps bf16 rows;
- FP8 dispatch codes (rows of E4M3 codes with f32 scales per 128 or per 32,
  as an FP8 dispatch delivers them): the prefill form multiplies the codes
  (out as above with the row scale of each 128 or 32); the decode form
  dequantizes each row element to bf16(f32(code) x scale) first.

The form the host must pick (decode up to E * (64 + 15) rows, else prefill)
is told by the ops executed (wgmma or mma.sync). Tolerance: |got - want| <=
|want| 2^-7 + 1e-3 max|want| (bf16 rounding of an f32 sum).

  python3 test/Integration/GPU/wgmma_emulation.py [--build DIR] [--seed N]
      [--only CASE ...] [--mutations]

--mutations perturbs the lowered IR in ways its case must catch; exits 1 if
one goes unnoticed.
"""
import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE))
import dispatch_emulation as dispatch  # noqa: E402
import gemm_decode_emulation as gemm  # noqa: E402
import kernel_emulator as emulator  # noqa: E402
import tensor_cores as tc  # noqa: E402
from mutations import run_mutations  # noqa: E402

BF16 = tc.BF16
TILE = 16  # the dispatch's row tile


class Case(NamedTuple):
    name: str
    kind: str  # bf16, swiglu, fp8_weights, fp8_rows, codes_g128, codes_g32
    experts: int
    n: int  # the GEMM's output columns (2 I with swiglu)
    hidden: int  # K
    tokens: int
    k: int
    pattern: str  # dispatch_emulation.expert_ids
    block: str  # prefill-block
    stages: int
    form: str  # the GEMM form that must run: decode or prefill
    static: bool = False  # static rows (the worst case, as an EP receive buffer has them)


CASES = [
    Case("bf16_128x128_s3", "bf16", 4, 128, 256, 200, 2, "distinct", "128x128", 3, "prefill"),
    Case("bf16_64x128_s2", "bf16", 4, 128, 256, 200, 2, "skewed", "64x128", 2, "prefill"),
    Case("bf16_128x256_s4", "bf16", 4, 256, 256, 200, 2, "skewed", "128x256", 4, "prefill"),
    Case("bf16_decode", "bf16", 4, 128, 256, 20, 2, "distinct", "128x128", 3, "decode"),
    Case("swiglu_fused_128x128", "swiglu", 4, 256, 128, 200, 2, "skewed", "128x128", 3,
         "prefill"),
    Case("swiglu_fused_decode", "swiglu", 4, 256, 128, 20, 2, "skewed", "128x128", 3,
         "decode"),
    Case("fp8_weights_128x128", "fp8_weights", 4, 128, 256, 200, 2, "skewed", "128x128", 2,
         "prefill"),
    Case("fp8_weights_decode", "fp8_weights", 4, 128, 256, 20, 2, "distinct", "128x128", 2,
         "decode"),
    Case("fp8_rows_128x128", "fp8_rows", 4, 128, 256, 200, 2, "skewed", "128x128", 3,
         "prefill"),
    Case("fp8_rows_64x128_s2", "fp8_rows", 4, 128, 256, 200, 2, "distinct", "64x128", 2,
         "prefill"),
    Case("fp8_rows_decode", "fp8_rows", 4, 128, 256, 20, 2, "distinct", "128x128", 3, "decode"),
    Case("codes_g128_128x128", "codes_g128", 4, 128, 256, 200, 2, "skewed", "128x128", 3,
         "prefill"),
    Case("codes_g128_decode", "codes_g128", 4, 128, 256, 20, 2, "distinct", "128x128", 3,
         "decode"),
    Case("codes_g32_128x128", "codes_g32", 4, 128, 256, 200, 2, "distinct", "128x128", 3,
         "prefill"),
    Case("codes_g32_decode", "codes_g32", 4, 128, 256, 20, 2, "skewed", "128x128", 3, "decode"),
    # bf16 weights reading an FP8 dispatch's codes: the decode form dequantizes as it
    # loads, the prefill forms read what a dequantize kernel wrote.
    Case("codes_bf16w_decode", "codes_bf16w", 4, 128, 256, 20, 2, "distinct", "128x128", 3,
         "decode"),
    Case("codes_bf16w_wgmma", "codes_bf16w", 4, 128, 256, 200, 2, "skewed", "128x128", 3,
         "prefill"),
    Case("codes_bf16w_static_prefill", "codes_bf16w", 2, 128, 256, 80, 2, "counts:70,90",
         "128x128", 3, "prefill", True),
    Case("fp8_rows_128x256_k512_s4", "fp8_rows", 2, 256, 512, 150, 2, "distinct", "128x256", 4,
         "prefill"),
    # Static worst-case rows: both forms launch, each kernel leaving unless offsets[E] (the
    # rows used) says it is its form (decode up to E * (64 + 15) = 158).
    Case("static_bf16_used96", "bf16", 2, 128, 256, 80, 2, "counts:50,40", "128x128", 3,
         "decode", True),
    Case("static_bf16_used160", "bf16", 2, 128, 256, 80, 2, "counts:80,80", "128x128", 3,
         "prefill", True),
    Case("static_codes_g128_used160", "codes_g128", 2, 128, 256, 80, 2, "counts:70,90",
         "128x128", 3, "prefill", True),
    Case("static_fp8_rows_used150", "fp8_rows", 2, 128, 256, 80, 2, "counts:64,79", "128x128",
         3, "decode", True),
    # FP8 rows on static rows: the quantize kernel takes the rows used (offsets[E]).
    Case("static_fp8_rows_used192", "fp8_rows", 2, 128, 256, 100, 2, "counts:90,100",
         "128x128", 3, "prefill", True),
]


def options(case):
    extra = {"swiglu": " fuse-swiglu=true", "fp8_rows": " fp8-rows=true",
             "codes_g128": " fp8-rows=true", "codes_g32": " fp8-rows=true"}.get(case.kind, "")
    return (f"prefill-mma=wgmma prefill-block={case.block} prefill-stages={case.stages}"
            + extra)


def dispatched_rows(case):
    return case.tokens * case.k + min(case.experts, case.tokens * case.k) * (TILE - 1)


def row_scale_groups(case):
    return case.hidden // (32 if case.kind == "codes_g32" else 128)


def source(case):
    """The function @gemm(x, ids, w[, weight scales][, row scales])."""
    e, n, h = case.experts, case.n, case.hidden
    codes = case.kind.startswith("codes")
    fp8 = case.kind not in ("bf16", "swiglu", "codes_bf16w")
    t = str(case.tokens) if case.static else "?"
    x, ids = f"tensor<{t}x{h}x{'i8' if codes else 'bf16'}>", f"tensor<{t}x2xi32>"
    r = str(dispatched_rows(case)) if case.static else "?"
    xr = f"tensor<{r}x{h}x{'i8' if codes else 'bf16'}>"
    w = f"tensor<{e}x{n}x{h}x{'i8' if fp8 else 'bf16'}>"
    ws = f"tensor<{e}x{n // 128}x{h // 128}xf32>"
    rs = f"tensor<{t}x{row_scale_groups(case)}xf32>"
    rsr = f"tensor<{r}x{row_scale_groups(case)}xf32>"
    out = f"tensor<{r}x{n}xbf16>"
    result = f"tensor<{r}x{n // 2}xbf16>" if case.kind == "swiglu" else out
    args = [f"%x: {x}", f"%ids: {ids}", f"%w: {w}"] + [f"%ws: {ws}"] * fp8 + [f"%rs: {rs}"] * codes
    offsets = f"tensor<{e + 1}xi32>"
    lines = [f"func.func @gemm({', '.join(args)}) -> {result} {{",
             f"  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = {e} "
             f"row_tile = {TILE} : ({x}, {ids}) -> ({xr}, tensor<{r}xi32>, {ids}, {offsets})"]
    if codes:
        lines.append(f"  %srows, %sre, %sslot, %soff = moe.dispatch %rs, %ids num_experts = {e} "
                     f"row_tile = {TILE} : ({rs}, {ids}) -> ({rsr}, tensor<{r}xi32>, {ids}, "
                     f"{offsets})")
    scales = " scales %srows" if codes else ""
    types = [xr, w, f"tensor<{r}xi32>"] + [rsr] * codes + [ws] * fp8 + [offsets]
    attr = " {weight_block = array<i64: 128, 128>}" if fp8 else ""
    lines.append(f"  %h = moe.grouped_matmul %rows, %w, %re{scales}"
                 f"{' weight_scales %ws' if fp8 else ''} offsets %off{attr} : "
                 f"({', '.join(types)}) -> {out}")
    if case.kind == "swiglu":
        lines += [f"  %a = moe.activation %h kind swiglu : ({out}) -> {result}",
                  f"  return %a : {result}"]
    else:
        lines.append(f"  return %h : {out}")
    return "\n".join(lines + ["}", ""])


def lower(case, build):
    return subprocess.run([str(build / "bin" / "moe-opt"),
                           f"--convert-moe-to-gpu={options(case)}"], input=source(case),
                          capture_output=True, text=True, check=True).stdout


# --- Inputs and references ---------------------------------------------------------

def e4m3_codes(rng, shape):
    """Random E4M3 codes, NaN (0x7F, 0xFF) excluded, subnormals included."""
    codes = rng.integers(0, 256, shape).astype(np.uint8)
    return np.where((codes & 0x7F) == 0x7F, codes - 1, codes).astype(np.uint8)


def e4m3_value(codes):
    return codes.view(np.uint8).view(tc.E4M3).astype(np.float64)


def quantize_rows(rows, group):
    """The FP8 rows scheme: per group of `group` of a row, scale = amax / 448
    (f32), codes = E4M3(x / scale) rounded to nearest even and saturated; a
    group of zeros scale 0, codes 0. (codes uint8, scales f32)."""
    x = rows.astype(np.float32).reshape(len(rows), -1, group)
    amax = np.abs(x).max(axis=2)
    scale = (amax / np.float32(tc.E4M3_MAX)).astype(np.float32)
    divisor = np.where(amax > 0, scale, np.float32(1))[:, :, None]
    codes = tc.e4m3_satfinite((x / divisor).astype(np.float32)).reshape(len(rows), -1)
    return codes, scale


def inputs(case, rng):
    """(the function's arguments, x values as float64 [T, H] or None for codes,
    the weights' values [E, N, H] float64)."""
    e, n, h, t = case.experts, case.n, case.hidden, case.tokens
    ids = gemm.gemm_ids(case, rng)
    if case.kind == "codes_bf16w":
        w = (rng.standard_normal((e, n, h)) / np.sqrt(h)).astype(BF16)
        x = e4m3_codes(rng, (t, h)).view(np.int8)
        scales = rng.uniform(0.001, 0.01, (t, row_scale_groups(case))).astype(np.float32)
        return [x, ids, w, scales], w.astype(np.float64)
    if case.kind in ("bf16", "swiglu"):
        w = (rng.standard_normal((e, n, h)) / np.sqrt(h)).astype(BF16)
        x = rng.standard_normal((t, h)).astype(BF16)
        return [x, ids, w], w.astype(np.float64)
    codes = e4m3_codes(rng, (e, n, h))
    ws = rng.uniform(0.5, 2.0, (e, n // 128, h // 128)).astype(np.float32) / np.float32(
        16 * np.sqrt(h))
    w = e4m3_value(codes) * np.repeat(np.repeat(ws, 128, axis=1), 128, axis=2)
    args = [None, ids, codes.view(np.int8), ws]
    if case.kind.startswith("codes"):
        groups = row_scale_groups(case)
        args[0] = e4m3_codes(rng, (t, h)).view(np.int8)
        args.append(rng.uniform(0.001, 0.01, (t, groups)).astype(np.float32))
    else:
        args[0] = rng.standard_normal((t, h)).astype(BF16)
    return args, w


def reference(case, args, w, form):
    """(dispatch layout, want [rows, n or n / 2] float64 of bf16 values)."""
    x, ids = args[0], args[1]
    layout = dispatch.reference(x, ids, case.experts, TILE)
    rows, expert = layout["dispatched"], layout["row_expert"]
    if case.kind.startswith("codes"):
        scales = dispatch.reference(args[-1], ids, case.experts, TILE)["dispatched"]
        group = case.hidden // scales.shape[1]
        value = e4m3_value(rows) * np.repeat(scales.astype(np.float64), group, axis=1)
        # Dequantized to bf16 as the decode form loads them (bf16 weights: both forms).
        if form == "decode" or case.kind == "codes_bf16w":
            value = (e4m3_value(rows).astype(np.float32) * np.repeat(scales, group, axis=1)
                     ).astype(BF16).astype(np.float64)
    elif case.kind == "fp8_rows" and form == "prefill":
        codes, scales = quantize_rows(rows, 128)
        value = e4m3_value(codes) * np.repeat(scales.astype(np.float64), 128, axis=1)
    else:
        value = rows.astype(np.float64)
    out = np.zeros((len(rows), case.n))
    for e in range(case.experts):
        mine = expert == e
        out[mine] = value[mine] @ w[e].T
    out = out.astype(np.float32).astype(np.float64)
    if case.kind == "swiglu" and form == "prefill":  # the epilogue's f32 sums
        gate, up = out[:, :case.n // 2], out[:, case.n // 2:]
        out = gate / (1.0 + np.exp(-gate)) * up
    elif case.kind == "swiglu":  # the activation kernel reads the GEMM's bf16 output
        out = out.astype(BF16).astype(np.float64)
        gate, up = out[:, :case.n // 2], out[:, case.n // 2:]
        out = gate / (1.0 + np.exp(-gate)) * up
    return layout, out.astype(np.float32).astype(BF16).astype(np.float64)


def forms_run(executed):
    """Per launch with tensor cores, in order: prefill (wgmma) or decode (mma.sync)."""
    launches = sorted({n for (n, name), count in executed.items()
                       if name in ("nvvm.mma.sync", "nvvm.wgmma.mma_async") and count})
    return ["prefill" if executed[n, "nvvm.wgmma.mma_async"] else "decode" for n in launches]


def run_case(case, text, seed):
    rng = np.random.default_rng([seed, [c.name for c in CASES].index(case.name)])
    args, w = inputs(case, rng)
    layout, want = reference(case, args, w, case.form)
    used = int(layout["expert_offsets"][-1])
    rows = used if case.static else dispatched_rows(case)
    form = "decode" if rows <= case.experts * (64 + 15) else "prefill"
    problems = [] if form == case.form else [f"the case takes the {form} form, meant {case.form}"]
    try:
        with np.errstate(all="ignore"), gemm.counting_ops() as executed:
            host = emulator.run_function(text, "gemm", *args)
    except (emulator.KernelError, NotImplementedError, IndexError, KeyError, TypeError,
            ValueError) as error:
        return problems + [f"{type(error).__name__}: {str(error)[:400]}"], ""
    ran = forms_run(executed)
    if ran != [case.form]:
        problems.append(f"GEMM forms run: {ran}, expected {[case.form]}")
    out = host.results[0]
    if out.shape != want.shape:
        return problems + [f"result shape {out.shape}, expected {want.shape}"], ""
    if case.static:  # rows past those used are not written
        want = want[:used]
        out = emulator.Buffer(out.array[:used], "out", initialised=False)
        out.init, out.writes = host.results[0].init[:used], host.results[0].writes[:used]
    problems += gemm.written_once(out, "out")
    got = out.array.astype(np.float64)
    scale = float(np.abs(want).max())
    err = np.abs(got - want)
    bad = ~(err <= np.abs(want) * 2.0**-7 + 1e-3 * scale)  # NaN (poison) is bad
    if bad.any():
        r, c = np.argwhere(bad)[0]
        problems.append(f"{int(bad.sum())} outputs differ, first [{r}, {c}] (row expert "
                        f"{layout['row_expert'][r]}): {got[r, c]}, expected {want[r, c]}")
    summary = (f"{'+'.join(ran):7s} rows {dispatched_rows(case):4d} used {used:4d} "
               f"{len(host.launches)} kernels, max err {float(err.max() / scale):.1e} of max|out| {scale:.2f}")
    return problems, summary


def check(case, text, seed):
    start = time.perf_counter()
    problems, summary = run_case(case, text, seed)
    print(f"{case.name:24s} {summary}: {'ok' if not problems else 'FAIL'} "
          f"{time.perf_counter() - start:.2f} s")
    for line in problems[:6]:
        print("    " + line)
    return not problems


# --- Mutations ---------------------------------------------------------------------------

WGMMA = r"nvvm\.wgmma\.mma_async"


def in_wgmma_launch(pattern, old, new, nth=0):
    return gemm.in_launch(pattern, old, new, where=WGMMA, nth=nth)


def drop_in_wgmma_launch(pattern, nth=0):
    return gemm.drop_in_launch(pattern, where=WGMMA, nth=nth)


MUTATIONS = [
    ("bf16: no wgmma.fence before a step's products", "bf16_128x128_s3",
     drop_in_wgmma_launch(r"nvvm\.wgmma\.fence\.aligned")),
    ("bf16: no fence.proxy.async after the stage lands", "bf16_128x128_s3",
     drop_in_wgmma_launch(r"nvvm\.fence\.proxy")),
    ("bf16: no wait for the products before the next stage's copies", "bf16_128x128_s3",
     drop_in_wgmma_launch(r"nvvm\.wgmma\.wait\.group")),
    ("bf16: a step's second product reads the first's depth", "bf16_64x128_s2",
     in_wgmma_launch(r"arith\.constant 32 : i64", "constant 32", "constant 0")),
    ("bf16: a descriptor's 8-row stride 512 bytes, not 1024", "bf16_128x128_s3",
     in_wgmma_launch(r"arith\.constant 4611686293305360384 : i64",
                     "constant 4611686293305360384", "constant 4611686155866406912")),
    ("bf16: stage copies not swizzled (xor dropped)", "bf16_128x256_s4",
     in_wgmma_launch(r"= arith\.xori %\w+, %\w+ : index", r"arith\.xori (%\w+), (%\w+)",
                     r"arith.ori \1, \1")),
    ("bf16: products into zeros each step (scale-d 0)", "bf16_128x128_s3",
     in_wgmma_launch(WGMMA, r"D\[<f32>, <one>\]", "D[<f32>, <zero>]")),
    ("swiglu fused: up rows from the gate's half", "swiglu_fused_128x128",
     in_wgmma_launch(r"arith\.select %\w+, %\w+, %\w+ : index",
                     r"arith\.select (%\w+), (%\w+), %\w+", r"arith.select \1, \2, \2",
                     nth=2)),  # the third copy a thread makes: weight rows 64-95
    ("fp8 rows: amax of 8 of 16 threads (shuffle xor 8 -> 4)", "fp8_rows_128x128",
     gemm.in_launch(r"%c8_i32 = arith\.constant 8 : i32", "constant 8", "constant 4",
                    where=r"nvvm\.convert\.f32x2\.to\.f8x2")),
    ("fp8 rows: a code pair's bytes swapped", "fp8_rows_128x128",
     gemm.in_launch(r"nvvm\.convert\.f32x2\.to\.f8x2", r"f8x2 (%\w+), (%\w+)", r"f8x2 \2, \1",
                    where=r"nvvm\.convert\.f32x2\.to\.f8x2")),
    ("fp8 rows: the weight block's scale not applied", "fp8_rows_128x128",
     in_wgmma_launch(r"= arith\.mulf %\w+, %\w+ : f32", r"arith\.mulf (%\w+), %\w+",
                     r"arith.mulf \1, \1")),
    ("codes g32: a product's row scale the previous one's", "codes_g32_128x128",
     in_wgmma_launch(r"memref\.load .*memref<\?x8xf32", r"\[(%\w+), (%\w+)\]", r"[\1, %c0]")),
]


def check_mutations(build, seed, only=None):
    cases = {c.name: c for c in CASES}
    return run_mutations(MUTATIONS, lambda name: lower(cases[name], build),
                         lambda name, text: run_case(cases[name], text, seed)[0], only)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mutations", action="store_true")
    parser.add_argument("--only", action="append", metavar="CASE")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.mutations:
        missed = check_mutations(args.build, args.seed, args.only)
        print(f"{time.perf_counter() - start:.1f} s")
        return 1 if missed else 0
    cases = [c for c in CASES if not args.only or c.name in args.only]
    ok = [check(case, lower(case, args.build), args.seed) for case in cases]
    print(f"{len(ok) - sum(ok)} failing cases of {len(ok)} ({time.perf_counter() - start:.1f} s)")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
