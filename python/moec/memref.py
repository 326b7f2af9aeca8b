"""Calls an MLIR `_mlir_ciface_` entry point with numpy arrays as memref descriptors."""
import ctypes
import functools
import os
import weakref

import ml_dtypes
import numpy as np

_CTYPES = {
    np.dtype(np.float32): ctypes.c_float,
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.int8): ctypes.c_int8,
    np.dtype(ml_dtypes.bfloat16): ctypes.c_uint16,
    np.dtype(ml_dtypes.float8_e4m3fn): ctypes.c_int8,
}
_runtime = None


def _free(pointer):
    """Buffers from compiled layers come from the runtime's measured heap."""
    global _runtime
    if _runtime is None:
        from .toolchain import build_dir
        _runtime = ctypes.CDLL(str(build_dir() / "lib" / "libmoert.so"), mode=ctypes.RTLD_GLOBAL)
        _runtime.moert_free.argtypes = [ctypes.c_void_p]
    _runtime.moert_free(pointer)


def descriptor_type(rank, dtype):
    """The C struct MLIR uses for a ranked memref of `rank` and `dtype`."""
    return _descriptor_type(rank, np.dtype(dtype))


@functools.lru_cache(maxsize=None)
def _descriptor_type(rank, dtype):
    # One class per (rank, dtype): making a ctypes class costs tens of
    # microseconds, a tenth of a one-token layer call.
    elem = _CTYPES[dtype]

    class Descriptor(ctypes.Structure):
        _fields_ = [
            ("allocated", ctypes.POINTER(elem)),
            ("aligned", ctypes.POINTER(elem)),
            ("offset", ctypes.c_int64),
            ("sizes", ctypes.c_int64 * rank),
            ("strides", ctypes.c_int64 * rank),
        ]

    return Descriptor


def to_descriptor(array):
    """A descriptor viewing a C-contiguous numpy array (which must outlive it)."""
    assert array.flags["C_CONTIGUOUS"], "pass C-contiguous arrays"
    desc = descriptor_type(array.ndim, array.dtype)()
    ptr = array.ctypes.data_as(ctypes.POINTER(_CTYPES[array.dtype]))
    desc.allocated = desc.aligned = ptr
    desc.offset = 0
    for i, (size, stride) in enumerate(zip(array.shape, array.strides)):
        desc.sizes[i] = size
        desc.strides[i] = stride // array.itemsize
    return desc


def take_result(desc, dtype, free=None):
    """A memref returned by compiled code as a numpy array over the same
    memory, no copy: the buffer is freed (with `free`, else libmoert's
    moert_free from the build) when the array and every view of it are gone."""
    free = free or _free
    rank = len(desc.sizes)
    shape = tuple(desc.sizes[i] for i in range(rank))
    strides = tuple(desc.strides[i] * np.dtype(dtype).itemsize for i in range(rank))
    count = int(np.prod(shape)) if shape else 1
    base = ctypes.cast(desc.aligned, ctypes.c_void_p).value
    allocated = ctypes.cast(desc.allocated, ctypes.c_void_p)
    if count == 0:
        free(allocated)
        return np.zeros(shape, dtype)
    span = (sum((s - 1) * st for s, st in zip(shape, strides)) + np.dtype(dtype).itemsize)
    raw = (ctypes.c_char * span).from_address(base + desc.offset * np.dtype(dtype).itemsize)
    # The array (and torch.from_numpy of it) holds `raw` through its base.
    weakref.finalize(raw, free, allocated)
    return np.ndarray(shape, dtype, buffer=raw, strides=strides)


class CompiledFunction:
    """An entry point `_mlir_ciface_<name>` of a shared library from moe-compile."""

    def __init__(self, library_path, name, results):
        """`results` lists (rank, dtype) of each returned memref."""
        # A path, never a name for the loader to search for ("layer.so").
        self._lib = ctypes.CDLL(os.path.abspath(library_path))
        self._fn = getattr(self._lib, "_mlir_ciface_" + name)
        # The runtime the library itself links (found through its RUNPATH,
        # e.g. next to it in a moe-compile --model directory) frees its results.
        self._free = self._lib.moert_free
        self._free.argtypes = [ctypes.c_void_p]
        self._free.restype = None
        self._fn.restype = None
        self._results = results
        types = [descriptor_type(rank, dtype) for rank, dtype in results]
        self._out_type = types[0] if len(types) == 1 else type(
            "Results", (ctypes.Structure,), {"_fields_": [(f"r{i}", t) for i, t in enumerate(types)]})

    def __call__(self, *args):
        """Arrays travel as memref descriptors, Python ints as i32 scalars."""
        arrays = [a if isinstance(a, int) else np.ascontiguousarray(a) for a in args]
        descs = [ctypes.c_int32(a) if isinstance(a, int) else to_descriptor(a) for a in arrays]
        out = self._out_type()
        self._fn(ctypes.byref(out), *[d if isinstance(d, ctypes.c_int32) else ctypes.byref(d)
                                      for d in descs])
        if len(self._results) == 1:
            return take_result(out, self._results[0][1], self._free)
        return tuple(take_result(getattr(out, f"r{i}"), dtype, self._free)
                     for i, (_, dtype) in enumerate(self._results))
