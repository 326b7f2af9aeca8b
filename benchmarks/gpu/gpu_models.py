"""Checks models compiled by `moe-compile --model --target cuda`
(build_models.sh) through the moec package's CUDA layers on a GPU.

For each model directory: the weights are read from its safetensors file
with torch alone (the GPU machine may lack numpy's ml_dtypes and the
safetensors package), each MoE layer becomes a `moec.cuda.CudaLayer` (the
class `moec.load` builds), and its output for the saved inputs is compared
with transformers' own MoE block (reference.pt, model_references.py):
within 2e-2 of max |y| (bf16). The same call through the layer's
torch.nn.Module (the moec::moe_layer custom op) must give the same bits.
Prints a JSON row per layer and token count; exits 1 if any is wrong.
"""
import argparse
import importlib.util
import json
import struct
import sys
from pathlib import Path

import torch

TOLERANCE = 2e-2
SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F32": torch.float32, "I32": torch.int32,
                      "F8_E4M3": torch.float8_e4m3fn}


def moec_cuda():
    """python/moec/cuda.py on its own (the package's numpy side may not
    import on the GPU machine)."""
    path = Path(__file__).resolve().parents[2] / "python" / "moec" / "cuda.py"
    spec = importlib.util.spec_from_file_location("moec_cuda", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_safetensors(path):
    data = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = memoryview(data)[8 + length:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=torch.uint8)
        tensors[name] = flat.view(dtype).reshape(info["shape"])
    return tensors


def check_model(directory, cuda, rows):
    manifest = json.loads((directory / "manifest.json").read_text())
    plan = json.loads((directory / manifest["library"]["plan"]).read_text())
    library = cuda.GpuLayer(directory / manifest["library"]["file"], plan)
    tensors = read_safetensors(directory / manifest["weights"])
    reference = torch.load(directory / "reference.pt")
    for entry in manifest["layers"]:
        weights = {param: tensors[name] for param, name in entry["tensors"].items()}
        layer = cuda.CudaLayer(entry["index"], library, plan, weights)
        for case in reference[entry["index"]]:
            x, want = case["x"].cuda(), case["y"].cuda().double()
            row = {"model": directory.name, "layer": entry["index"], "tokens": x.shape[0]}
            try:
                y = layer(x)
                module_y = layer.module()(x)
                torch.cuda.synchronize()
                scale = want.abs().max().item() or 1.0
                row["error"] = ((y.double() - want).abs().max() / scale).item()
                row["module_equal"] = bool(torch.equal(y, module_y))
                row["ok"] = row["error"] <= TOLERANCE and row["module_equal"]
            except Exception as e:  # a row per failure, then the next case
                row["ok"], row["exception"] = False, f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
            print(json.dumps(row), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=Path("benchmarks/gpu/models"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cuda = moec_cuda()
    rows = []
    for directory in sorted(p for p in args.models.iterdir() if (p / "manifest.json").is_file()):
        check_model(directory, cuda, rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if not r["ok"]]
    print(f"# {len(rows) - len(bad)} of {len(rows)} model layer x T correct "
          f"({torch.cuda.get_device_name()})")
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
