"""Each supported MoE family against transformers' own MoE block.

For every family a tiny config is built by transformers' config class and
written as save_pretrained writes it (only the fields that differ from the
class defaults, so the import must know transformers' defaults); the block is
built from the same config with seeded random parameters; moe-compile
compiles the config.json; both run the same tokens in f32. A negative
control (gate and up halves swapped) must fail the same comparison.
"""
import json

import numpy as np
import pytest

import torch  # utils/setup.sh installs torch and transformers
import transformers

from moec.layer import run_layer  # noqa: E402
from moec.toolchain import compile_config  # noqa: E402

TOKENS = 37
TOLERANCE = 1e-5  # of max |y|, f32
SMALL = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2)


def _module(family):
    return __import__(f"transformers.models.{family}.modeling_{family}", fromlist=["_"])


def _families():
    """(name, config object written to config.json, the block's config,
    block class, model_type written over the config's own or None)."""
    t = transformers
    v3 = dict(moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2, **SMALL)
    return {
        "mixtral": lambda: (t.MixtralConfig(intermediate_size=16, num_local_experts=8,
                                            num_experts_per_tok=2, **SMALL),
                            None, "MixtralSparseMoeBlock", "mixtral"),
        "qwen3_moe": lambda: (t.Qwen3MoeConfig(moe_intermediate_size=16, num_experts=8,
                                               num_experts_per_tok=2, norm_topk_prob=True, **SMALL),
                              None, "Qwen3MoeSparseMoeBlock", "qwen3_moe"),
        "qwen3_moe_unnormalized": lambda: (t.Qwen3MoeConfig(moe_intermediate_size=16,
                                                            num_experts=8, num_experts_per_tok=3,
                                                            **SMALL),
                                           None, "Qwen3MoeSparseMoeBlock", "qwen3_moe"),
        "qwen3_vl_moe": lambda: _qwen3_vl(),
        # Vision-language wrappers whose language model holds the MoE block.
        "qwen3_5_moe": lambda: _text_config(
            transformers.Qwen3_5MoeConfig, "Qwen3_5MoeSparseMoeBlock", "qwen3_5_moe",
            dict(moe_intermediate_size=16, num_experts=8, num_experts_per_tok=2,
                 shared_expert_intermediate_size=24)),
        "glm4v_moe": lambda: _text_config(
            transformers.Glm4vMoeConfig, "Glm4vMoeTextMoE", "glm4v_moe",
            dict(moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2,
                 n_group=2, topk_group=1, routed_scaling_factor=1.8)),
        # The routing weight scales the expert's input; top-1, a shared expert.
        "llama4_text": lambda: (t.Llama4TextConfig(intermediate_size=16, num_local_experts=8,
                                                   **SMALL),
                                None, "Llama4TextMoe", "llama4"),
        "llama4": lambda: _llama4(),
        "olmoe": lambda: (t.OlmoeConfig(intermediate_size=16, num_experts=8,
                                        num_experts_per_tok=2, **SMALL),
                          None, "OlmoeSparseMoeBlock", "olmoe"),
        "qwen2_moe": lambda: (t.Qwen2MoeConfig(moe_intermediate_size=16, num_experts=8,
                                               num_experts_per_tok=2,
                                               shared_expert_intermediate_size=24, **SMALL),
                              None, "Qwen2MoeSparseMoeBlock", "qwen2_moe"),
        "qwen2_moe_no_shared": lambda: (t.Qwen2MoeConfig(moe_intermediate_size=16, num_experts=8,
                                                         num_experts_per_tok=2,
                                                         shared_expert_intermediate_size=0,
                                                         **SMALL),
                                        None, "Qwen2MoeSparseMoeBlock", "qwen2_moe"),
        "deepseek_v2": lambda: (t.DeepseekV2Config(moe_intermediate_size=16, n_routed_experts=8,
                                                   num_experts_per_tok=2, n_shared_experts=1,
                                                   routed_scaling_factor=1.5, **SMALL),
                                None, "DeepseekV2Moe", "deepseek_v2"),
        # Groups ranked by their best expert; top-3 from the best 2 of 4 groups.
        "deepseek_v2_group_limited": lambda: (t.DeepseekV2Config(
            moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=3,
            n_shared_experts=1, routed_scaling_factor=1.5, topk_method="group_limited_greedy",
            n_group=4, topk_group=2, **SMALL), None, "DeepseekV2Moe", "deepseek_v2"),
        "deepseek_v3": lambda: (t.DeepseekV3Config(n_group=4, topk_group=2, n_shared_experts=1,
                                                   routed_scaling_factor=2.5, **v3),
                                None, "DeepseekV3MoE", "deepseek_v3"),
        # Kimi-K2's config.json says kimi_k2 and runs DeepseekV3's block.
        "kimi_k2": lambda: (t.DeepseekV3Config(n_group=1, topk_group=1, n_shared_experts=1,
                                               routed_scaling_factor=2.827, **v3),
                            "kimi_k2", "DeepseekV3MoE", "deepseek_v3"),
        "glm4_moe": lambda: (t.Glm4MoeConfig(n_group=2, topk_group=1, routed_scaling_factor=1.8,
                                             **v3),
                             None, "Glm4MoeMoE", "glm4_moe"),
        "dots1": lambda: (t.Dots1Config(n_shared_experts=2, norm_topk_prob=True,
                                        routed_scaling_factor=2.5, **v3),
                          None, "Dots1MoE", "dots1"),
        # Router and expert biases, interleaved gate/up, clamped SwiGLU; the
        # second with a limit low enough that the clamps bite.
        "gpt_oss": lambda: (t.GptOssConfig(intermediate_size=16, num_local_experts=8,
                                           num_experts_per_tok=2, **SMALL),
                            None, "GptOssMLP", "gpt_oss"),
        "gpt_oss_tight_clamp": lambda: (t.GptOssConfig(intermediate_size=24, num_local_experts=8,
                                                       num_experts_per_tok=3, swiglu_limit=0.4,
                                                       swiglu_alpha=1.3, **SMALL),
                                        None, "GptOssMLP", "gpt_oss"),
        # Aliases and field maps of the families above (transformers' own blocks).
        "minimax": lambda: (t.MiniMaxConfig(intermediate_size=16, num_local_experts=8,
                                            num_experts_per_tok=2, **SMALL),
                            None, "MiniMaxSparseMoeBlock", "minimax"),
        "minimax_m2": lambda: (t.MiniMaxM2Config(intermediate_size=16, num_local_experts=8,
                                                 num_experts_per_tok=3, **SMALL),
                               None, "MiniMaxM2SparseMoeBlock", "minimax_m2"),
        "qwen3_next": lambda: (t.Qwen3NextConfig(moe_intermediate_size=16, num_experts=8,
                                                 num_experts_per_tok=2,
                                                 shared_expert_intermediate_size=24, **SMALL),
                               None, "Qwen3NextSparseMoeBlock", "qwen3_next"),
        "granitemoe": lambda: (t.GraniteMoeConfig(intermediate_size=16, num_local_experts=8,
                                                  num_experts_per_tok=2, **SMALL),
                               None, "GraniteMoeMoE", "granitemoe"),
        "hunyuan_v1_moe": lambda: (t.HunYuanMoEV1Config(intermediate_size=16, num_experts=8,
                                                        moe_topk=2, **SMALL),
                                   None, "HunYuanMoEV1Moe", "hunyuan_v1_moe"),
        "jamba": lambda: (t.JambaConfig(intermediate_size=16, num_experts=8, num_experts_per_tok=2,
                                        use_mamba_kernels=False, **SMALL),
                          None, "JambaSparseMoeBlock", "jamba"),
        "flex_olmo": lambda: (t.FlexOlmoConfig(intermediate_size=16, num_experts=8,
                                               num_experts_per_tok=2, **SMALL),
                              None, "FlexOlmoSparseMoeBlock", "flex_olmo"),
        "deepseek_v32": lambda: (t.DeepseekV32Config(n_group=4, topk_group=2, n_shared_experts=1,
                                                     routed_scaling_factor=2.5, **v3),
                                 None, "DeepseekV32MoE", "deepseek_v32"),
        "ernie4_5_moe": lambda: (t.Ernie4_5_MoeConfig(moe_intermediate_size=16, moe_num_experts=8,
                                                      moe_k=2, moe_num_shared_experts=1, **SMALL),
                                 None, "Ernie4_5_MoeSparseMoeBlock", "ernie4_5_moe"),
    }


