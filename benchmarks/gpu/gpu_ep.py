"""Checks expert-parallel CUDA layers on MPI ranks, sharing one GPU or not.

A one-GPU machine cannot host two NCCL ranks, so there the ranks run the MPI
backend: each layer's dispatch and combine (`moert_ep_{dispatch,combine}_into_*`)
copy the device buffers to the host on the layer's stream, exchange them
over MPI and copy the results back (docs/GPU.md, "Across ranks"). With a GPU
per rank (`--backend auto`, the default, or `nccl`) rank r runs on GPU r of
its host and the runtime's nccl backend moves the device buffers.

Launched by run_gpu_ep.sh under mpirun. Every rank draws the same weights of
all E experts (seed 0) and its own tokens (a seed per rank, a different count
per rank, rank 0 empty in one case), passes its own E/ep experts to the
library with `expert_rank[e] = e // (E/ep)`, and compares its output with the
float64 reference of gpu_layers.py over all experts. Each rank prints its
rows; rank 0 prints the summary line.
"""
import argparse
import ctypes
import json
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import statistics  # noqa: E402

from gpu_layers import Descriptor, GpuLayer, make_inputs, reference  # noqa: E402

TOLERANCE = {"f32": 1e-4, "bf16": 2e-2}
# With an FP8 dispatch, as python/tests/test_tp_and_fp8.py (docs/FP8Dispatch.md).
FP8_LAYER_TOLERANCE = 0.1


EXPERT_PARAMS = ("w13", "w2", "w13_scale", "w2_scale", "w13_bias", "w2_bias")


def full_plan(plan, ep):
    """The plan with every expert's weights (what the reference multiplies)
    and without the i32 maps and phase, which check() sets."""
    full = json.loads(json.dumps(plan))
    params = full["entry_point"]["parameters"]
    params[:] = [q for q in params if q["dtype"] != "i32"]
    for param in params:
        if param["name"] in EXPERT_PARAMS:
            param["shape"][0] *= ep
    return full


def all_ranks_ok(moert, ok):
    """Whether every rank's `ok` holds (a host all-reduce): the ranks then
    make the same layer calls, each a collective, or none."""
    flag = ctypes.c_int64(0 if ok else 1)
    if moert.moert_allreduce_i64(b"gpu_ep.ready", ctypes.byref(flag), 1, 1) != 0:
        raise RuntimeError(moert.moert_last_error().decode())
    return flag.value == 0


def token_counts(base, ranks):
    """Uneven counts; base 0 leaves rank 0 empty and gives the others 5."""
    return [0] + [5] * (ranks - 1) if base == 0 else [base + r for r in range(ranks)]


