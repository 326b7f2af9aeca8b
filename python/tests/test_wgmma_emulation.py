"""The sm_90a GEMM kernels (wgmma prefill blocks of bf16, FP8 weights, FP8 rows
and FP8 dispatch codes per 128 and per 32; fused SwiGLU; static worst-case
rows) executed on the CPU by interpreting the lowered IR, against float64
references: test/Integration/GPU/wgmma_emulation.py. Also the interpreter's
wgmma on a hand-written kernel against the PTX ISA's swizzle and fragment
layout, and its checks of the warpgroup's fences and waits."""
import subprocess
import sys

import numpy as np
import pytest

from moec.toolchain import ROOT, build_dir

# Pure Python (the kernel emulator): not run in the sanitizer tier (utils/sanitize.sh).
pytestmark = pytest.mark.emulation

SCRIPTS = ROOT / "test" / "Integration" / "GPU"
sys.path.insert(0, str(SCRIPTS))
import kernel_emulator as emulator  # noqa: E402
import tensor_cores  # noqa: E402

BF16 = emulator.BF16


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPTS / "wgmma_emulation.py"),
                           "--build", str(build_dir()), *args],
                          capture_output=True, text=True, timeout=600)


def test_wgmma_kernels_emulated_match_the_reference():
    done = run_script()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "0 failing cases of 24" in done.stdout


def test_ir_mutations_are_caught():
    """Fences and waits dropped, descriptors and swizzles changed, scales and
    code bytes mixed up: every one fails its case."""
    done = run_script("--mutations")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "0 of 12 mutations missed" in done.stdout


def lowered(source):
    return subprocess.run([str(build_dir() / "bin" / "moe-opt")], input=source,
                          capture_output=True, text=True, check=True).stdout


WGMMA = """
func.func @k(%a: memref<64x16xbf16>, %b: memref<8x16xbf16>, %out: memref<128x4xf32>) {
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %bytes = arith.constant 10240 : i32
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
      threads(%tx, %ty, %tz) in (%sx = %c128, %sy = %c1, %sz = %c1)
      dynamic_shared_memory_size %bytes {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %c8 = arith.constant 8 : index
    %c16 = arith.constant 16 : index
    %c1024 = arith.constant 1024 : index
    %c8192 = arith.constant 8192 : index
    %smem = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
    %base = memref.extract_aligned_pointer_as_index %smem : memref<?xi8, #gpu.address_space<workgroup>> -> index
    %mis = arith.remui %base, %c1024 : index
    %pad0 = arith.subi %c1024, %mis : index
    %pad = arith.remui %pad0, %c1024 : index
    %bstart = arith.addi %pad, %c8192 : index
    %sa = memref.view %smem[%pad][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x64xbf16, #gpu.address_space<workgroup>>
    %sb = memref.view %smem[%bstart][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<8x64xbf16, #gpu.address_space<workgroup>>
    // A: 8 elements a thread, row r = (8 tid + i) / 16, depth k = (8 tid + i) % 16, stored at
    // column ((k / 8) xor (r % 8)) * 8 + k % 8 (the 128-byte swizzle of 16-byte chunks).
    scf.for %i = %c0 to %c8 step %c1 {
      %t8 = arith.muli %tx, %c8 : index
      %idx = arith.addi %t8, %i : index
      %r = arith.divui %idx, %c16 : index
      %k = arith.remui %idx, %c16 : index
      %chunk = arith.divui %k, %c8 : index
      %within = arith.remui %k, %c8 : index
      %phase = arith.remui %r, %c8 : index
      %sw = arith.xori %chunk, %phase : index
      %col0 = arith.muli %sw, %c8 : index
      %col = arith.addi %col0, %within : index
      %v = memref.load %a[%r, %k] : memref<64x16xbf16>
      memref.store %v, %sa[%r, %col] : memref<64x64xbf16, #gpu.address_space<workgroup>>
    }
    %rb = arith.divui %tx, %c16 : index
    %kb = arith.remui %tx, %c16 : index
    %chb = arith.divui %kb, %c8 : index
    %wib = arith.remui %kb, %c8 : index
    %phb = arith.remui %rb, %c8 : index
    %swb = arith.xori %chb, %phb : index
    %colb0 = arith.muli %swb, %c8 : index
    %colb = arith.addi %colb0, %wib : index
    %vb = memref.load %b[%rb, %kb] : memref<8x16xbf16>
    memref.store %vb, %sb[%rb, %colb] : memref<8x64xbf16, #gpu.address_space<workgroup>>
    nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
    gpu.barrier
    %pa = memref.extract_aligned_pointer_as_index %sa : memref<64x64xbf16, #gpu.address_space<workgroup>> -> index
    %pb = memref.extract_aligned_pointer_as_index %sb : memref<8x64xbf16, #gpu.address_space<workgroup>> -> index
    %four = arith.constant 4 : i64
    %mask = arith.constant 16383 : i64
    // 128-byte swizzle (bits 62-63 = 1), 8-row groups 1024 bytes apart (64 at bit 32).
    %mode = arith.constant 4611686293305360384 : i64
    %pa64 = arith.index_castui %pa : index to i64
    %pb64 = arith.index_castui %pb : index to i64
    %sa4 = arith.shrui %pa64, %four : i64
    %sb4 = arith.shrui %pb64, %four : i64
    %fa = arith.andi %sa4, %mask : i64
    %fb = arith.andi %sb4, %mask : i64
    %da = arith.ori %fa, %mode : i64
    %db = arith.ori %fb, %mode : i64
    %zero = llvm.mlir.zero : !llvm.struct<(f32, f32, f32, f32)>
    nvvm.wgmma.fence.aligned
    %d = nvvm.wgmma.mma_async %da, %db, %zero, <m = 64, n = 8, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>] : !llvm.struct<(f32, f32, f32, f32)> -> !llvm.struct<(f32, f32, f32, f32)>
    nvvm.wgmma.commit.group.sync.aligned
    nvvm.wgmma.wait.group.sync.aligned 0
    %d0 = llvm.extractvalue %d[0] : !llvm.struct<(f32, f32, f32, f32)>
    %d1 = llvm.extractvalue %d[1] : !llvm.struct<(f32, f32, f32, f32)>
    %d2 = llvm.extractvalue %d[2] : !llvm.struct<(f32, f32, f32, f32)>
    %d3 = llvm.extractvalue %d[3] : !llvm.struct<(f32, f32, f32, f32)>
    memref.store %d0, %out[%tx, %c0] : memref<128x4xf32>
    memref.store %d1, %out[%tx, %c1] : memref<128x4xf32>
    memref.store %d2, %out[%tx, %c2] : memref<128x4xf32>
    memref.store %d3, %out[%tx, %c3] : memref<128x4xf32>
    gpu.terminator
  }
  return
}
"""