def _qwen3_vl():
    config = transformers.Qwen3VLMoeConfig(text_config=dict(
        moe_intermediate_size=16, num_experts=8, num_experts_per_tok=2, **SMALL))
    return config, None, "Qwen3VLMoeTextSparseMoeBlock", "qwen3_vl_moe", config.text_config


def _text_config(config_class, block_class, module, text):
    config = config_class(text_config=dict(**text, **SMALL))
    return config, None, block_class, module, config.text_config


def _llama4():
    config = transformers.Llama4Config(text_config=dict(
        intermediate_size=16, num_local_experts=8, **SMALL))
    return config, None, "Llama4TextMoe", "llama4", config.text_config


def _build(name, minimal):
    made = _families()[name]()
    config, rename, block_class, module = made[:4]
    block_config = made[4] if len(made) > 4 else config
    block = getattr(_module(module), block_class)(block_config)
    # What save_pretrained writes; `minimal` also drops every field equal to
    # the config class's default, so that the import must know the defaults.
    text = json.loads(config.to_json_string(use_diff=True))
    if minimal:
        defaults = type(config)().to_dict()
        text = {k: v for k, v in text.items() if k not in defaults or defaults[k] != v}
    text["model_type"] = rename or config.model_type
    return text, block.float().eval()


def _randomize(block, seed):
    """Every parameter and buffer N(0,1)/sqrt(fan-in) (biases 0.1 N(0,1)),
    seeded by name so runs repeat."""
    rng = np.random.default_rng(seed)
    named = list(block.named_parameters()) + list(block.named_buffers())
    values = {}
    for name, p in sorted(named):
        shape = tuple(p.shape)
        scale = 0.1 if "bias" in name else 1.0 / np.sqrt(max(shape[-1], 1))
        v = (rng.standard_normal(shape) * scale).astype(np.float32)
        with torch.no_grad():
            p.copy_(torch.from_numpy(v))
        values[name] = v
    return values


