"""moe-compile --model on real HuggingFace checkpoints, against transformers.

For every family a tiny model (3 decoder layers, dense where the family can
be) is built by transformers, every parameter and buffer of its MoE blocks is
set to seeded random values (transformers' init leaves correction biases at
zero, which would test nothing), and the model is written by save_pretrained
as safetensors. moe-compile --model compiles the directory; moec.load runs
it. The compiled model must hold exactly the decoder layers whose MLP is a
MoE block, and each must match that block's own forward in f32.

Negative cases: a truncated safetensors file and a checkpoint missing one
expert tensor must be refused by name, leaving no output directory; a
sharded checkpoint (model.safetensors.index.json) must load and match.
"""
import json
import struct
import subprocess

import numpy as np
import pytest

import torch  # utils/setup.sh installs torch and transformers
import transformers
from safetensors.torch import load_file, save_file

import moec  # noqa: E402
from moec.toolchain import tool  # noqa: E402
from moec.weights import quantize_fp8_blocks  # noqa: E402

TOKENS = 37
HIDDEN = 32
TOLERANCE = 1e-5  # of max |ref|, f32
SMALL = dict(hidden_size=HIDDEN, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=3, vocab_size=64, intermediate_size=16)
# Multi-head latent attention, small enough for HIDDEN.
MLA = dict(q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4,
           v_head_dim=8)
V3 = dict(moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2, **SMALL)