def run_wgmma(text):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 16)).astype(BF16)
    b = rng.standard_normal((8, 16)).astype(BF16)
    out = np.zeros((128, 4), np.float32)
    emulator.run_function(lowered(text), "k", a, b, out)
    return a.astype(np.float64), b.astype(np.float64), out


def test_wgmma_follows_the_ptx_swizzle_and_fragment_layout():
    """A and B written K-major with the 128-byte swizzle (16-byte chunk c of row r
    at chunk c xor r % 8), descriptors by hand; thread t (warp w = t / 32, lane
    l) holds D at rows 16 w + l / 4 (+ 8 for registers 2, 3), columns 2 (l % 4)
    + (i & 1), as the PTX ISA's figure for wgmma .m64nNk16 D gives them."""
    a, b, out = run_wgmma(WGMMA)
    want = a @ b.T
    for t in range(128):
        w, lane = divmod(t, 32)
        for i in range(4):
            row = 16 * w + lane // 4 + 8 * (i >= 2)
            assert out[t, i] == pytest.approx(want[row, 2 * (lane % 4) + (i & 1)], abs=1e-5)


def test_wgmma_stages_must_be_aligned_to_the_swizzle_pattern():
    """Without rounding the stage up to 1024 bytes the hardware's swizzle (of
    address bits) is not the one the stores applied: the product reads chunks
    of the rows nobody wrote."""
    text = WGMMA.replace("memref.view %smem[%pad][]", "memref.view %smem[%c0][]").replace(
        "%bstart = arith.addi %pad, %c8192", "%bstart = arith.addi %c0, %c8192")
    with pytest.raises(emulator.KernelError, match="where nothing was written"):
        run_wgmma(text)


@pytest.mark.parametrize("drop, message", [
    ("    nvvm.wgmma.wait.group.sync.aligned 0\n", "not waited for"),
    ("    nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, "
     "space = #nvvm.shared_space<cta>}\n", "no fence.proxy.async"),
    ("    nvvm.wgmma.fence.aligned\n", "no wgmma.fence"),
    ("    gpu.barrier\n", "race on dynamic shared memory"),
])
def test_wgmma_misuse_raises(drop, message):
    assert drop in WGMMA
    with pytest.raises(emulator.KernelError, match=message):
        run_wgmma(WGMMA.replace(drop, ""))


def test_e4m3_conversion_rounds_to_nearest_even_and_saturates():
    """cvt.rn.satfinite.e4m3x2.f32, code by code (sign, 4 exponent bits of bias 7,
    3 mantissa bits; largest finite 0x7E = 448)."""
    values = [1.0, 1.0625, 1.1875, 448.0, 464.0, 1e9, float("inf"), -float("inf"), 2.0**-9,
              2.0**-10, 3 * 2.0**-10, -0.0, float("nan")]
    codes = [0x38, 0x38, 0x3A, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x01, 0x00, 0x02, 0x80]
    got = tensor_cores.e4m3_satfinite(np.array(values, np.float32))
    assert got[:-1].tolist() == codes
    assert got[-1] & 0x7F == 0x7F  # NaN
