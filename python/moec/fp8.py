"""FP8 E4M3 row quantization as the dispatch defines it (docs/FP8Dispatch.md),
written from the scheme definitions in numpy, with ml_dtypes' E4M3 rounding:
the independent reference for the runtime's and the compiled quantization."""
import ml_dtypes
import numpy as np

F8 = ml_dtypes.float8_e4m3fn
G128, G32 = 1, 2  # the plan's quantization codes (fp8g128, fp8g32ue8m0)
GROUP = {G128: 128, G32: 32}
SCHEMES = {"fp8-e4m3-g128": G128, "fp8-e4m3-g32-ue8m0": G32}


def reference_scales(scheme, groups):
    """Per group: (scale as float32, the scale's bytes on the wire)."""
    finite = np.isfinite(groups)
    amax = np.where(finite, np.abs(groups), np.float32(0)).max(axis=1).astype(np.float32)
    if scheme == G128:
        scale = (amax / np.float32(448)).astype(np.float32)
        return scale, scale.astype("<f4").view(np.uint8)
    # UE8M0: the smallest 2^e with amax <= 448 * 2^e. In float64, amax / 448
    # is never close enough to a power of two to round across it.
    with np.errstate(divide="ignore"):
        e = np.ceil(np.log2(amax.astype(np.float64) / 448.0))
    e = np.where(amax == 0, -127, e)  # an all-zero group: byte 0
    e = np.clip(e, -127, 127).astype(np.int64)
    return np.ldexp(np.float32(1), e).astype(np.float32), (e + 127).astype(np.uint8)


def reference_quantize(scheme, x):
    """(E4M3 bytes, scale bytes on the wire, scales as float32) of the values x."""
    groups = np.asarray(x, np.float32).reshape(-1, GROUP[scheme])
    scale, wire = reference_scales(scheme, groups)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = groups / scale[:, None]
    zero_scale = (scale == 0)[:, None]
    v = np.where(zero_scale & np.isfinite(groups), np.copysign(np.float32(0), groups), v)
    v = np.where(zero_scale & np.isinf(groups), groups, v)
    v = np.where(np.isnan(groups), groups, v)  # NaN stays NaN, sign and all
    v = np.clip(v, -448, 448)  # saturate; inf -> +-448
    q = v.astype(np.float32).astype(F8).view(np.uint8).reshape(-1)
    return q, wire.reshape(-1), scale


def reference_dequantize(scheme, q, scale):
    group = q.size // scale.size if scale.size else 0
    values = q.view(F8).astype(np.float32).reshape(scale.size, group)
    with np.errstate(over="ignore"):
        return (values * scale[:, None]).astype(np.float32).reshape(-1)


def fake_quantize(scheme, rows):
    """The float32 values rows[N, H] arrive as after an FP8 dispatch."""
    rows = np.asarray(rows, np.float32)
    q, _, scale = reference_quantize(scheme, rows)
    return reference_dequantize(scheme, q, scale).reshape(rows.shape)


def same_floats(a, b):
    """Bit-identical, except that any NaN matches any NaN of the same sign."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a)
    assert np.array_equal(nan, np.isnan(b))
    assert np.array_equal(np.signbit(a[nan]), np.signbit(b[nan]))
    assert np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32))