def _families():
    """name -> (config, model_type written over config.json's own or None[,
    the model class when AutoModelForCausalLM does not build it])."""
    t = transformers
    return {
        # Fused experts stored transposed ([E, H, 2I], [E, I, H]), gate and up
        # interleaved, router and expert biases; 2I = H is square (read as
        # transformers holds it), the wide one is not.
        "gpt_oss": lambda: (t.GptOssConfig(num_local_experts=8, num_experts_per_tok=2,
                                           head_dim=8, **SMALL), None),
        "gpt_oss_wide": lambda: (t.GptOssConfig(num_local_experts=8, num_experts_per_tok=2,
                                                head_dim=8, **{**SMALL, "intermediate_size": 24}),
                                 None),
        # Fused transposed experts, gate then up; MoE every second layer.
        "llama4_text": lambda: (t.Llama4TextConfig(num_local_experts=8, num_experts_per_tok=1,
                                                   interleave_moe_layer_step=2,
                                                   intermediate_size_mlp=24, head_dim=8,
                                                   **{**SMALL, "intermediate_size": 24}), None),
        # The whole vision-language model: the language model's layers live
        # under model.language_model.
        "qwen3_vl_moe": lambda: (t.Qwen3VLMoeConfig(
            text_config=dict(moe_intermediate_size=24, num_experts=8, num_experts_per_tok=2,
                             mlp_only_layers=[0], head_dim=8, **SMALL),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2,
                               out_hidden_size=HIDDEN, deepstack_visual_indexes=[0])),
            None, t.Qwen3VLMoeForConditionalGeneration),
        "qwen3_moe": lambda: (t.Qwen3MoeConfig(moe_intermediate_size=16, num_experts=8,
                                               num_experts_per_tok=2, norm_topk_prob=True,
                                               mlp_only_layers=[0], **SMALL), None),
        # A shared expert gated by sigmoid(shared_expert_gate(x)).
        "qwen2_moe": lambda: (t.Qwen2MoeConfig(moe_intermediate_size=16, num_experts=8,
                                               num_experts_per_tok=2,
                                               shared_expert_intermediate_size=24,
                                               decoder_sparse_step=2, **SMALL), None),
        # Mixtral has no dense layers; its checkpoint names them block_sparse_moe.
        "mixtral": lambda: (t.MixtralConfig(num_local_experts=8, num_experts_per_tok=2,
                                            **SMALL), None),
        "olmoe": lambda: (t.OlmoeConfig(num_experts=8, num_experts_per_tok=2, eos_token_id=1,
                                        **SMALL), None),
        "deepseek_v2": lambda: (t.DeepseekV2Config(moe_intermediate_size=16, n_routed_experts=8,
                                                   num_experts_per_tok=2, n_shared_experts=1,
                                                   routed_scaling_factor=1.5,
                                                   first_k_dense_replace=1, **MLA, **SMALL),
                                None),
        "deepseek_v3": lambda: (t.DeepseekV3Config(n_group=4, topk_group=2, n_shared_experts=1,
                                                   routed_scaling_factor=2.5,
                                                   first_k_dense_replace=1, **MLA, **V3), None),
        # Kimi-K2's config.json says kimi_k2 and is DeepseekV3's model.
        "kimi_k2": lambda: (t.DeepseekV3Config(n_group=1, topk_group=1, n_shared_experts=1,
                                               routed_scaling_factor=2.827,
                                               first_k_dense_replace=1, **MLA, **V3), "kimi_k2"),
        "glm4_moe": lambda: (t.Glm4MoeConfig(n_group=2, topk_group=1, routed_scaling_factor=1.8,
                                             first_k_dense_replace=1, **V3), None),
        "dots1": lambda: (t.Dots1Config(n_shared_experts=2, norm_topk_prob=True,
                                        routed_scaling_factor=2.5, first_k_dense_replace=1,
                                        **V3), None),
        # MiniMax's checkpoints name the block block_sparse_moe (and w1/w3/w2)
        # like Mixtral's; M2 keeps its correction bias on the block.
        "minimax": lambda: (t.MiniMaxConfig(num_local_experts=8, num_experts_per_tok=2,
                                            head_dim=8, **SMALL), None),
        "minimax_m2": lambda: (t.MiniMaxM2Config(num_local_experts=8, num_experts_per_tok=2,
                                                 head_dim=8, **SMALL), None),
        "qwen3_next": lambda: (t.Qwen3NextConfig(moe_intermediate_size=16, num_experts=8,
                                                 num_experts_per_tok=2, mlp_only_layers=[0],
                                                 shared_expert_intermediate_size=24, head_dim=8,
                                                 linear_num_value_heads=4, linear_num_key_heads=2,
                                                 linear_key_head_dim=8, linear_value_head_dim=8,
                                                 **SMALL), None),
        # Fused experts under other names: input_linear [E, 2I, H], output_linear.
        "granitemoe": lambda: (t.GraniteMoeConfig(num_local_experts=8, num_experts_per_tok=2,
                                                  **{**SMALL, "intermediate_size": 24}), None),
        "qwen3_5_moe": lambda: (t.Qwen3_5MoeConfig(
            text_config=dict(moe_intermediate_size=16, num_experts=8, num_experts_per_tok=2,
                             shared_expert_intermediate_size=24, head_dim=8,
                             linear_num_value_heads=4, linear_num_key_heads=2,
                             linear_key_head_dim=8, linear_value_head_dim=8, **SMALL),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2,
                               out_hidden_size=HIDDEN)),
            None, t.Qwen3_5MoeForConditionalGeneration),
        "glm4v_moe": lambda: (t.Glm4vMoeConfig(
            text_config=dict(moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2,
                             n_group=2, topk_group=1, first_k_dense_replace=1, head_dim=8,
                             **SMALL),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2,
                               out_hidden_size=HIDDEN)),
            None, t.Glm4vMoeForConditionalGeneration),
        # The whole Llama 4 model: its language model under language_model.model.
        "llama4": lambda: (t.Llama4Config(
            text_config=dict(num_local_experts=8, num_experts_per_tok=1,
                             interleave_moe_layer_step=2, intermediate_size_mlp=24, head_dim=8,
                             **{**SMALL, "intermediate_size": 24}),
            vision_config=dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                               num_attention_heads=2, image_size=32, patch_size=16,
                               vision_output_dim=HIDDEN, projector_input_dim=HIDDEN,
                               projector_output_dim=HIDDEN)),
            None, t.Llama4ForConditionalGeneration),
        # The router is gate.wg, the shared expert shared_mlp.
        "hunyuan_v1_moe": lambda: (t.HunYuanMoEV1Config(num_experts=8, moe_topk=2, head_dim=8,
                                                        pad_token_id=1, eos_token_id=1,
                                                        bos_token_id=1, **SMALL), None),
        # Mamba and attention layers; MoE in every second layer (offset 1).
        "jamba": lambda: (t.JambaConfig(num_experts=8, num_experts_per_tok=2,
                                        use_mamba_kernels=False, mamba_d_state=4,
                                        mamba_expand=1, **{**SMALL, "num_hidden_layers": 4}),
                          None),
        "flex_olmo": lambda: (t.FlexOlmoConfig(num_experts=8, num_experts_per_tok=2, pad_token_id=1,
                                               eos_token_id=1, **SMALL),
                              None),
        # MoE layers from mlp_layer_types, which transformers writes.
        "deepseek_v32": lambda: (t.DeepseekV32Config(n_group=4, topk_group=2, n_shared_experts=1,
                                                     routed_scaling_factor=2.5,
                                                     first_k_dense_replace=1, index_head_dim=8,
                                                     index_n_heads=2, index_topk=4, **MLA, **V3),
                                 None),
        "ernie4_5_moe": lambda: (t.Ernie4_5_MoeConfig(moe_intermediate_size=16,
                                                      moe_num_experts=8, moe_k=2,
                                                      moe_num_shared_experts=1,
                                                      moe_layer_start_index=1, **SMALL), None),
    }


