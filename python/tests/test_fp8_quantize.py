"""libmoert's FP8 row quantization (dispatch's pack step) against numpy + ml_dtypes.

The reference is written from the scheme definitions in docs/FP8Dispatch.md: the
scales are computed here in numpy, the E4M3 rounding is ml_dtypes.float8_e4m3fn's.
The FP8 bytes and scale bytes must be bit-identical, the dequantized values equal.
"""
import ctypes

import numpy as np
import pytest

from moec.fp8 import (F8, G128, G32, GROUP, reference_dequantize, reference_quantize,
                      same_floats)
from moec.toolchain import build_dir

SCHEMES = [pytest.param(G128, id="fp8g128"), pytest.param(G32, id="fp8g32ue8m0")]


@pytest.fixture(scope="module")
def lib():
    path = build_dir() / "lib" / "libmoert.so"
    if not path.exists():
        pytest.skip(f"{path} not built")
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    ptr = ctypes.c_void_p
    lib.moert_quantize_row.argtypes = [ctypes.c_int, ptr, ctypes.c_int64, ptr, ptr]
    lib.moert_quantize_row.restype = ctypes.c_int
    lib.moert_dequantize_row.argtypes = [ctypes.c_int, ptr, ptr, ctypes.c_int64, ptr]
    lib.moert_dequantize_row.restype = ctypes.c_int
    lib.moert_last_error.restype = ctypes.c_char_p
    return lib


def scale_bytes(scheme, n):
    return n // 128 * 4 if scheme == G128 else n // 32