def _layer_weights(values, plan):
    """The compiled layer's arguments from the block's parameters; every
    parameter must be used (an unused one would be math left out)."""
    used = set()

    def take(*names):
        for n in names:
            if n in values:
                used.add(n)
                return values[n]
        raise KeyError(f"none of {names} in {sorted(values)}")

    w = {"router_weight": take("gate.weight", "router.weight", "gate.wg.weight"),
         "w13": take("experts.gate_up_proj"), "w2": take("experts.down_proj")}
    if plan["model_type"] in ("llama4_text", "gpt_oss"):  # stored [E, H, 2I] and [E, I, H]
        w["w13"], w["w2"] = w["w13"].transpose(0, 2, 1), w["w2"].transpose(0, 2, 1)
    if plan["model_type"] == "gpt_oss":  # gate and up interleaved along 2I
        def split(a):
            return np.concatenate([a[:, 0::2], a[:, 1::2]], axis=1)
        w["w13"] = split(w["w13"])
        w["w13_bias"] = split(take("experts.gate_up_proj_bias"))
        w["w2_bias"] = take("experts.down_proj_bias")
        w["router_bias"] = take("router.bias").astype(np.float32)  # the layer takes it in f32
    if plan["routing"]["correction_bias"]:
        w["correction_bias"] = take("gate.e_score_correction_bias",
                                    "gate.moe_statics.e_score_correction_bias",
                                    "e_score_correction_bias").reshape(-1)
    if plan["shared_intermediate_size"]:
        shared = ("shared_experts.", "shared_expert.", "shared_mlp.")
        w["shared_w13"] = np.concatenate([take(*(p + "gate_proj.weight" for p in shared)),
                                          take(*(p + "up_proj.weight" for p in shared))])
        w["shared_w2"] = take(*(p + "down_proj.weight" for p in shared))
    if plan["shared_gate"]:
        w["shared_gate"] = take("shared_expert_gate.weight")
    # A zero-width shared expert (qwen2_moe with width 0) contributes nothing.
    empty = {n for n, v in values.items() if v.size == 0 or n == "shared_expert_gate.weight"
             and plan["shared_intermediate_size"] == 0}
    left = set(values) - used - empty
    assert not left, f"parameters the compiled layer does not take: {sorted(left)}"
    return {k: np.ascontiguousarray(v) for k, v in w.items()}


