"""Inputs and transformers' outputs for a model compiled by `moe-compile
--model` (build_models.sh): for each MoE layer of the manifest, seeded
tokens x [T, H] (T = 1, 7, 64, 300; bf16 values) and y = the checkpoint's own
MoE block (transformers, float32 on the CPU) of x, saved as
<out>/reference.pt for gpu_models.py."""
import json
import sys
from pathlib import Path

import torch
import transformers

TOKENS = (1, 7, 64, 300)


def decoder_layers(model):
    inner = model.model
    return inner.language_model.layers if hasattr(inner, "language_model") else inner.layers


def main(checkpoint, out):
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint,
                                                              dtype=torch.float32).eval()
    layers = decoder_layers(model)
    hidden = model.config.hidden_size
    reference = {}
    for entry in manifest["layers"]:
        index = entry["index"]
        block = layers[index].mlp
        cases = []
        for tokens in TOKENS:
            generator = torch.Generator().manual_seed(1000 * index + tokens)
            x = torch.randn(tokens, hidden, generator=generator).to(torch.bfloat16)
            with torch.inference_mode():
                y = block(x.float()[None])
            y = (y[0] if isinstance(y, tuple) else y).reshape(tokens, hidden)
            cases.append({"x": x, "y": y.float()})
        reference[index] = cases
    torch.save(reference, Path(out) / "reference.pt")
    print(f"{out}: references of {len(reference)} MoE layers (transformers "
          f"{transformers.__version__})")


if __name__ == "__main__":
    main(*sys.argv[1:3])
