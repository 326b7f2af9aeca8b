#!/usr/bin/env python3
"""One MPI rank of an expert-parallel GPU layer executed on the CPU.

Started by mpirun (python/tests/test_gpu_layer_emulation.py): each rank runs
`moe-compile --target cuda --ep R --emit=launches`'s entry in
kernel_emulator.py, its kernels emulated and its runtime calls
(`moert_ep_dispatch_into_*`, `moert_ep_combine_into_*`, the all-gather and
packed exchanges) made to the real libmoert on the MPI backend, with a null
stream: the runtime's host-memory mode, so the emulated device buffers travel
as they are. As moec.distributed does for the CPU library, every rank builds
the same weights from the seed, keeps its experts, runs its own tokens and
compares y with the numpy reference for them (moec.reference; with an FP8
dispatch, the rows its experts see quantized as the dispatch delivers them).
Writes --out/rank<r>.json.

  mpirun -np 2 python3 ep_layer_emulation.py --ir layer.mlir --plan plan.json \\
      --tokens 12 --tolerance 2e-2 --out DIR
"""
import argparse
import ctypes
import json
import math
import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "python"))
sys.path.insert(0, str(HERE))
import gemm_decode_emulation as gemm  # noqa: E402
import kernel_emulator as emulator  # noqa: E402
from moec import fp8, reference  # noqa: E402
from moec.distributed import tokens_per_rank  # noqa: E402
from moec.runtime import Runtime  # noqa: E402
from moec.weights import make_inputs  # noqa: E402

# Emulated device memory starts as this byte (ints huge, floats ~3e38): a
# value read before anything wrote it shows in the result.
UNWRITTEN = 0x7F


def descriptor(array):
    """An MLIR memref descriptor viewing `array` (strides in elements)."""
    rank = array.ndim

    class Descriptor(ctypes.Structure):
        _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                    ("offset", ctypes.c_int64), ("sizes", ctypes.c_int64 * rank),
                    ("strides", ctypes.c_int64 * rank)]
    d = Descriptor()
    d.allocated = d.aligned = array.ctypes.data
    d.offset = 0
    dense = [math.prod(array.shape[i + 1:]) for i in range(rank)]  # numpy's of an empty array vary
    for i in range(rank):
        d.sizes[i] = array.shape[i]
        d.strides[i] = dense[i] if array.flags.c_contiguous or array.size == 0 else (
            array.strides[i] // array.itemsize)
    return d


def runtime_calls(lib):
    """op_func_call's externals: the runtime's `_mlir_ciface_` entries. Memref
    operands go as descriptors of the buffers' arrays, then count as written
    whole by the call (what the runtime fills is not told); !llvm.ptr (the
    stream) as null."""
    def call(op, values):
        name = op.body.split("(")[0].strip().lstrip("@")
        if hasattr(lib, "_mlir_ciface_" + name):  # declared with llvm.emit_c_interface
            name = "_mlir_ciface_" + name
        types = [t.strip() for t in op.type.split("->")[0].strip()[1:-1].split(", ")]
        args, keep = [], []
        for value, ty in zip(values, types):
            if isinstance(value, emulator.Buffer):
                keep.append(descriptor(value.array))
                args.append(ctypes.byref(keep[-1]))
            elif ty == "!llvm.ptr":
                args.append(ctypes.c_void_p(None))
            else:
                args.append({"i64": ctypes.c_int64, "i32": ctypes.c_int32,
                             "index": ctypes.c_int64}[ty](value))
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int64 if "->" in op.type else None
        result = fn(*args)
        for value in values:
            if isinstance(value, emulator.Buffer):
                everything = np.indices(value.array.shape).reshape(value.array.ndim, -1)
                value.check_bytes(tuple(everything), True, op)
                if value.init is not None:
                    value.init[...] = True
        return [] if result is None else [result]
    return call


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ir", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--tokens", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", default="uniform")
    parser.add_argument("--tp", type=int, default=1,
                        help="tensor-parallel group size: tp consecutive ranks hold the same tokens")
    parser.add_argument("--tolerance", type=float, required=True)
    parser.add_argument("--expert-rows-quantization", choices=("none", *fp8.SCHEMES),
                        default="none")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    runtime = Runtime("mpi")
    rank, ranks = runtime.rank, runtime.size
    plan = json.loads(Path(args.plan).read_text())
    text = Path(args.ir).read_text()
    group = rank // args.tp
    counts = tokens_per_rank(args.scenario, ranks // args.tp, args.tokens)
    x_all, weights = make_inputs(plan, sum(counts), args.seed)
    start = sum(counts[:group])
    x = x_all[start:start + counts[group]]
    local = plan["experts"] // ranks
    mine = np.arange(rank * local, (rank + 1) * local)
    given = {"x": x, **weights}
    for name in ("w13", "w2", "w13_scale", "w2_scale", "w13_bias", "w2_bias"):
        if name in weights:
            given[name] = np.ascontiguousarray(weights[name][mine])
    given["expert_rank"] = (np.arange(plan["experts"]) // local).astype(np.int32)
    given["phase"] = np.array(0, np.int32)  # by the token count

    tokens = np.array(x.shape[0], np.int64)
    sized = emulator.run_function(text, "moe_layer_workspace_bytes", tokens)
    workspace = np.full(int(np.asarray(sized.results[0]).ravel()[0]), UNWRITTEN, np.uint8)
    # FP8 codes are i8 memrefs in the IR.
    ordered = [given[p["name"]].view(np.int8) if given[p["name"]].dtype == ml_dtypes.float8_e4m3fn else
               given[p["name"]] for p in plan["entry_point"]["parameters"]]
    y = np.zeros(x.shape, x.dtype)
    calls = runtime_calls(runtime.lib)
    externals = {name: calls for name in set(re.findall(r"@(moert_\w+)", text))}
    error, executed = None, {}
    try:
        with gemm.counting_ops() as executed:
            host = emulator.run_function(text, "moe_layer", *ordered, y, workspace, np.array(0),
                                         externals=externals)
        kernels, side = len(host.launches), host.side_launches
    except (emulator.KernelError, NotImplementedError) as e:
        error, kernels, side = f"{type(e).__name__}: {str(e)[:600]}", 0, 0
    quantization = fp8.SCHEMES.get(args.expert_rows_quantization)
    expert_rows = (lambda rows: fp8.fake_quantize(quantization, rows)) if quantization else None
    ref = reference.layer(x, weights, plan, expert_rows)
    got = y.astype(np.float64)
    scale = float(np.abs(ref).max()) if ref.size else 1.0
    max_rel = float(np.abs(got - ref).max() / scale) if ref.size else 0.0
    tensor_cores = ("nvvm.mma.sync", "nvvm.wgmma.mma_async")
    result = {"rank": rank, "tokens": int(x.shape[0]), "kernels": kernels,
              "side_stream_kernels": side, "error": error,
              "max_rel": max_rel, "ran": sorted({name for (_, name), count in executed.items()
                                                 if name in tensor_cores and count}),
              "ok": error is None and bool(np.isfinite(got).all()) and max_rel <= args.tolerance}
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))
    runtime.barrier("emulation.done")
    runtime.finalize()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