FAMILIES = sorted(_families())


def _mlp(layer):
    for attr in ("mlp", "block_sparse_moe", "feed_forward"):
        if hasattr(layer, attr):
            return getattr(layer, attr)
    raise AttributeError(f"{type(layer).__name__} has no MLP")


def _is_moe(mlp):
    return hasattr(mlp, "experts")


def _randomize(block, seed):
    """Every parameter and buffer N(0,1)/sqrt(fan-in) (biases, correction
    biases included, 0.1 N(0,1)), seeded so runs repeat."""
    rng = np.random.default_rng(seed)
    named = list(block.named_parameters()) + list(block.named_buffers())
    for name, p in sorted(named, key=lambda item: item[0]):
        if not p.is_floating_point():
            continue
        shape = tuple(p.shape)
        scale = 0.1 if "bias" in name else 1.0 / np.sqrt(max(shape[-1] if shape else 1, 1))
        v = (rng.standard_normal(shape) * scale).astype(np.float32)
        with torch.no_grad():
            p.copy_(torch.from_numpy(v))


def _checkpoint(name, directory, **save_args):
    """Builds, randomizes and saves the family's tiny model; returns
    {decoder layer index: MoE block} for the layers that are MoE."""
    config, rename, *model_class = _families()[name]()
    torch.manual_seed(0)
    build = model_class[0]._from_config if model_class else \
        transformers.AutoModelForCausalLM.from_config
    model = build(config).float().eval()
    blocks = {}
    for i, layer in enumerate(_decoder_layers(model)):
        mlp = _mlp(layer)
        if _is_moe(mlp):
            _randomize(mlp, seed=sum(map(ord, name)) * 16 + i)
            blocks[i] = mlp
    assert blocks, f"{name}: the tiny model has no MoE layer"
    model.save_pretrained(directory, **save_args)
    if rename:
        path = directory / "config.json"
        text = json.loads(path.read_text())
        text["model_type"] = rename
        path.write_text(json.dumps(text, indent=2))
    return blocks, len(_decoder_layers(model))


def _decoder_layers(model):
    if hasattr(getattr(model, "language_model", None), "model"):  # Llama 4's whole model
        return model.language_model.model.layers
    inner = model.model
    return inner.language_model.layers if hasattr(inner, "language_model") else inner.layers


def _compile(model_dir, out, *options):
    return subprocess.run([tool("moe-compile"), "--model", str(model_dir), "-o", str(out),
                           "--dtype", "f32", *options], capture_output=True, text=True)


