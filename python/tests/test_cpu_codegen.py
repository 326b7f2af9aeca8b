"""The CPU code generation (convert-moe-to-cpu): the padded dispatch layout,
bitwise determinism across thread counts, the --cpu target, and expert-parallel
ranks computing only the rows of their own experts."""
import ctypes
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from moec import main as main_job
from moec import reference
from moec.layer import run_layer
from moec.memref import CompiledFunction
from moec.toolchain import ROOT, build_dir, compile_config, compile_mlir, tool
from moec.weights import DTYPES, make_inputs

EXAMPLES = sorted((ROOT / "examples").glob("*/config.json"))
H, K, E, TILE = 24, 2, 4, 4

DISPATCH = f"""
func.func @dispatch(%x: tensor<?x{H}xf32>, %ids: tensor<?x{K}xi32>)
    -> (tensor<?x{H}xf32>, tensor<?xi32>, tensor<?x{K}xi32>, tensor<{E + 1}xi32>)
    attributes {{llvm.emit_c_interface}} {{
  %d, %re, %s, %o = moe.dispatch %x, %ids num_experts = {E} row_tile = {TILE}
    : (tensor<?x{H}xf32>, tensor<?x{K}xi32>)
      -> (tensor<?x{H}xf32>, tensor<?xi32>, tensor<?x{K}xi32>, tensor<{E + 1}xi32>)
  return %d, %re, %s, %o
    : tensor<?x{H}xf32>, tensor<?xi32>, tensor<?x{K}xi32>, tensor<{E + 1}xi32>
}}
"""


def host_has_bf16_dot():
    """Whether this CPU has AVX512-BF16 (moe-compile then multiplies bf16
    pairs with vdpbf16ps)."""
    try:
        return "avx512_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def disassemble(library):
    return subprocess.run(["objdump", "-d", str(library)], check=True,
                          capture_output=True, text=True).stdout


def padded_layout(x, ids, experts, tile):
    """The documented layout, written from moe.dispatch's description: each
    expert's rows in (token, choice) order, padded to `tile`, negative ids
    get no row."""
    tokens, k = ids.shape
    counts = np.array([(ids == e).sum() for e in range(experts)])
    padded = -(-counts // tile) * tile
    offsets = np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
    rows = tokens * k + experts * (tile - 1)
    dispatched = np.zeros((rows, x.shape[1]), np.float32)
    row_expert = np.full(rows, -1, np.int32)
    slot = np.full((tokens, k), -1, np.int32)
    nxt = offsets[:-1].copy()
    for t in range(tokens):
        for j in range(k):
            e = ids[t, j]
            if e < 0:
                continue
            slot[t, j], nxt[e] = nxt[e], nxt[e] + 1
            dispatched[slot[t, j]] = x[t]
            row_expert[slot[t, j]] = e
    return dispatched, row_expert, slot, offsets


def test_padded_layout_with_empty_single_and_one_over_tile_experts(tmp_path):
    """Expert 0 gets no row, expert 1 one, expert 2 TILE + 1, expert 3 TILE;
    two choices belong to another rank."""
    library = compile_mlir(DISPATCH, tmp_path, "dispatch")
    fn = CompiledFunction(library, "dispatch",
                          [(2, np.float32), (1, np.int32), (2, np.int32), (1, np.int32)])
    ids = np.array([[2, 1], [2, 3], [3, -1], [2, 3], [2, 3], [2, -1]], np.int32)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ids.shape[0], H), dtype=np.float32)
    got = fn(x, ids)
    want = padded_layout(x, ids, E, TILE)
    for name, g, w in zip(["dispatched", "row_expert", "slot", "expert_offsets"], got, want):
        np.testing.assert_array_equal(g, w, err_msg=name)
    assert list(want[3]) == [0, 0, TILE, 3 * TILE, 4 * TILE]


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_padded_layout_layer_matches_reference(tmp_path, config, dtype):
    library, plan = compile_config(config, tmp_path, dtype, row_tile=5)
    x, weights = make_inputs(plan, 13, seed=3)
    y = run_layer(library, plan, x, weights).astype(np.float64)
    ref = reference.layer(x, weights, plan)
    assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) <= main_job.TOLERANCE[dtype]


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_layer_call_frees_every_buffer(tmp_path, config, dtype):
    """Decode and prefill sizes (300 tokens: the packed GEMM, its scratch
    included) match the reference, and the runtime's heap counter is back to
    where it was once the result is gone."""
    runtime = ctypes.CDLL(str(build_dir() / "lib" / "libmoert.so"))
    runtime.moert_heap_live_bytes.restype = ctypes.c_int64
    library, plan = compile_config(config, tmp_path, dtype)
    before = runtime.moert_heap_live_bytes()
    for tokens in (1, 300):
        x, weights = make_inputs(plan, tokens, seed=4)
        y = run_layer(library, plan, x, weights)
        ref = reference.layer(x, weights, plan)
        error = np.max(np.abs(y.astype(np.float64) - ref)) / np.max(np.abs(ref))
        assert error <= main_job.TOLERANCE[dtype], (tokens, error)
        del y
        gc.collect()
        assert runtime.moert_heap_live_bytes() == before, tokens


