"""moe-compile --model --target cuda, and moec's CUDA layers, on a machine
without a GPU: the output directory ships the CUDA library with both
runtimes next to it and the same weights as the CPU output; moec.load reads
it without loading the library (which needs a GPU), and the layers refuse
what they cannot take by name. The layers' numbers are checked on a GPU by
benchmarks/gpu/gpu_models.py (docs/GPU.md)."""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import moec
from moec import cuda as moec_cuda
from moec import safetensors
from moec.toolchain import tool

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _gpu_script(name):
    """benchmarks/gpu/<name>.py as a module (torch, no GPU needed to import)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(name, out, *options):
    run = subprocess.run([tool("moe-compile"), "--model", str(EXAMPLES / name), "-o", str(out),
                          "--dtype", "bf16", *options], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads((out / "manifest.json").read_text())


def _dynamic_section(path):
    return subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("name", ["qwen3-moe-tiny", "deepseek-v3-tiny"])
def test_cuda_output_ships_its_runtimes_and_the_cpu_outputs_weights(name, tmp_path):
    cuda = _compile(name, tmp_path / "cuda", "--target", "cuda")
    cpu = _compile(name, tmp_path / "cpu")
    assert cuda["target"] == "cuda" and cpu["target"] == "cpu"
    for runtime in ("libmoert.so", "libmoert_cuda.so"):
        assert (tmp_path / "cuda" / runtime).is_file(), runtime
    assert not (tmp_path / "cpu" / "libmoert_cuda.so").exists()
    library = _dynamic_section(tmp_path / "cuda" / cuda["library"]["file"])
    assert "[libmoert_cuda.so]" in library and "[$ORIGIN]" in library, library
    assert cuda["layers"] == cpu["layers"]
    got = safetensors.read(tmp_path / "cuda" / cuda["weights"])
    want = safetensors.read(tmp_path / "cpu" / cpu["weights"])
    assert sorted(got) == sorted(want)
    for tensor in want:
        assert got[tensor].dtype == want[tensor].dtype, tensor
        assert np.array_equal(got[tensor].view(np.uint8), want[tensor].view(np.uint8)), tensor


def test_cuda_layers_refuse_what_they_cannot_take(tmp_path):
    _compile("qwen3-moe-tiny", tmp_path / "out", "--target", "cuda")
    model = moec.load(tmp_path / "out")  # does not load the library
    assert "(cuda)" in repr(model)
    layer = model.layers[1]
    assert isinstance(layer, moec_cuda.CudaLayer)
    x = torch.zeros(3, layer.plan["hidden_size"], dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="compiled for CUDA: expected a CUDA tensor, got cpu"):
        layer(x)
    with pytest.raises(ValueError, match="expected a CUDA tensor, got ndarray"):
        layer(np.zeros((3, layer.plan["hidden_size"]), np.float32))
    with pytest.raises(ValueError, match="cannot move its weights to cpu"):
        layer.to("cpu")
    assert isinstance(layer.module(), torch.nn.Module)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="a CUDA library needs a GPU"):
            model.layers[1]._library.get()


def test_a_manifest_with_an_unknown_target_is_refused(tmp_path):
    _compile("qwen3-moe-tiny", tmp_path / "out")
    path = tmp_path / "out" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["target"] = "tpu"
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="target 'tpu', expected 'cpu' or 'cuda'"):
        moec.load(tmp_path / "out")


def test_weights_reach_torch_bit_for_bit(tmp_path):
    """The host weights (moec.safetensors' arrays, bf16 via ml_dtypes) become
    the torch tensors the CUDA layer uploads, with the plan's dtypes."""
    manifest = _compile("deepseek-v3-tiny", tmp_path / "out", "--target", "cuda")
    plan = json.loads((tmp_path / "out" / manifest["library"]["plan"]).read_text())
    arrays = safetensors.read(tmp_path / "out" / manifest["weights"])
    for param in plan["entry_point"]["parameters"]:
        if param["name"] == "x":
            continue
        array = arrays[manifest["layers"][0]["tensors"][param["name"]]]
        tensor = moec_cuda._as_tensor(array).view(moec_cuda.TORCH_DTYPES[param["dtype"]])
        assert list(tensor.shape) == list(array.shape), param
        assert torch.equal(tensor.float(), torch.from_numpy(array.astype(np.float32))), param


def test_model_outputs_are_shared_libraries_only(tmp_path):
    run = subprocess.run([tool("moe-compile"), "--model", str(EXAMPLES / "qwen3-moe-tiny"),
                          "-o", str(tmp_path / "out"), "--target", "cuda", "--emit=lowered"],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert "--model compiles a shared library (no --emit)" in run.stderr
    assert not (tmp_path / "out").exists()


def test_the_gpu_model_checks_inputs_hold_on_the_cpu(tmp_path):
    """What benchmarks/gpu/gpu_models.py checks the CUDA layers against, made
    here by model_references.py from transformers' own blocks, is what the
    CPU layers of the same checkpoint compute (bf16, 2e-2); and its
    torch-only safetensors reader gives moec's tensors bit for bit."""
    name = "deepseek-v3-tiny"
    manifest = _compile(name, tmp_path / "cuda", "--target", "cuda")
    _gpu_script("model_references").main(str(EXAMPLES / name), str(tmp_path / "cuda"))
    reference = torch.load(tmp_path / "cuda" / "reference.pt")
    assert sorted(reference) == [entry["index"] for entry in manifest["layers"]]
    _compile(name, tmp_path / "cpu")
    model = moec.load(tmp_path / "cpu")
    for index, cases in reference.items():
        for case in cases:
            y = model.layers[index](case["x"]).float()
            error = ((y - case["y"]).abs().max() / case["y"].abs().max()).item()
            assert error <= 2e-2, (index, case["x"].shape[0], error)
    tensors = _gpu_script("gpu_models").read_safetensors(tmp_path / "cuda" / manifest["weights"])
    arrays = safetensors.read(tmp_path / "cuda" / manifest["weights"])
    assert sorted(tensors) == sorted(arrays)
    for name_, array in arrays.items():
        assert torch.equal(moec_cuda._as_tensor(array).view(tensors[name_].dtype),
                           tensors[name_]), name_