def _compile_ok(model_dir, out, *options):
    run = _compile(model_dir, out, *options)
    assert run.returncode == 0, f"moe-compile failed ({run.returncode}):\n{run.stderr}"
    assert out.is_dir(), f"moe-compile made no {out}"
    return moec.load(out)


def _hf_forward(block, x):
    with torch.inference_mode():
        y = block(torch.from_numpy(x)[None])
        y = y[0] if isinstance(y, tuple) else y
        return y.reshape(x.shape).float().numpy()


def _check(name, model, blocks, num_layers):
    assert isinstance(model.manifest, dict), type(model.manifest)
    got = set(model.layers)
    assert all(isinstance(i, int) for i in got), sorted(got, key=str)
    assert got == set(blocks), (name, sorted(got), sorted(blocks))
    dense = set(range(num_layers)) - set(blocks)
    assert not got & dense, (name, sorted(got & dense))
    for i, block in sorted(blocks.items()):
        x = np.random.default_rng(1000 + i).standard_normal((TOKENS, HIDDEN)).astype(np.float32)
        ref = _hf_forward(block, x)
        y = np.asarray(model.layers[i](x))
        assert y.shape == (TOKENS, HIDDEN), (name, i, y.shape)
        assert y.dtype == np.float32, (name, i, y.dtype)
        error = float(np.abs(y - ref).max() / np.abs(ref).max())
        assert error <= TOLERANCE, (name, i, error)


@pytest.mark.parametrize("name", FAMILIES)
def test_checkpoint_matches_transformers(name, tmp_path):
    model_dir = tmp_path / "hf"
    blocks, num_layers = _checkpoint(name, model_dir)
    assert (model_dir / "model.safetensors").exists()
    model = _compile_ok(model_dir, tmp_path / "out")
    _check(name, model, blocks, num_layers)