def _hf_forward(block, x):
    with torch.inference_mode():
        y = block(torch.from_numpy(x)[None])
        y = y[0] if isinstance(y, tuple) else y
        return y.reshape(x.shape).float().numpy()


def _error(y, ref):
    return float(np.abs(y - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("minimal", [False, True], ids=["saved", "minimal"])
@pytest.mark.parametrize("name", sorted(_families()))
def test_matches_transformers_block(name, minimal, tmp_path):
    config_json, block = _build(name, minimal)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config_json))
    library, plan = compile_config(path, tmp_path)
    values = _randomize(block, seed=sum(map(ord, name)))
    weights = _layer_weights(values, plan)
    x = np.random.default_rng(1).standard_normal((TOKENS, plan["hidden_size"])).astype(np.float32)
    ref = _hf_forward(block, x)
    y = np.asarray(run_layer(library, plan, x, weights))
    assert _error(y, ref) <= TOLERANCE, (name, _error(y, ref), config_json)
    # Negative control: gate and up swapped must not pass (and, for a gated
    # shared expert, the gate's sign flipped).
    i = plan["intermediate_size"]
    swapped = dict(weights, w13=np.ascontiguousarray(
        np.concatenate([weights["w13"][:, i:], weights["w13"][:, :i]], axis=1)))
    bad = np.asarray(run_layer(library, plan, x, swapped))
    assert _error(bad, ref) > 100 * TOLERANCE, (name, _error(bad, ref))
    if plan["shared_gate"]:
        flipped = dict(weights, shared_gate=-weights["shared_gate"])
        bad = np.asarray(run_layer(library, plan, x, flipped))
        assert _error(bad, ref) > 100 * TOLERANCE, (name, "gate", _error(bad, ref))
    for bias in ("router_bias", "w13_bias", "w2_bias"):  # gpt-oss: each bias counts
        if bias in weights:
            bad = np.asarray(run_layer(library, plan, x, dict(weights, **{bias: -weights[bias]})))
            assert _error(bad, ref) > 100 * TOLERANCE, (name, bias, _error(bad, ref))


def test_deepseek_v2_group_rule_changes_the_layer():
    """The V2 comparison above can fail: on its inputs, transformers' own
    group-limited block differs from its plain greedy one."""
    config_json, block = _build("deepseek_v2_group_limited", minimal=False)
    values = _randomize(block, seed=sum(map(ord, "deepseek_v2_group_limited")))
    greedy = getattr(_module("deepseek_v2"), "DeepseekV2Moe")(
        transformers.DeepseekV2Config(**{**block.config.to_dict(), "topk_method": "greedy"})).float()
    with torch.no_grad():
        for name, p in list(greedy.named_parameters()) + list(greedy.named_buffers()):
            p.copy_(torch.from_numpy(values[name]))
    x = np.random.default_rng(1).standard_normal((TOKENS, 32)).astype(np.float32)
    assert _error(_hf_forward(greedy, x), _hf_forward(block, x)) > 1e-3