RUN_ONCE = """
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import json
from moec.layer import run_layer
from moec.weights import DTYPES, make_inputs
plan = json.load(open(sys.argv[3]))
x, weights = make_inputs(plan, 96, seed=5)
np.save(sys.argv[4], run_layer(sys.argv[2], plan, x, weights))
"""


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_one_and_two_threads_give_the_same_bits(tmp_path, dtype):
    library, plan = compile_config(EXAMPLES[0], tmp_path, dtype)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    outputs = []
    for threads in (1, 2):
        out = tmp_path / f"y{threads}.npy"
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        subprocess.run([sys.executable, "-c", RUN_ONCE, str(ROOT / "python"), str(library),
                        str(plan_path), str(out)], env=env, check=True)
        outputs.append(np.load(out))
    assert outputs[0].tobytes() == outputs[1].tobytes()


def test_portable_cpu_baseline_matches_reference(tmp_path):
    """x86-64 (SSE2, 4-lane vectors) instead of the host's ISA."""
    library, plan = compile_config(EXAMPLES[1], tmp_path, "f32", cpu="x86-64")
    x, weights = make_inputs(plan, 9, seed=1)
    y = run_layer(library, plan, x, weights).astype(np.float64)
    ref = reference.layer(x, weights, plan)
    assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) <= main_job.TOLERANCE["f32"]


def test_unknown_cpu_is_a_clear_error(tmp_path):
    done = subprocess.run([tool("moe-compile"), "--config", str(EXAMPLES[0]), "--cpu", "nope",
                           "-o", str(tmp_path / "x.so")], capture_output=True, text=True)
    assert done.returncode == 1
    assert "--cpu: 'nope' is not a CPU LLVM knows" in done.stderr
    assert not (tmp_path / "x.so").exists()


def test_expert_parallel_rank_computes_only_its_own_rows(tmp_path):
    """Every token goes to the last rank's experts: rank 0 receives no row for
    its experts and must spend (almost) no expert compute, rank 1 all of it."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 512,
                                  "moe_intermediate_size": 256, "num_experts": 8,
                                  "num_experts_per_tok": 2, "norm_topk_prob": True}))
    library, plan = compile_config(config, tmp_path, "f32", ep=2, max_tokens_per_rank=256)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    results, done = main_job.run_ranks(library, plan_path, 2, 240, seed=2, scenario="one-rank",
                                       tolerance=1e-5, work=tmp_path)
    assert done.returncode == 0, done.stderr
    assert all(r["ok"] for r in results)
    compute = [r["counters"]["compute_ns"] for r in results]
    assert compute[0] < 0.25 * compute[1], compute


def grouped_gemm_source(k, n, experts, dtype="f32"):
    return f"""