def median_ms(call, runs=10):
    """Median CUDA-event time of `runs` calls after one warm-up; a fixed
    count, since every call is a collective that all ranks must make."""
    call()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def check(entry, root, rank, ranks, moert, results):
    plan = json.loads((root / entry["plan"]).read_text())
    layer = GpuLayer(root / entry["library"], plan)
    ep = plan["layout"]["ep"]
    assert ep == ranks, f"{entry['name']} is for {ep} ranks, mpirun gave {ranks}"
    experts, local = plan["experts"], plan["layout"]["local_experts"]
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[plan["element_type"]]
    hidden = plan["hidden_size"]
    fp8 = plan["wire_bytes_per_token"]["quantization"] != "none"
    tolerance = FP8_LAYER_TOLERANCE if fp8 else TOLERANCE[plan["element_type"]]
    # The ranks of a tensor-parallel group (tp consecutive ones) hold the
    # same tokens.
    tp = plan.get("tensor_parallel", {}).get("tp", 1)
    group = rank // tp
    for base in entry["tokens"]:
        tokens = token_counts(base, ranks // tp)[group]
        row = {"layer": entry["name"], "rank": rank, "tokens": tokens}
        results.append(row)
        args = None
        try:  # this rank's inputs
            p = make_inputs(full_plan(plan, ep), 1, torch.Generator(device="cuda").manual_seed(0))
            p["x"] = torch.randn(tokens, hidden, device="cuda", dtype=dtype,
                                 generator=torch.Generator(device="cuda").manual_seed(1000 + group))
            mine = slice(rank * local, (rank + 1) * local)
            p_local = {n: (v[mine] if n in EXPERT_PARAMS else v) for n, v in p.items()}
            p_local["expert_rank"] = (torch.arange(experts, device="cuda") // local).to(torch.int32)
            params = [q["name"] for q in plan["entry_point"]["parameters"] if q["name"] != "phase"]
            out = torch.full((tokens, hidden), float("nan"), dtype=dtype, device="cuda")
            workspace = torch.empty(max(layer.workspace_bytes(tokens), 1), dtype=torch.uint8,
                                    device="cuda")
            descs = [Descriptor.of(p_local[n]) for n in params] + [Descriptor.of(out),
                                                                    Descriptor.of(workspace)]
            args = [ctypes.byref(d) for d in descs]
            if "phase_argument" in plan["entry_point"]:  # 0: by the agreed token count
                args.insert(len(params), ctypes.c_int32(0))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        row["ok"] = False
        if not all_ranks_ok(moert, args is not None):
            row.setdefault("error", "another rank could not set up its inputs")
            print(json.dumps(row), flush=True)
            continue
        # The same calls on every rank: one, then 10 timed.
        torch.cuda.synchronize()
        layer.call(args)
        torch.cuda.synchronize()
        row["ms"] = median_ms(lambda: layer.call(args))
        try:  # this rank's check
            ref, ids, margin = reference(p["x"], p, plan)
            scale = (ref.abs().max().item() if tokens else 0.0) or 1.0
            errors = (out.double() - ref).abs().amax(-1) / scale if tokens else torch.zeros(0)
            tie = margin < 1e-5 if tokens else torch.zeros(0, dtype=torch.bool)
            row["near_tie_tokens"] = int(tie.sum())
            row["max_abs_error_rel"] = errors[~tie].max().item() if (~tie).any() else 0.0
            row["ok"] = bool(math.isfinite(row["max_abs_error_rel"]) and
                             row["max_abs_error_rel"] <= tolerance)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        print(json.dumps(row), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=Path, default=Path("benchmarks/gpu/layers"))
    parser.add_argument("--json", type=Path, help="write this rank's rows to <json>.rank<r>")
    parser.add_argument("--backend", choices=("auto", "mpi", "nccl"), default="auto",
                        help="auto: nccl where each rank of the host has a GPU of its own")
    args = parser.parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    ranks = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    local_rank = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", str(rank)))
    local_ranks = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", str(ranks)))
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.device_count() >= local_ranks > 1 else "mpi"
    if backend == "nccl":  # the device the runtime's NCCL communicator picks
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    print(f"rank {rank}: backend {backend}, GPU {torch.cuda.current_device()} of "
          f"{torch.cuda.device_count()}", flush=True)
    moert = ctypes.CDLL("libmoert.so", mode=ctypes.RTLD_GLOBAL)
    moert.moert_last_error.restype = ctypes.c_char_p
    moert.moert_allreduce_i64.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64),
                                          ctypes.c_int64, ctypes.c_int]
    if moert.moert_init(backend.encode(), ctypes.c_int64(60000)) != 0:
        print(f"rank {rank}: moert_init: {moert.moert_last_error().decode()}", flush=True)
        return 1
    manifest = json.loads((args.layers / "manifest.json").read_text())
    results = []
    for entry in manifest["layers"]:
        if entry.get("ep", 1) == ranks:
            check(entry, args.layers, rank, ranks, moert, results)
    for row in results:
        row["backend"] = backend
    if args.json:
        Path(f"{args.json}.rank{rank}").write_text(json.dumps(results, indent=1))
    bad = [r for r in results if not r.get("ok")]
    print(f"# rank {rank}: {len(results) - len(bad)} of {len(results)} correct", flush=True)
    moert.moert_finalize()
    return 1 if bad or not results else 0


if __name__ == "__main__":
    sys.exit(main())
