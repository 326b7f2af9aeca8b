"""Reads safetensors files as numpy arrays mapped from the file (bf16 via ml_dtypes)."""
import json
import struct

import ml_dtypes
import numpy as np

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
           "BF16": ml_dtypes.bfloat16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
           "F8_E4M3": ml_dtypes.float8_e4m3fn}


def read(path):
    """{name: read-only array} of a safetensors file; raises ValueError naming
    the file (and tensor) when the header and the file disagree."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    if data.size < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (length,) = struct.unpack("<Q", bytes(data[:8]))
    if length > data.size - 8:
        raise ValueError(f"{path}: header length {length} does not fit in {data.size} bytes")
    header = json.loads(bytes(data[8:8 + length]))
    body = data[8 + length:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name!r}: unsupported dtype {t['dtype']}")
        dtype = np.dtype(_DTYPES[t["dtype"]])
        begin, end = t["data_offsets"]
        count = int(np.prod(t["shape"], dtype=np.int64))
        if not 0 <= begin <= end <= body.size or end - begin != count * dtype.itemsize:
            raise ValueError(f"{path}: tensor {name!r}: data_offsets {t['data_offsets']} "
                             f"do not hold {t['shape']} {t['dtype']}")
        out[name] = body[begin:end].view(dtype).reshape(t["shape"])
    return out