func.func @gemm(%a: tensor<?x{k}x{dtype}>, %w: tensor<{experts}x{n}x{k}x{dtype}>,
                %re: tensor<?xi32>, %off: tensor<{experts + 1}xi32>) -> tensor<?x{n}x{dtype}>
    attributes {{llvm.emit_c_interface}} {{
  %y = moe.grouped_matmul %a, %w, %re offsets %off
    : (tensor<?x{k}x{dtype}>, tensor<{experts}x{n}x{k}x{dtype}>, tensor<?xi32>,
       tensor<{experts + 1}xi32>) -> tensor<?x{n}x{dtype}>
  return %y : tensor<?x{n}x{dtype}>
}}
"""


def grouped_rows(counts):
    """Expert offsets for `counts` rows per expert, and row_expert with 3
    rows of no expert after them."""
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    row_expert = np.full(int(offsets[-1]) + 3, -1, np.int32)
    for e in range(len(counts)):
        row_expert[offsets[e]:offsets[e + 1]] = e
    return offsets, row_expert


# Row counts around the packed GEMM's limits (24 rows and more; tiles of 6
# rows in blocks of 192): no rows, the decode path (5, 23), whole tiles (24,
# 30), every partial tile (25-29), a block less one, a block, a block and
# one row, several blocks.
PACKED_COUNTS = [0, 5, 23, 24, 25, 26, 27, 28, 29, 30, 191, 192, 193, 400]


@pytest.mark.parametrize("k, n, dtype, cpu", [
    (40, 96, "f32", None),      # panels of 2 vectors; a partial group of panels
    (37, 96, "f32", None),      # a depth that ends element-wise
    (4200, 32, "f32", None),    # the depth split into blocks that add up
    (37, 96, "bf16", None),     # odd depth: bf16 widened in the pack and the row copy
    (40, 12, "f32", None),      # no whole panel: the decode path for every expert
    (37, 96, "bf16", "x86-64"),  # 4 lanes: 4 x 4 transposes, panels of 8
    (96, 96, "bf16", None),     # even depth: vdpbf16ps pairs where the CPU has them
    (50, 96, "bf16", None),     # ... and a depth that ends in pairs packed one by one
], ids=["f32", "ragged-depth", "split-depth", "bf16", "narrow", "sse2", "bf16-dot",
        "bf16-dot-tail"])
def test_packed_grouped_gemm_matches_numpy(tmp_path, k, n, dtype, cpu):
    """out[r] = a[r] @ w[e].T for the rows of each expert, whichever path
    (decode or packed, one or several depth blocks) computes it; padding
    rows after the experts are zero. Also bitwise equal on 1 and 2 threads,
    and nothing allocated is left behind (scratch inside a thread loop is not
    freed by the deallocation pipeline)."""
    experts = len(PACKED_COUNTS)
    library = compile_mlir(grouped_gemm_source(k, n, experts, dtype), tmp_path, "gemm", cpu)
    if dtype == "bf16" and k % 2 == 0 and host_has_bf16_dot():
        # The case is about the dot-product path: it must be the one taken.
        assert "vdpbf16ps" in disassemble(library)
    offsets, row_expert = grouped_rows(PACKED_COUNTS)
    rows = len(row_expert)
    rng = np.random.default_rng(7)
    element = DTYPES[dtype]
    a = rng.standard_normal((rows, k), dtype=np.float32).astype(element)
    w = rng.standard_normal((experts, n, k), dtype=np.float32).astype(element)
    want = np.zeros((rows, n))
    for e in range(experts):
        lo, hi = offsets[e], offsets[e + 1]
        want[lo:hi] = a[lo:hi].astype(np.float64) @ w[e].T.astype(np.float64)
    script = (
        "import sys, numpy as np\n"
        "from moec.memref import CompiledFunction\n"
        "from moec.weights import DTYPES\n"
        f"fn = CompiledFunction({str(library)!r}, 'gemm', [(2, DTYPES[{dtype!r}])])\n"
        f"d = np.load({str(tmp_path / 'in.npz')!r})\n"
        f"y = fn(d['a'].view(DTYPES[{dtype!r}]), d['w'].view(DTYPES[{dtype!r}]), d['re'], d['off'])\n"
        "np.save(sys.argv[1], y.view(np.uint16) if y.dtype.itemsize == 2 else y)\n"
        # Every buffer the GEMM allocated is freed (the result with its view).
        "del y\n"
        "import ctypes, gc\n"
        "from moec.toolchain import build_dir\n"
        "gc.collect()\n"
        "rt = ctypes.CDLL(str(build_dir() / 'lib' / 'libmoert.so'))\n"
        "rt.moert_heap_live_bytes.restype = ctypes.c_int64\n"
        "assert rt.moert_heap_live_bytes() == 0, rt.moert_heap_live_bytes()\n")
    bits = np.uint16 if dtype == "bf16" else np.float32
    np.savez(tmp_path / "in.npz", a=a.view(bits), w=w.view(bits), re=row_expert, off=offsets)
    outs = []
    for threads in (1, 2):
        out = tmp_path / f"y{threads}.npy"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads),
               "PYTHONPATH": str(ROOT / "python")}
        subprocess.run([sys.executable, "-c", script, str(out)], env=env, check=True)
        outs.append(np.load(out))
    np.testing.assert_array_equal(outs[0], outs[1])
    got = outs[0].view(element).astype(np.float64)
    scale = np.abs(want).max()
    # f32 sums; a bf16 output is rounded once (2^-9 relative).
    tolerance = 1e-5 if dtype == "f32" else 4e-3
    assert np.abs(got - want).max() <= tolerance * scale
    assert not got[offsets[-1]:].any()


def fp8_gemm_source(k, n, experts, block, dtype):
    """FP8 weights; dtype "fp8" also takes FP8 rows with a scale per 32 codes."""
    rows, cols = block
    scales = f"{experts}x{-(-n // rows)}x{-(-k // cols)}xf32"
    a, out = ("i8", "f32") if dtype == "fp8" else (dtype, dtype)
    row_scales = f"%rs: tensor<?x{k // 32}xf32>, " if dtype == "fp8" else ""
    use_row_scales = "scales %rs " if dtype == "fp8" else ""
    row_scales_type = f"tensor<?x{k // 32}xf32>, " if dtype == "fp8" else ""
    return f"""
