"""The GPU tensor-core GEMM kernels (the router GEMM's depth-split decode form
and the route kernel adding its partials, the grouped GEMM's decode form over
dynamic and static worst-case rows, the swiglu after it, the prefill forms)
executed on the CPU by interpreting the lowered function's IR, against float64
references: test/Integration/GPU/gemm_decode_emulation.py. Also the
interpreter's nvvm.mma.sync, nvgpu.ldmatrix and cp.async on hand-written
kernels, against the PTX ISA's fragment layouts."""
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

BF16 = emulator.BF16


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPTS / "gemm_decode_emulation.py"),
                           "--build", str(build_dir()), *args],
                          capture_output=True, text=True, timeout=600)


def test_gemm_kernels_emulated_match_the_reference():
    done = run_script()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "0 failing cases of 20" in done.stdout


def test_ir_mutations_are_caught():
    """Swapped mma operands, depth bounds off, guards' predicates changed, a
    dropped barrier, a cp.async wait too lax: every one fails its case."""
    done = run_script("--mutations")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "0 of 18 mutations missed" in done.stdout


def lowered(source):
    """`source` printed by moe-opt (the form the emulator reads)."""
    return subprocess.run([str(build_dir() / "bin" / "moe-opt")], input=source,
                          capture_output=True, text=True, check=True).stdout


MMA = """
func.func @k(%a: memref<32x4xi32>, %b: memref<32x2xi32>, %c: memref<32x4xf32>,
             %d: memref<32x4xf32>) {
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
      threads(%tx, %ty, %tz) in (%sx = %c32, %sy = %c1, %sz = %c1) {
    %i0 = arith.constant 0 : index
    %i1 = arith.constant 1 : index
    %i2 = arith.constant 2 : index
    %i3 = arith.constant 3 : index
    %a0 = memref.load %a[%tx, %i0] : memref<32x4xi32>
    %a1 = memref.load %a[%tx, %i1] : memref<32x4xi32>
    %a2 = memref.load %a[%tx, %i2] : memref<32x4xi32>
    %a3 = memref.load %a[%tx, %i3] : memref<32x4xi32>
    %b0 = memref.load %b[%tx, %i0] : memref<32x2xi32>
    %b1 = memref.load %b[%tx, %i1] : memref<32x2xi32>
    %c0 = memref.load %c[%tx, %i0] : memref<32x4xf32>
    %c1v = memref.load %c[%tx, %i1] : memref<32x4xf32>
    %c2 = memref.load %c[%tx, %i2] : memref<32x4xf32>
    %c3 = memref.load %c[%tx, %i3] : memref<32x4xf32>
    %r = nvvm.mma.sync A[%a0, %a1, %a2, %a3] B[%b0, %b1] C[%c0, %c1v, %c2, %c3]
      {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>,
       multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>,
       shape = #nvvm.shape<m = 16, n = 8, k = 16>}
      : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
    %d0 = llvm.extractvalue %r[0] : !llvm.struct<(f32, f32, f32, f32)>
    %d1 = llvm.extractvalue %r[1] : !llvm.struct<(f32, f32, f32, f32)>
    %d2 = llvm.extractvalue %r[2] : !llvm.struct<(f32, f32, f32, f32)>
    %d3 = llvm.extractvalue %r[3] : !llvm.struct<(f32, f32, f32, f32)>
    memref.store %d0, %d[%tx, %i0] : memref<32x4xf32>
    memref.store %d1, %d[%tx, %i1] : memref<32x4xf32>
    memref.store %d2, %d[%tx, %i2] : memref<32x4xf32>
    memref.store %d3, %d[%tx, %i3] : memref<32x4xf32>
    gpu.terminator
  }
  return
}
"""


def pack(lo, hi):
    """An i32 register of two bf16: `lo` in the low 16 bits."""
    bits = lambda v: int(np.array(v, BF16).view(np.uint16))
    return np.uint32(bits(lo) | bits(hi) << 16).view(np.int32)


def fragments(a, b, c):
    """Per lane the registers of mma.m16n8k16 .row.col bf16 / f32, written out from
    the PTX ISA's tables (groupID g = lane >> 2, threadID_in_group t = lane % 4):
    A's a0..a7 at rows g (a0, a1, a4, a5) or g + 8, columns 2t + (i & 1) (+ 8 for
    i >= 4); B's b0..b3 at rows 2t + (i & 1) (+ 8 for i >= 2), column g; C's c0..c3 at
    rows g (i < 2) or g + 8, columns 2t + (i & 1)."""
    ra, rb, rc = np.zeros((32, 4), np.int32), np.zeros((32, 2), np.int32), np.zeros((32, 4))
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        ra[lane] = [pack(a[g, 2 * t], a[g, 2 * t + 1]), pack(a[g + 8, 2 * t], a[g + 8, 2 * t + 1]),
                    pack(a[g, 2 * t + 8], a[g, 2 * t + 9]),
                    pack(a[g + 8, 2 * t + 8], a[g + 8, 2 * t + 9])]
        rb[lane] = [pack(b[2 * t, g], b[2 * t + 1, g]), pack(b[2 * t + 8, g], b[2 * t + 9, g])]
        rc[lane] = [c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1]]
    return ra, rb, rc.astype(np.float32)