def moert_quantize(lib, scheme, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    q = np.zeros(x.size, np.uint8)
    s = np.zeros(scale_bytes(scheme, x.size), np.uint8)
    assert lib.moert_quantize_row(scheme, x.ctypes.data, x.size, q.ctypes.data,
                                  s.ctypes.data) == 0, lib.moert_last_error()
    return q, s


def moert_dequantize(lib, scheme, q, s):
    out = np.zeros(q.size, np.float32)
    assert lib.moert_dequantize_row(scheme, q.ctypes.data, s.ctypes.data, q.size,
                                    out.ctypes.data) == 0, lib.moert_last_error()
    return out


def check_against_reference(lib, scheme, x):
    q, s = moert_quantize(lib, scheme, x)
    rq, rs, scale = reference_quantize(scheme, x)
    mismatch = np.nonzero(q != rq)[0]
    assert mismatch.size == 0, (
        f"codes differ at {mismatch[:8]}: x={np.asarray(x)[mismatch[:8]]} "
        f"moert={q[mismatch[:8]]} reference={rq[mismatch[:8]]}")
    assert np.array_equal(s, rs), "scale bytes differ"
    out = moert_dequantize(lib, scheme, q, s)
    same_floats(out, reference_dequantize(scheme, rq, scale))
    return q, s, out, scale


def random_row(rng, n):
    """Values over many binades; each group of 32 has its own magnitude."""
    mantissa = rng.uniform(-1, 1, n)
    binade = rng.integers(-12, 7, n) + np.repeat(rng.integers(-40, 41, n // 32), 32)
    return np.ldexp(mantissa, binade).astype(np.float32)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("seed", range(8))
def test_random_rows_match_the_reference(lib, scheme, seed):
    x = random_row(np.random.default_rng(seed), 4096)
    _, _, out, scale = check_against_reference(lib, scheme, x)
    # The bound of docs/FP8Dispatch.md: max(2^-4 |x|, 2^-10 scale) + 2^-21 |x|.
    s = np.repeat(scale, GROUP[scheme])
    bound = np.maximum(np.ldexp(np.abs(x), -4), np.ldexp(s, -10)) + np.ldexp(np.abs(x), -21)
    assert np.all(np.abs(out.astype(np.float64) - x) <= bound)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_code_and_every_tie(lib, scheme):
    # With amax 448 both schemes have scale 1, so x / scale is x itself: every
    # E4M3 value and every midpoint between neighbours (ties to even).
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(F8).astype(np.float64)
    positive = np.sort(values[np.isfinite(values) & (values >= 0)])
    midpoints = (positive[:-1] + positive[1:]) / 2
    row = np.concatenate([positive, -positive, midpoints, -midpoints,
                          np.nextafter(midpoints.astype(np.float32), np.float32(0)),
                          np.nextafter(midpoints.astype(np.float32), np.float32(1000))])
    row = row.astype(np.float32)
    group = GROUP[scheme]
    row = np.concatenate([row, np.zeros(-row.size % group, np.float32)])
    row = row.reshape(-1, group)
    row[:, 0] = 448  # every group's amax
    row = row.reshape(-1)
    _, s, _, scale = check_against_reference(lib, scheme, row)
    assert np.all(scale == 1)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_zero_groups(lib, scheme):
    x = np.zeros(256, np.float32)
    x[7] = -0.0
    x[200:] = np.linspace(-3, 3, 56, dtype=np.float32)
    q, s, out, scale = check_against_reference(lib, scheme, x)
    assert scale[0] == 0 if scheme == G128 else s[0] == 0  # byte 0 (2^-127)
    assert q[7] == 0x80 and np.all(np.delete(q[:128], 7) == 0)
    assert not np.any(np.isnan(out)) and np.all(out[:128] == 0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_saturation(lib, scheme):
    x = np.concatenate([
        np.full(128, 2.5, np.float32),
        np.array([np.inf, -np.inf] + [1.0] * 126, np.float32),  # inf beside finite values
        np.array([1e38, -1e38] + [1e30] * 126, np.float32),  # a huge amax
        np.array([np.inf, -np.inf] + [0.0] * 126, np.float32),  # inf alone
    ])
    q, s, out, scale = check_against_reference(lib, scheme, x)
    assert q[128] == 0x7E and q[129] == 0xFE  # inf -> +-448
    assert np.all(np.isfinite(out))
    assert not np.any((q & 0x7F) == 0x7F)  # no NaN code from finite or inf input
    if scheme == G128:
        assert q[256] == 0x7E and q[257] == 0xFE  # the amax lands on +-448
        assert out[128] == 448 * scale[1] and out[129] == -448 * scale[1]
        assert np.all(out[3 * 128:3 * 128 + 2] == 0)  # scale 0: inf comes back as 0


@pytest.mark.parametrize("scheme", SCHEMES)
def test_largest_float32(lib, scheme):
    # Documented limit: for |x| >= 15/16 * 2^128, RNE may round up and the
    # dequantized f32 product overflow to inf (bf16 output would anyway).
    fmax = np.finfo(np.float32).max
    x = np.array([fmax, -fmax] + [1.0] * 126, np.float32)
    q, _, _, _ = check_against_reference(lib, scheme, x)
    assert not np.any((q & 0x7F) == 0x7F)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_nan_does_not_poison_the_group(lib, scheme):
    rng = np.random.default_rng(1)
    clean = rng.uniform(0.5, 2.0, 256).astype(np.float32)
    x = clean.copy()
    x[[3, 40]] = np.nan
    x[5] = -np.nan
    q, s, out, _ = check_against_reference(lib, scheme, x)
    cq, cs = moert_quantize(lib, scheme, np.where(np.isnan(x), np.float32(0.5), clean))
    assert np.array_equal(s, cs)  # NaN does not enter amax
    keep = ~np.isnan(x)
    assert np.array_equal(q[keep], cq[keep])
    assert q[3] == 0x7F and q[40] == 0x7F and q[5] == 0xFF
    assert np.array_equal(np.isnan(out), ~keep)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_tiny_and_subnormal_groups(lib, scheme):
    # amax down to float32 subnormals: the f32 scale underflows to 0 (a zero
    # group) and the UE8M0 exponent clamps at -127.
    rows = [np.full(128, np.float32(v)) * np.linspace(-1, 1, 128, dtype=np.float32)
            for v in [1e-30, 1e-38, 1e-40, 1e-44]]
    check_against_reference(lib, scheme, np.concatenate(rows))


def test_ue8m0_scale_is_the_smallest_power_of_two_that_fits(lib):
    # amax at, just below and just above 448 * 2^k for many k.
    amaxes = []
    for k in range(-130, 120, 7):
        edge = np.float32(np.ldexp(448.0, k))
        amaxes += [edge, np.nextafter(edge, np.float32(0)), np.nextafter(edge, np.float32(np.inf))]
    x = np.concatenate([a * np.linspace(1, -1, 32, dtype=np.float32) for a in amaxes])
    _, s, out, scale = check_against_reference(lib, G32, x)
    amax = np.abs(x.reshape(-1, 32)).max(axis=1).astype(np.float64)
    e = s.astype(np.int64) - 127
    assert np.all(amax <= 448 * np.ldexp(1.0, e))  # nothing overflows
    assert np.all((amax > 224 * np.ldexp(1.0, e)) | (e == -127))  # smallest such power


@pytest.mark.parametrize("scheme, n, error", [
    (G128, 100, "hidden size 100 is not a multiple of the group size 128 of FP8 scheme fp8g128"),
    (G32, 100, "hidden size 100 is not a multiple of the group size 32 of FP8 scheme fp8g32ue8m0"),
    (0, 128, "unknown FP8 scheme 0"),
])
def test_hooks_report_bad_arguments(lib, scheme, n, error):
    x = np.zeros(n, np.float32)
    q = np.zeros(n, np.uint8)
    s = np.zeros(64, np.uint8)
    assert lib.moert_quantize_row(scheme, x.ctypes.data, n, q.ctypes.data, s.ctypes.data) == 1
    assert error in lib.moert_last_error().decode()
    assert lib.moert_dequantize_row(scheme, q.ctypes.data, s.ctypes.data, n, x.ctypes.data) == 1


@pytest.mark.parametrize("hidden, k", [(1024, 3), (1024, 8), (2048, 8), (4096, 8), (7168, 8)])
def test_bytes_per_token_against_bf16(hidden, k):
    # The wire row sizes of docs/FP8Dispatch.md (exact counts are checked by
    # the ctest moert.ep.fp8* runs through the counters): ids int16, weights f32.
    bf16 = 2 * hidden + 6 * k
    for scheme in (G128, G32):
        fp8 = hidden + scale_bytes(scheme, hidden) + 6 * k
        assert fp8 / bf16 <= 0.53


GEMM_READS_CODES = """
func.func @decode(%codes: tensor<256x2xi8>, %scales: tensor<256x1xf32>, %w: tensor<1x1x2xf32>,
                  %re: tensor<256xi32>) -> tensor<256x1xf32> attributes {llvm.emit_c_interface} {
  %y = moe.grouped_matmul %codes, %w, %re scales %scales
    : (tensor<256x2xi8>, tensor<1x1x2xf32>, tensor<256xi32>, tensor<256x1xf32>) -> tensor<256x1xf32>
  return %y : tensor<256x1xf32>
}
"""


def test_grouped_gemm_decodes_every_e4m3_code_like_ml_dtypes(tmp_path):
    """The compiled GEMM's FP8 decode (integer ops, lib/Conversion/MoEToLinalg) against
    ml_dtypes for all 256 codes: row c holds code c and code 0, weights (1, 1)."""
    from moec.memref import CompiledFunction
    from moec.toolchain import compile_mlir
    library = compile_mlir(GEMM_READS_CODES, tmp_path, "decode")
    fn = CompiledFunction(library, "decode", [(2, np.float32)])
    codes = np.zeros((256, 2), np.uint8)
    codes[:, 0] = np.arange(256)
    for scale in (1.0, 2.0 ** -7, 3.0):
        y = fn(codes.view(np.int8), np.full((256, 1), scale, np.float32),
               np.ones((1, 1, 2), np.float32), np.zeros(256, np.int32))[:, 0]
        want = codes[:, 0].view(F8).astype(np.float32) * np.float32(scale)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(y), nan)
        assert np.array_equal(y[~nan], want[~nan]), np.nonzero(y[~nan] != want[~nan])
