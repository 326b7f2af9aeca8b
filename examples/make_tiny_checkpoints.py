#!/usr/bin/env python3
"""Writes the tiny HuggingFace checkpoints of examples/ (run once; the output
is committed): for each example's config.json, a model that transformers
builds from it, with seeded random weights, saved by save_pretrained in bf16
(config.json rewritten as transformers writes it, model.safetensors).

  python3 examples/make_tiny_checkpoints.py [example-dir ...]

Needs torch and transformers (utils/setup.sh installs them). The main job
compiles each with moe-compile --model and checks every MoE layer against
the numpy reference (moec/main.py).
"""
import json
import sys
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
# What the MoE configs leave out and a whole model needs: small attention
# (with DeepSeek's multi-head latent attention), a small vocabulary, and the
# first decoder layer dense where the family has dense layers.
EXTRA = {
    "qwen3_moe": dict(num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                      intermediate_size=96, mlp_only_layers=[0], num_hidden_layers=3),
    "deepseek_v3": dict(num_attention_heads=4, num_key_value_heads=4, vocab_size=256,
                        intermediate_size=96, q_lora_rank=32, kv_lora_rank=32,
                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
                        first_k_dense_replace=1, num_hidden_layers=3),
    "gpt_oss": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
                    num_hidden_layers=2),
}


def make(example):
    config_path = example / "config.json"
    fields = json.loads(config_path.read_text())
    model_type = fields["model_type"]
    fields = {k: v for k, v in fields.items() if k not in ("architectures", "torch_dtype")}
    fields.update(EXTRA[model_type])
    config = transformers.AutoConfig.for_model(**fields)
    torch.manual_seed(sum(map(ord, example.name)))
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_floating_point() and "norm" not in name:
                p.normal_(0.0, 1.0 / max(p.shape[-1], 1) ** 0.5)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.1)
        for name, p in model.named_parameters():  # gpt-oss's router and expert biases
            if p.is_floating_point() and name.endswith("bias") and ".mlp." in name:
                p.normal_(0.0, 0.1)
    model.to(torch.bfloat16).save_pretrained(example)
    print(f"{example}: {sum(p.numel() for p in model.parameters())} parameters")


def main(argv):
    examples = [Path(a) for a in argv] or [HERE / "qwen3-moe-tiny", HERE / "deepseek-v3-tiny",
                                           HERE / "gpt-oss-tiny"]
    for example in examples:
        make(example)


if __name__ == "__main__":
    main(sys.argv[1:])