def test_mma_follows_the_ptx_fragment_layout():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(BF16)
    b = rng.standard_normal((16, 8)).astype(BF16)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    ra, rb, rc = fragments(a, b, c)
    d = np.zeros((32, 4), np.float32)
    emulator.run_function(lowered(MMA), "k", ra, rb, rc, d)
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    expected = np.array([[want[lane >> 2, 2 * (lane % 4)], want[lane >> 2, 2 * (lane % 4) + 1],
                          want[(lane >> 2) + 8, 2 * (lane % 4)],
                          want[(lane >> 2) + 8, 2 * (lane % 4) + 1]] for lane in range(32)])
    assert np.allclose(d, expected, rtol=1e-6, atol=1e-6)


def test_mma_by_part_of_a_warp_raises():
    partial = MMA.replace("    %r = nvvm.mma.sync", """    %c16 = arith.constant 16 : index
    %low = arith.cmpi ult, %tx, %c16 : index
    scf.if %low {
    %r = nvvm.mma.sync""").replace("    gpu.terminator", "    }\n    gpu.terminator")
    zeros = [np.zeros((32, 4), np.int32), np.zeros((32, 2), np.int32),
             np.zeros((32, 4), np.float32), np.zeros((32, 4), np.float32)]
    with pytest.raises(emulator.KernelError, match="part of a warp"):
        emulator.run_function(lowered(partial), "k", *zeros)


LDMATRIX = """
func.func @k(%m: memref<32x8xbf16>, %out: memref<32x8xbf16>) {
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
      threads(%tx, %ty, %tz) in (%sx = %c32, %sy = %c1, %sz = %c1)
      workgroup(%s : memref<32x8xbf16, #gpu.address_space<workgroup>>) {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c6 = arith.constant 6 : index
    %t = nvgpu.device_async_copy %m[%tx, %c0], %s[%tx, %c0], 8
      : memref<32x8xbf16> to memref<32x8xbf16, #gpu.address_space<workgroup>>
    %g = nvgpu.device_async_create_group %t
    nvgpu.device_async_wait %g {numGroups = 0 : i32}
    gpu.barrier
    %r = nvgpu.ldmatrix %s[%tx, %c0] {numTiles = 4 : i32, transpose = TRANSPOSE}
      : memref<32x8xbf16, #gpu.address_space<workgroup>> -> vector<4x2xbf16>
    %r0 = vector.extract %r[0] : vector<2xbf16> from vector<4x2xbf16>
    %r1 = vector.extract %r[1] : vector<2xbf16> from vector<4x2xbf16>
    %r2 = vector.extract %r[2] : vector<2xbf16> from vector<4x2xbf16>
    %r3 = vector.extract %r[3] : vector<2xbf16> from vector<4x2xbf16>
    vector.store %r0, %out[%tx, %c0] : memref<32x8xbf16>, vector<2xbf16>
    vector.store %r1, %out[%tx, %c2] : memref<32x8xbf16>, vector<2xbf16>
    vector.store %r2, %out[%tx, %c4] : memref<32x8xbf16>, vector<2xbf16>
    vector.store %r3, %out[%tx, %c6] : memref<32x8xbf16>, vector<2xbf16>
    gpu.terminator
  }
  return
}
"""


@pytest.mark.parametrize("transpose", [False, True])
def test_ldmatrix_gives_each_lane_its_fragment(transpose):
    """Lane 8 i + r gives row r of matrix i; lane l gets per matrix i the elements
    (l >> 2, 2 (l % 4) + j), transposed (2 (l % 4) + j, l >> 2)."""
    m = np.arange(256).reshape(32, 8).astype(BF16)
    out = np.zeros((32, 8), BF16)
    emulator.run_function(lowered(LDMATRIX.replace("TRANSPOSE", str(transpose).lower())), "k",
                          m, out)
    for lane in range(32):
        for i in range(4):
            for j in range(2):
                row, col = (2 * (lane % 4) + j, lane >> 2) if transpose else (
                    lane >> 2, 2 * (lane % 4) + j)
                assert out[lane, 2 * i + j] == m[8 * i + row, col]


def test_cp_async_lands_at_its_wait():
    """Without the wait the copied rows are not there yet."""
    text = LDMATRIX.replace("TRANSPOSE", "false").replace(
        "    nvgpu.device_async_wait %g {numGroups = 0 : i32}\n", "")
    with pytest.raises(emulator.KernelError, match="where nothing was written"):
        emulator.run_function(lowered(text), "k", np.zeros((32, 8), BF16),
                              np.zeros((32, 8), BF16))


def test_cp_async_then_ldmatrix_without_barrier_races():
    """ldmatrix reads rows other lanes' copies wrote: a barrier must come between."""
    text = LDMATRIX.replace("TRANSPOSE", "false").replace("    gpu.barrier\n", "")
    with pytest.raises(emulator.KernelError, match="race on workgroup"):
        emulator.run_function(lowered(text), "k", np.zeros((32, 8), BF16),
                              np.zeros((32, 8), BF16))
