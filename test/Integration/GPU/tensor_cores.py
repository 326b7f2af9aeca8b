"""The tensor cores' arithmetic and operand layouts, as the PTX ISA describes
them, for kernel_emulator.py: mma.sync m16n8k16 fragments, wgmma shared
memory descriptors (K-major, 128-byte swizzle) and accumulator fragments,
E4M3 conversions. Pure functions on numpy arrays; no IR here."""
import sys

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E4M3_MAX = 448.0


def _mma_m16n8k16_layout():
    """Per lane and register of mma.m16n8k16 (.f16/.bf16 multiplicands, f32
    accumulators), as the PTX ISA's "Matrix Fragments for mma.m16n8k16 with
    floating point type" gives them, with groupID = laneid >> 2 and
    threadID_in_group = laneid % 4 (g, t): A's elements a0..a7 (a 32-bit
    register holds two, the lower-numbered in its low 16 bits) lie at row g
    for a0, a1, a4, a5, else g + 8, column 2t + (i & 1), + 8 for i >= 4; B's
    b0..b3 at row (k) 2t + (i & 1), + 8 for i >= 2, column g; C's and D's
    c0..c3 at row g for i < 2, else g + 8, column 2t + (i & 1).
    Returns (A rows, A columns) [lane, register, half], (B rows, B columns)
    [lane, register, half], (C rows, C columns) [lane, element]."""
    g, t = np.arange(32) >> 2, np.arange(32) % 4
    i = np.arange(8)[None, :]  # A's element number
    a_row = np.where((i < 2) | ((i >= 4) & (i < 6)), g[:, None], g[:, None] + 8)
    a_col = 2 * t[:, None] + (i & 1) + 8 * (i >= 4)
    i = np.arange(4)[None, :]
    b_row = 2 * t[:, None] + (i & 1) + 8 * (i >= 2)
    b_col = np.broadcast_to(g[:, None], b_row.shape)
    c_row = np.where(i < 2, g[:, None], g[:, None] + 8)
    c_col = 2 * t[:, None] + (i & 1)
    layout = ((a_row.reshape(32, 4, 2), a_col.reshape(32, 4, 2)),
              (b_row.reshape(32, 2, 2), b_col.reshape(32, 2, 2)), (c_row, c_col))
    for (r, c), shape in zip(layout, ((16, 16), (16, 8), (16, 8))):  # each element once
        assert np.bincount(np.ravel_multi_index((r.ravel(), c.ravel()), shape)).tolist() == [1] * (
            shape[0] * shape[1])
    return layout


MMA_M16N8K16 = _mma_m16n8k16_layout()


def mma_m16n8k16(a, b, c):
    """D of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for a stack of
    warps: a [warps, 32, 4] i32 (bf16 pairs), b [warps, 32, 2] i32, c [warps,
    32, 4] f32 -> d [warps, 32, 4] f32. The sum in float64, rounded once."""
    (ar, ac), (br, bc), (cr, cc) = MMA_M16N8K16
    assert sys.byteorder == "little"  # the low half of an i32 is bf16 element 0
    warps = a.shape[0]
    pairs = lambda r: np.ascontiguousarray(r.astype(np.int32)).view(BF16).reshape(
        r.shape + (2,)).astype(np.float64)
    am, bm, cm = (np.zeros((warps, 16, n)) for n in (16, 8, 8))
    am[:, ar, ac], bm[:, br, bc], cm[:, cr, cc] = pairs(a), pairs(b), c.astype(np.float64)
    d = (np.matmul(am, bm) + cm).astype(np.float32)
    return d[:, cr, cc]


# --- wgmma ---------------------------------------------------------------------

SWIZZLE_128B = 1  # the descriptor's bits 62-63


def decode_descriptor(desc):
    """The fields of a wgmma matrix descriptor (PTX ISA, "Matrix Descriptor
    Format"): start address, leading and stride byte offsets (bits 0-13,
    16-29, 32-45, each in units of 16 bytes), the base offset (49-51) and the
    swizzle mode (62-63). Returns (start, leading, stride, base, swizzle)."""
    d = int(np.uint64(np.int64(desc)))
    field = lambda lo, bits: (d >> lo) & ((1 << bits) - 1)
    return field(0, 14) << 4, field(16, 14) << 4, field(32, 14) << 4, field(49, 3), field(62, 2)


def kmajor_swizzled_addresses(start, stride, rows, k_bytes):
    """The shared memory byte address of each (row, byte of depth) of a
    K-major operand with 128-byte swizzle: a row's depth is contiguous, 8
    rows 128 bytes apart make a core group, groups `stride` apart; then the
    swizzle exchanges address bits 4-6 with bits 4-6 XOR bits 7-9 (the
    16-byte chunk within a 128-byte row by the row's place in a 1024-byte
    pattern). [rows, k_bytes] int64."""
    r = np.arange(rows)[:, None]
    plain = start + (r // 8) * stride + (r % 8) * 128 + np.arange(k_bytes)[None, :]
    return plain ^ (((plain >> 7) & 7) << 4)


def wgmma_accumulator_layout(n):
    """Per thread of a warpgroup (warp w, lane l, g = l >> 2, t = l % 4) and
    accumulator register i of wgmma m64nNk* with f32 D (the PTX ISA's
    "Register Fragment Layout for accumulator matrix D"): row 16 w + g, + 8
    for i % 4 >= 2, column 8 (i // 4) + 2 t + (i & 1). ([128, n / 2] rows,
    columns)."""
    thread = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    w, lane = thread // 32, thread % 32
    row = 16 * w + (lane >> 2) + 8 * ((i % 4) >= 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + (i & 1)
    assert np.bincount((row * n + col).ravel()).tolist() == [1] * (64 * n)
    return row, col


def wgmma(a, b, c):
    """D = A (64 x K) * B (N x K)^T [+ C] for one warpgroup: a and b the
    operands' values (float64), c the accumulators [128, N / 2] f32 or None
    (scale-d 0). The products (exact in float64 for bf16 and E4M3) and C
    summed in float64 and rounded once to f32: the ISA leaves the order and
    the internal precision of the accumulation unspecified (Hopper's E4M3
    products are summed with fewer bits; a kernel must not depend on more)."""
    n = b.shape[0]
    row, col = wgmma_accumulator_layout(n)
    d = a @ b.T
    if c is not None:
        d[row, col] += c.astype(np.float64)
    return d[row, col].astype(np.float32)


def e4m3_satfinite(x):
    """cvt.rn.satfinite.e4m3x2.f32 for one value each: round to nearest even,
    finite values beyond the largest (448) saturate to it, NaN stays NaN.
    The E4M3 codes (uint8)."""
    x = np.asarray(x, np.float32)
    clipped = np.where(np.isnan(x), x, np.clip(x, -E4M3_MAX, E4M3_MAX))
    return clipped.astype(E4M3).view(np.uint8)