def test_sharded_checkpoint(tmp_path):
    model_dir = tmp_path / "hf"
    blocks, num_layers = _checkpoint("qwen3_moe", model_dir, max_shard_size="20KB")
    index = json.loads((model_dir / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1, shards
    assert not (model_dir / "model.safetensors").exists()
    # Experts of one layer spread over more than one shard.
    layer1 = {f for k, f in index["weight_map"].items() if k.startswith("model.layers.1.mlp.")}
    assert len(layer1) > 1, layer1
    model = _compile_ok(model_dir, tmp_path / "out")
    _check("qwen3_moe sharded", model, blocks, num_layers)


def test_phase_variants_checkpoint(tmp_path):
    """A --model library with prefill and decode variants (--decode-max-tokens)
    takes a phase argument; moec.load's layers pass 0 (by token count), and
    both variants match transformers."""
    model_dir = tmp_path / "hf"
    blocks, _ = _checkpoint("qwen3_moe", model_dir)
    model = _compile_ok(model_dir, tmp_path / "out", "--decode-max-tokens", "4")
    for i, block in sorted(blocks.items()):
        assert "phase_argument" in model.layers[i].plan["entry_point"]
        for tokens in (3, TOKENS):
            x = np.random.default_rng(tokens + i).standard_normal((tokens, HIDDEN))
            x = x.astype(np.float32)
            ref = _hf_forward(block, x)
            error = float(np.abs(np.asarray(model.layers[i](x)) - ref).max() / np.abs(ref).max())
            assert error <= TOLERANCE, (i, tokens, error)


def _listing(path):
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else str(path)


def _data_start(path):
    (header,) = struct.unpack("<Q", path.read_bytes()[:8])
    return 8 + header


def test_truncated_safetensors_is_refused(tmp_path):
    model_dir = tmp_path / "hf"
    _checkpoint("qwen3_moe", model_dir)
    path = model_dir / "model.safetensors"
    data = path.read_bytes()
    start = _data_start(path)
    path.write_bytes(data[:start + (len(data) - start) // 2])
    out = tmp_path / "out"
    run = _compile(model_dir, out)
    assert run.returncode != 0, run.stderr
    assert "model.safetensors" in run.stderr, run.stderr
    assert not out.exists(), _listing(out)


def test_missing_expert_tensor_is_refused(tmp_path):
    model_dir = tmp_path / "hf"
    _checkpoint("qwen3_moe", model_dir)
    path = model_dir / "model.safetensors"
    missing = "model.layers.1.mlp.experts.3.up_proj.weight"
    tensors = load_file(path)
    assert missing in tensors, sorted(tensors)
    del tensors[missing]
    save_file(tensors, path, metadata={"format": "pt"})
    out = tmp_path / "out"
    run = _compile(model_dir, out)
    assert run.returncode != 0, run.stderr
    assert missing in run.stderr, run.stderr
    assert not out.exists(), _listing(out)


def _quantize_e4m3(w, block):
    """DeepSeek-V3's FP8 format for one 2-D weight: (codes, scale_inv)."""
    codes, scale = quantize_fp8_blocks(w[None], block)
    return codes[0], scale[0]


# (block, --fp8-weights, whether the layer keeps the codes): blocks of 12 rows do
# not divide I = 16, so the default dequantizes; 8 x 16 is read in vectors of
# 16 codes, 4 x 8 by the generic lowering where vectors are 16 wide.
FP8_CASES = [((12, 20), None, False), ((12, 20), "dequantize", False),
             ((8, 16), None, True), ((4, 8), "keep", True), ((8, 16), "dequantize", False)]


@pytest.mark.parametrize("block,mode,kept", FP8_CASES)
def test_fp8_block_scaled_checkpoint(tmp_path, block, mode, kept):
    """Expert and shared-expert weights stored as e4m3 codes with f32
    weight_scale_inv blocks (partial blocks at the edges) are dequantized when
    read, or (routed experts, --fp8-weights=keep) kept as codes and scales that
    the layer decodes; the reference is transformers' block holding the same
    dequantized values (decoded by ml_dtypes)."""
    model_dir = tmp_path / "hf"
    blocks, num_layers = _checkpoint("deepseek_v3", model_dir)
    path = model_dir / "model.safetensors"
    tensors = {k: v.float().numpy() for k, v in load_file(path).items()}
    out_tensors = {}
    for name, w in tensors.items():
        quantized = (".mlp.experts." in name or ".mlp.shared_experts." in name) and \
            name.endswith(".weight") and name.startswith("model.layers.")
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else -1
        if not (quantized and layer in blocks):
            out_tensors[name] = torch.from_numpy(w)
            continue
        codes, scale = _quantize_e4m3(w, block)
        out_tensors[name] = torch.from_numpy(codes.view(np.uint8)).view(torch.float8_e4m3fn)
        out_tensors[name + "_scale_inv"] = torch.from_numpy(scale)
        # The reference block holds exactly the dequantized weight.
        rows = np.repeat(np.repeat(scale, block[0], 0), block[1], 1)[:w.shape[0], :w.shape[1]]
        deq = codes.astype(np.float32) * rows
        mlp = blocks[layer]
        parts = name.split(".")
        with torch.no_grad():
            if parts[4] == "experts":
                e, kind, i = int(parts[5]), parts[6], deq.shape[0]
                if kind == "gate_proj":
                    mlp.experts.gate_up_proj[e, :i] = torch.from_numpy(deq)
                elif kind == "up_proj":
                    mlp.experts.gate_up_proj[e, i:] = torch.from_numpy(deq)
                else:
                    mlp.experts.down_proj[e] = torch.from_numpy(deq)
            else:
                getattr(mlp.shared_experts, parts[5]).weight.copy_(torch.from_numpy(deq))
    save_file(out_tensors, path, metadata={"format": "pt"})
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                     "activation_scheme": "dynamic",
                                     "weight_block_size": list(block)}
    config_path.write_text(json.dumps(config))
    options = [f"--fp8-weights={mode}"] if mode else []
    model = _compile_ok(model_dir, tmp_path / "out", *options)
    plan = json.loads((tmp_path / "out" / model.manifest["library"]["plan"]).read_text())
    assert plan["expert_weights"]["format"] == ("fp8_e4m3" if kept else "f32"), plan
    tensors = model.manifest["layers"][0]["tensors"]
    assert ("w13_scale" in tensors and "w2_scale" in tensors) == kept, tensors
    _check("deepseek_v3 fp8", model, blocks, num_layers)
    if block[0] == 12:
        # Kept codes need gate's and up's scale blocks to stack along 2I.
        run = _compile(model_dir, tmp_path / "out3", "--fp8-weights=keep")
        assert run.returncode != 0 and "12 rows do not divide the intermediate size 16" \
            in run.stderr, run.stderr
        assert not (tmp_path / "out3").exists()
    # Without the quantization_config the FP8 tensors are refused by name.
    del config["quantization_config"]
    config_path.write_text(json.dumps(config))
    run = _compile(model_dir, tmp_path / "out2")
    assert run.returncode != 0 and "F8_E4M3" in run.stderr, run.stderr
    assert not (tmp_path / "out2").exists()


def test_a_damaged_output_directory_is_named(tmp_path):
    """moec.load of an output with a missing part or a corrupt manifest says
    which file, not a bare FileNotFoundError or JSONDecodeError."""
    model_dir = tmp_path / "hf"
    _checkpoint("qwen3_moe", model_dir)
    out = tmp_path / "out"
    model = _compile_ok(model_dir, out)
    plan = out / model.manifest["library"]["plan"]
    plan.rename(tmp_path / "plan.json")
    with pytest.raises(FileNotFoundError, match=r"plan\.json: named by .*manifest\.json but "
                                                r"missing \(an incomplete copy"):
        moec.load(out)
    (tmp_path / "plan.json").rename(plan)
    (out / "manifest.json").write_text('{"format": ')
    with pytest.raises(ValueError, match=r"manifest\.json: not valid JSON"):
        moec.load(out)


def test_output_directory_moves_with_its_runtime(tmp_path):
    """The library finds libmoert next to itself ($ORIGIN): a moved output
    directory runs in a process that cannot see the build."""
    model_dir = tmp_path / "hf"
    blocks, _ = _checkpoint("qwen3_moe", model_dir)
    out = tmp_path / "out"
    _compile_ok(model_dir, out)
    moved = tmp_path / "elsewhere" / "model"
    moved.parent.mkdir()
    out.rename(moved)
    x = np.random.default_rng(7).standard_normal((5, HIDDEN)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = ("import sys, numpy as np, moec\n"
              "m = moec.load(sys.argv[1])\n"
              "np.save(sys.argv[2], m.layers[1](np.load(sys.argv[3])))\n")
    import os
    import sys
    env = dict(os.environ, MOE_BUILD_DIR=str(tmp_path / "no-build"),
               PYTHONPATH=str(__import__("pathlib").Path(moec.__file__).parents[1]))
    run = subprocess.run([sys.executable, "-c", script, str(moved), str(tmp_path / "y.npy"),
                          str(tmp_path / "x.npy")], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    ref = _hf_forward(blocks[1], x)
    y = np.load(tmp_path / "y.npy")
    assert float(np.abs(y - ref).max() / np.abs(ref).max()) <= TOLERANCE


def test_f16_checkpoint(tmp_path):
    """F16 weights (a checkpoint saved in float16) are widened exactly."""
    model_dir = tmp_path / "hf"
    blocks, num_layers = _checkpoint("qwen3_moe", model_dir)
    path = model_dir / "model.safetensors"
    tensors = load_file(path)
    save_file({k: v.to(torch.float16) for k, v in tensors.items()}, path,
              metadata={"format": "pt"})
    for block in blocks.values():  # the reference holds the same f16 values
        with torch.no_grad():
            for p in list(block.parameters()) + list(block.buffers()):
                p.copy_(p.to(torch.float16).float())
    _check("qwen3_moe f16", _compile_ok(model_dir, tmp_path / "out"), blocks, num_layers)


def test_released_qwen3_vl_layout(tmp_path):
    """Released Qwen3-VL-MoE checkpoints store the experts transposed
    (gate_up_proj [E, H, 2I], down_proj [E, I, H]); transformers 5 saves them
    as it holds them. Both load: the transposed file is checked to be what
    transformers itself reads back into the same block."""
    model_dir = tmp_path / "hf"
    blocks, num_layers = _checkpoint("qwen3_vl_moe", model_dir)
    path = model_dir / "model.safetensors"
    tensors = load_file(path)
    fused = [k for k in tensors if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    assert fused, sorted(tensors)
    for k in fused:
        tensors[k] = tensors[k].transpose(1, 2).contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    reread = transformers.Qwen3VLMoeForConditionalGeneration.from_pretrained(model_dir)
    for i, block in blocks.items():
        mine = reread.model.language_model.layers[i].mlp.experts
        assert torch.equal(mine.gate_up_proj, block.experts.gate_up_proj), i
        assert torch.equal(mine.down_proj, block.experts.down_proj), i
    _check("qwen3_vl_moe released layout", _compile_ok(model_dir, tmp_path / "out"), blocks,
           num_layers)


def test_gpt_oss_mxfp4_checkpoint(tmp_path):
    """gpt-oss's released format: experts as MXFP4 (E2M1 codes two a byte,
    E8M0 scales per 32) in _blocks/_scales tensors, out x in, gate and up
    interleaved. The reference block holds the weights transformers' own
    MXFP4 decoder (convert_moe_packed_tensors) makes of the same bytes."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    model_dir = tmp_path / "hf"
    name = "gpt_oss_mxfp4"
    config = transformers.GptOssConfig(num_local_experts=8, num_experts_per_tok=2, head_dim=8,
                                       **{**SMALL, "intermediate_size": 32})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    blocks = {}
    rng = np.random.default_rng(11)
    for i, layer in enumerate(model.model.layers):
        _randomize(layer.mlp, seed=100 + i)
        blocks[i] = layer.mlp
    model.save_pretrained(model_dir)
    path = model_dir / "model.safetensors"
    tensors = load_file(path)
    for i, mlp in blocks.items():
        for proj, out_dim, in_dim in (("gate_up_proj", 64, HIDDEN), ("down_proj", HIDDEN, 32)):
            key = f"model.layers.{i}.mlp.experts.{proj}"
            codes = rng.integers(0, 256, (8, out_dim, in_dim // 32, 16), dtype=np.uint8)
            scales = rng.integers(120, 130, (8, out_dim, in_dim // 32), dtype=np.uint8)
            del tensors[key]
            tensors[key + "_blocks"] = torch.from_numpy(codes)
            tensors[key + "_scales"] = torch.from_numpy(scales)
            weight = convert_moe_packed_tensors(torch.from_numpy(codes), torch.from_numpy(scales),
                                                dtype=torch.float32)
            with torch.no_grad():
                getattr(mlp.experts, proj).copy_(weight)
    save_file(tensors, path, metadata={"format": "pt"})
    config_path = model_dir / "config.json"
    text = json.loads(config_path.read_text())
    text["quantization_config"] = {"quant_method": "mxfp4",
                                   "modules_to_not_convert": ["model.layers.*.self_attn",
                                                              "model.layers.*.mlp.router",
                                                              "model.embed_tokens", "lm_head"]}
    config_path.write_text(json.dumps(text))
    _check(name, _compile_ok(model_dir, tmp_path / "out"), blocks, len(blocks))
    # MXFP4 tensors without the quantization_config are refused by name.
    del text["quantization_config"]
    config_path.write_text(json.dumps(text))
    run = _compile(model_dir, tmp_path / "out2")
    assert run.returncode != 0 and "gate_up_proj_blocks' is MXFP4" in run.stderr, run.stderr
    assert not (tmp_path / "out2").exists()