func.func @gemm(%a: tensor<?x{k}x{a}>, %w: tensor<{experts}x{n}x{k}xi8>,
                %s: tensor<{scales}>, %re: tensor<?xi32>, {row_scales}%off: tensor<{experts + 1}xi32>)
    -> tensor<?x{n}x{out}> attributes {{llvm.emit_c_interface}} {{
  %y = moe.grouped_matmul %a, %w, %re {use_row_scales}weight_scales %s offsets %off
    {{weight_block = array<i64: {rows}, {cols}>}}
    : (tensor<?x{k}x{a}>, tensor<{experts}x{n}x{k}xi8>, tensor<?xi32>, {row_scales_type}tensor<{scales}>,
       tensor<{experts + 1}xi32>) -> tensor<?x{n}x{out}>
  return %y : tensor<?x{n}x{out}>
}}
"""


# Rows per expert: none, the decode dot (1, 2), register tiles (5), the packed
# GEMM (24, 200).
FP8_COUNTS = [0, 1, 2, 5, 24, 200]


@pytest.mark.parametrize("k, n, block, dtype, cpu", [
    (128, 96, (32, 64), "f32", None),      # scale blocks of whole decode steps
    (200, 40, (16, 48), "f32", None),      # a partial last block each way, a masked tail
    (128, 96, (32, 64), "bf16", None),     # bf16 rows widened once; packed: vdpbf16ps pairs
    (200, 96, (32, 48), "bf16", None),     # ... a partial last scale block and pack tail
    (200, 40, (16, 48), "bf16", None),     # blocks narrower than a panel: widened everywhere
    (64, 32, (4, 8), "f32", None),         # blocks narrower than a vector: linalg
    (128, 96, (32, 64), "bf16", "x86-64"),  # 4 lanes
    (128, 96, (32, 64), "fp8", None),      # FP8 rows too (an FP8 dispatch's), decoded once
], ids=["f32", "ragged", "bf16", "bf16-ragged", "bf16-narrow-blocks", "narrow-blocks", "sse2",
        "fp8-rows"])
def test_fp8_weight_grouped_gemm_matches_torch(tmp_path, k, n, block, dtype, cpu):
    """out[r] = a[r] @ (e4m3(w[e]) * scales of w's blocks).T, whichever path
    computes an expert's rows; every E4M3 code but NaN occurs (zeros,
    subnormals, +-448), decoded for the reference by torch's float8_e4m3fn."""
    torch = pytest.importorskip("torch")
    experts = len(FP8_COUNTS)
    library = compile_mlir(fp8_gemm_source(k, n, experts, block, dtype), tmp_path, "gemm", cpu)
    if dtype == "bf16" and cpu is None and block[0] % 32 == 0 and host_has_bf16_dot():
        assert "vdpbf16ps" in disassemble(library)
    offsets, row_expert = grouped_rows(FP8_COUNTS)
    rows = len(row_expert)
    rng = np.random.default_rng(11)
    valid = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)
    codes = rng.choice(valid, size=(experts, n, k))
    br, bc = -(-n // block[0]), -(-k // block[1])
    scales = np.exp(rng.uniform(-12, 2, size=(experts, br, bc))).astype(np.float32)
    decode = lambda c: torch.from_numpy(c).view(torch.float8_e4m3fn).to(torch.float64).numpy()  # noqa: E731
    if dtype == "fp8":
        a_codes = rng.choice(valid, size=(rows, k))
        a_codes[offsets[4] + 3, 70] = 0xFF  # a NaN activation (-NaN code) stays NaN
        row_scales = np.exp(rng.uniform(-4, 2, size=(rows, k // 32))).astype(np.float32)
        a = decode(a_codes) * np.repeat(row_scales, 32, axis=1)
        args = (a_codes.view(np.int8), codes.view(np.int8), scales, row_expert, row_scales)
    else:
        a = rng.standard_normal((rows, k), dtype=np.float32).astype(DTYPES[dtype])
        args = (a, codes.view(np.int8), scales, row_expert)
    decoded = decode(codes)
    full = np.repeat(np.repeat(scales, block[0], 1), block[1], 2)[:, :n, :k].astype(np.float64)
    w = decoded * full
    want = np.zeros((rows, n))
    for e in range(experts):
        lo, hi = offsets[e], offsets[e + 1]
        want[lo:hi] = a[lo:hi].astype(np.float64) @ w[e].T
    fn = CompiledFunction(str(library), "gemm", [(2, DTYPES.get(dtype, np.float32))])
    got = np.asarray(fn(*args, offsets))
    got = got.astype(np.float64)
    nan_rows = np.isnan(want).any(axis=1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    got[nan_rows], want[nan_rows] = 0, 0
    # Each row against its own magnitude: the scales span 6 decades.
    for e in range(experts):
        lo, hi = offsets[e], offsets[e + 1]
        if hi > lo:
            size = np.abs(want[lo:hi]).max()
            tolerance = 4e-3 if dtype == "bf16" else 1e-5
            assert np.abs(got[lo:hi] - want[lo:hi]).max() <= tolerance * size, (e, hi - lo)
    assert not got[offsets[-1]:].any()
