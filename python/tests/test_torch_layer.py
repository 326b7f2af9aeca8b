"""Compiled layers on torch tensors: inside a transformers model's forward
(through the torch.library custom op), bf16 tensors, `out=`, and errors that
name the argument."""
import subprocess

import numpy as np
import pytest
import torch

import transformers
from test_hf_checkpoints import _checkpoint, _compile_ok

import moec
from moec.toolchain import tool


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A tiny Qwen3-MoE checkpoint (layer 0 dense), compiled in f32 and bf16."""
    tmp = tmp_path_factory.mktemp("torch")
    blocks, _ = _checkpoint("qwen3_moe", tmp / "hf")
    f32 = _compile_ok(tmp / "hf", tmp / "f32")
    subprocess.run([tool("moe-compile"), "--model", str(tmp / "hf"), "-o", str(tmp / "bf16"),
                    "--dtype", "bf16"], check=True, capture_output=True)
    return tmp / "hf", blocks, f32, moec.load(tmp / "bf16")


def test_model_forward_with_compiled_moe_blocks(compiled):
    """The transformers model with its MoE blocks replaced by compiled modules
    gives the same logits as the original."""
    hf_dir, _, model, _ = compiled
    original = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    patched = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    for index, layer in model.layers.items():
        patched.model.layers[index].mlp = layer.module()
    ids = torch.tensor([[1, 5, 9, 2, 33, 17, 60, 4, 8]])
    with torch.inference_mode():
        want = original(ids).logits
        got = patched(ids).logits
    error = float((got - want).abs().max() / want.abs().max())
    assert error <= 1e-5, error
    # The replacement really ran: without MoE layer 1 the logits differ.
    broken = patched.model.layers[1].mlp
    patched.model.layers[1].mlp = torch.nn.Identity()
    with torch.inference_mode():
        assert float((patched(ids).logits - want).abs().max()) > 1e-3
    patched.model.layers[1].mlp = broken


def test_custom_op_passes_torch_opcheck(compiled):
    _, _, model, _ = compiled
    from moec import torch_ops
    handle = torch_ops.register(model.layers[1])
    x = torch.randn(6, 32)
    torch.library.opcheck(torch.ops.moec.moe_layer.default, (x, handle),
                          test_utils=("test_schema", "test_faketensor"))


def test_bf16_tensors_and_out(compiled):
    _, blocks, _, bf16 = compiled
    x = torch.randn(11, 32, generator=torch.Generator().manual_seed(3))
    xb = x.to(torch.bfloat16)
    y = bf16.layers[1](xb)
    assert y.dtype == torch.bfloat16 and y.shape == (11, 32)
    with torch.inference_mode():
        ref = blocks[1](xb.float()[None])[0].reshape(11, 32)
    error = float((y.float() - ref).abs().max() / ref.abs().max())
    assert error <= 2e-2, error
    out = torch.empty(11, 32, dtype=torch.bfloat16)
    assert bf16.layers[1](xb, out=out) is out
    assert torch.equal(out, y)


def test_wrong_tensors_name_the_argument(compiled):
    _, _, model, bf16 = compiled
    layer = model.layers[1]
    with pytest.raises(ValueError, match=r"x: expected torch.float32, got torch.bfloat16"):
        layer(torch.zeros(3, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"x: expected a contiguous tensor"):
        layer(torch.zeros(32, 3).t())
    with pytest.raises(ValueError, match=r"x: expected a CPU tensor"):
        layer(torch.zeros(3, 32, device="meta"))
    with pytest.raises(ValueError, match=r"x: expected shape \[T, 32\], got \[3, 31\]"):
        layer(torch.zeros(3, 31))
    with pytest.raises(ValueError, match=r"out: expected a torch.float32 tensor of shape \[3, 32\]"):
        layer(torch.zeros(3, 32), out=torch.zeros(3, 31))
    with pytest.raises(ValueError, match=r"x: expected dtype bf16"):
        bf16.layers[1](np.zeros((3, 32), np.float32))
    with pytest.raises(ValueError, match=r"hidden_states: expected shape \[\.\.\., 32\], "
                                         r"got \[2, 3, 31\]"):
        layer.module()(torch.zeros(2, 3, 31))


def test_torch_imports_after_a_compiled_layer_ran(compiled, tmp_path):
    """A process that runs a compiled layer first and imports torch after
    (moec used for numpy, then a model) must work: the CPU runtime loads no
    NCCL or cudart of its own, which would stand in for PyTorch's and make
    `import torch` fail (it did: undefined symbol ncclCommResume)."""
    import sys
    hf_dir = compiled[0]
    out = hf_dir.parent / "f32"  # the fixture's f32 output directory
    script = ("import sys, numpy as np, moec\n"
              "m = moec.load(sys.argv[1])\n"
              "x = np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32)\n"
              "y = m.layers[1](x)\n"
              "import torch\n"
              "t = m.layers[1](torch.from_numpy(x))\n"
              "assert float(abs(t.numpy() - y).max()) == 0.0\n"
              "print('ok')\n")
    import os
    from pathlib import Path
    env = dict(os.environ, PYTHONPATH=str(Path(moec.__file__).parents[1]))
    run = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True,
                         text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