def _compile_with(path, out_dir, *flags):
    import subprocess
    from moec.toolchain import tool
    library, plan_path = out_dir / "layer.so", out_dir / "layer.plan.json"
    subprocess.run([tool("moe-compile"), "--config", str(path), "--plan", str(plan_path),
                    "-o", str(library), *flags], check=True)
    return library, json.loads(plan_path.read_text())


@pytest.mark.parametrize("name", ["qwen3_moe", "mixtral", "olmoe", "gpt_oss"])
def test_bf16_router_matches_transformers_bf16_block(name, tmp_path):
    """In a bf16 model transformers computes router logits in bf16; with
    --router-dtype bf16 the compiled bf16 layer does too, and every token is
    within bf16 rounding of the bf16 block. Tokens whose bf16 logits tie
    exactly at the top-k cut are left out: there torch.topk's order is
    unspecified (it is not the lower index either), ours takes the lower
    expert id."""
    import ml_dtypes
    tokens = 4096
    config_json, block = _build(name, minimal=False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config_json))
    values = _randomize(block, seed=sum(map(ord, name)))
    block = block.to(torch.bfloat16)
    x = np.random.default_rng(5).standard_normal((tokens, 32)).astype(np.float32)
    xb = torch.from_numpy(x).to(torch.bfloat16)
    with torch.inference_mode():
        ref = block(xb[None])
        ref = (ref[0] if isinstance(ref, tuple) else ref).reshape(tokens, 32).float().numpy()
        router = block.router if hasattr(block, "router") else block.gate  # gpt-oss: biased
        logits = torch.nn.functional.linear(xb, router.weight, getattr(router, "bias", None))
        logits = logits.float().numpy()
    k = config_json.get("num_experts_per_tok", 2)
    ranked = np.sort(logits, axis=1)[:, ::-1]
    clear = ranked[:, k - 1] != ranked[:, k]
    assert clear.mean() > 0.99, clear.mean()
    bf16 = {n: torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy()
            .view(ml_dtypes.bfloat16) for n, v in values.items()}
    x_bf16 = xb.view(torch.int16).numpy().view(ml_dtypes.bfloat16)

    def token_errors(router_dtype, scale):
        out = tmp_path / router_dtype
        out.mkdir()
        library, plan = _compile_with(path, out, "--dtype", "bf16",
                                      "--router-dtype", router_dtype)
        y = np.asarray(run_layer(library, plan, x_bf16, _layer_weights(bf16, plan)),
                       dtype=np.float32)
        return (np.abs(y - ref).max(axis=1) / scale)[clear]

    matched = token_errors("bf16", np.abs(ref).max())
    assert matched.max() <= 2e-2, (name, float(matched.max()))
    # Rounding is monotonic, so f32 logits choose the same experts outside
    # ties; what bf16 logits reproduce is transformers' weights (the softmax
    # of the rounded logits): on average closer to the block.
    assert matched.mean() < token_errors("f32", np.abs(ref).max()).mean(), name


@pytest.mark.parametrize("name", ["qwen2_moe", "llama4_text", "deepseek_v2_group_limited",
                                  "gpt_oss_tight_clamp"])
def test_numpy_reference_agrees_with_transformers(name, tmp_path):
    """The numpy reference the main job and benchmarks use follows the newer
    families too (gated shared expert, score on the input, V2's group rule)."""
    from moec.reference import layer as reference_layer
    config_json, block = _build(name, minimal=False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config_json))
    _, plan = compile_config(path, tmp_path)
    weights = _layer_weights(_randomize(block, seed=3), plan)
    x = np.random.default_rng(2).standard_normal((TOKENS, plan["hidden_size"])).astype(np.float32)
    assert _error(reference_layer(x, weights, plan), _hf_forward(block, x)) <= 1e-5
