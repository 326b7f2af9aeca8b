"""Whole GPU layers, as `moe-compile --target cuda` builds them, executed on the
CPU against transformers' own MoE blocks, and expert-parallel ones on MPI ranks.

`moe-compile --emit=launches` stops the CUDA pipeline where every kernel is
still a gpu.launch region of its host function (the same options, passes and
workspace plan as the library). test/Integration/GPU/kernel_emulator.py runs
that function: the workspace sizing function, the host's form choices, every
kernel (routing, dispatch, tensor-core GEMMs by mma.sync or wgmma, activation,
combine, shared expert) in lockstep with its race, barrier and fence checks,
every workspace buffer a view whose bytes must not be overwritten by another
buffer while it is read. The reference is the family's transformers block in
f32 with the same bf16-rounded parameters and tokens; the layer computes in
bf16 (rows, hidden activations and output rounded), so the bound is the
issue's 2e-2 of max |y|. Negative control: gate and up swapped must fail it.
"""
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import torch  # utils/setup.sh installs torch and transformers
import transformers

from moec.main import mpirun
from moec.toolchain import ROOT, tool
from moec.weights import dequantize_fp8_blocks, quantize_fp8_blocks
from test_hf_families import _hf_forward, _layer_weights, _module, _randomize

sys.path.insert(0, str(ROOT / "test" / "Integration" / "GPU"))
import kernel_emulator as emulator  # noqa: E402

BF16 = emulator.BF16
TOLERANCE = 2e-2  # of max |y|: bf16 (issue 12)
SMALL = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2)
FP8_BLOCK = (128, 128)
FP8_ROWS_TOLERANCE = 0.1  # rows quantized per 128 (E4M3): docs/FP8Dispatch.md's bound


def _families():
    """name -> (config, block class, module). 32 experts (the warp route
    kernel's multiple); H = 128 and I = 64: the gate/up GEMM (K = 128) has a
    decode form beside its prefill form, the down GEMM (K = 64) a prefill
    form only."""
    t = transformers
    return {
        "qwen3_moe": lambda: (t.Qwen3MoeConfig(moe_intermediate_size=64, num_experts=32,
                                               num_experts_per_tok=4, norm_topk_prob=True,
                                               **SMALL), "Qwen3MoeSparseMoeBlock", "qwen3_moe"),
        # Sigmoid scores, a correction bias, 4 groups of which 2, a shared expert.
        "deepseek_v3": lambda: (t.DeepseekV3Config(
            moe_intermediate_size=64, n_routed_experts=32, num_experts_per_tok=4, n_group=4,
            topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5, q_lora_rank=16,
            kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, **SMALL),
            "DeepseekV3MoE", "deepseek_v3"),
        "mixtral": lambda: (t.MixtralConfig(intermediate_size=64, num_local_experts=32,
                                            num_experts_per_tok=2, **SMALL),
                            "MixtralSparseMoeBlock", "mixtral"),
        # Router and expert biases, the clamped SwiGLU, gate and up interleaved.
        "gpt_oss": lambda: (t.GptOssConfig(intermediate_size=64, num_local_experts=32,
                                           num_experts_per_tok=4, head_dim=8, **SMALL),
                            "GptOssMLP", "gpt_oss"),
        # FP8 E4M3 expert weights with 128 x 128 block scales (DeepSeek-V3's
        # checkpoint format); the layer keeps the codes.
        "deepseek_v3_fp8": lambda: (t.DeepseekV3Config(
            moe_intermediate_size=128, n_routed_experts=32, num_experts_per_tok=4, n_group=4,
            topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5, q_lora_rank=16,
            kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8,
            **SMALL), "DeepseekV3MoE", "deepseek_v3"),
        # Top-1 by sigmoid scaling the expert's input; a shared expert.
        "llama4_text": lambda: (t.Llama4TextConfig(intermediate_size=64, num_local_experts=32,
                                                   head_dim=8, **SMALL),
                                "Llama4TextMoe", "llama4"),
    }


def _build(name):
    config, block_class, module = _families()[name]()
    block = getattr(_module(module), block_class)(config).float().eval()
    text = json.loads(config.to_json_string(use_diff=True))
    text["model_type"] = config.model_type
    if name.endswith("_fp8"):
        text["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                       "activation_scheme": "dynamic",
                                       "weight_block_size": list(FP8_BLOCK)}
    return text, block


def _bf16(a):
    return np.asarray(a, np.float32).astype(BF16)


def _compile(config_json, tmp_path, flags):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config_json))
    ir, plan = tmp_path / "layer.mlir", tmp_path / "plan.json"
    subprocess.run([tool("moe-compile"), "--config", str(path), "--dtype", "bf16", "--target",
                    "cuda", "--emit=launches", "--plan", str(plan), "-o", str(ir), *flags],
                   check=True)
    return ir.read_text(), json.loads(plan.read_text())


def _run(text, plan, x, weights):
    """y of the emulated entry: the plan's parameters, then y, the workspace
    (as its sizing function asks) and a stream."""
    tokens = np.array(x.shape[0], np.int64)
    sized = emulator.run_function(text, "moe_layer_workspace_bytes", tokens)
    workspace = np.zeros(int(np.asarray(sized.results[0]).ravel()[0]), np.uint8)
    args = []
    for p in plan["entry_point"]["parameters"]:
        if p["name"] == "phase":
            args.append(np.array(0, np.int32))  # by the token count
        else:
            args.append(x if p["name"] == "x" else weights[p["name"]])
    y = np.zeros(x.shape, BF16)
    host = emulator.run_function(text, "moe_layer", *args, y, workspace, np.zeros(1, np.int64))
    return y.astype(np.float32), host


# The grouped GEMMs take their prefill form above E (64 + 15) = 2528 rows: T = 700
# at 4 choices a token.
CASES = [  # (family, moe-compile flags, tokens)
    ("qwen3_moe", [], [1, 7, 64, 200, 700]),
    ("qwen3_moe", ["--gpu-prefill-mma", "wgmma", "--gpu-prefill-block", "128x64",
                   "--gpu-prefill-stages", "2"], [700]),
    ("deepseek_v3", [], [1, 64, 200]),
    ("deepseek_v3", ["--decode-max-tokens", "64"], [1, 65]),
    ("deepseek_v3", ["--gpu-shared-stream"], [5]),
    ("deepseek_v3", ["--gpu-shared-stream", "--decode-max-tokens", "64"], [1, 65]),
    ("mixtral", [], [3, 150]),
    ("mixtral", ["--chunk-budget-bytes", "40000"], [150]),
    ("gpt_oss", [], [2, 130]),
    ("llama4_text", [], [4, 100]),
    ("qwen3_moe", ["--gpu-prefill-mma", "wgmma", "--gpu-prefill-block", "128x64",
                   "--gpu-fuse-swiglu"], [700]),
    ("deepseek_v3_fp8", [], [1, 64]),
    ("deepseek_v3_fp8", ["--gpu-prefill-mma", "wgmma", "--gpu-prefill-block", "128x128"],
     [700]),
    ("deepseek_v3_fp8", ["--gpu-prefill-mma", "wgmma", "--gpu-prefill-block", "128x128",
                         "--gpu-fp8-rows"], [700]),
]


# Marked emulation: pure Python (the kernel emulator), not run in the
# sanitizer tier (utils/sanitize.sh). The expert-parallel test below is: its
# ranks call the instrumented libmoert.
@pytest.mark.emulation
@pytest.mark.parametrize("name, flags, tokens", CASES,
                         ids=[f"{c[0]}{''.join(c[1]).replace('--', '-')}" for c in CASES])
def test_emulated_gpu_layer_matches_transformers(name, flags, tokens, tmp_path):
    config_json, block = _build(name)
    text, plan = _compile(config_json, tmp_path, flags)
    values = _randomize(block, seed=sum(map(ord, name)))
    rounded = {n: _bf16(v) for n, v in values.items()}
    codes = {}
    if name.endswith("_fp8"):  # the experts hold what their codes and scales stand for
        for n in ("experts.gate_up_proj", "experts.down_proj"):
            c, scale = quantize_fp8_blocks(values[n], FP8_BLOCK)
            codes[n] = (c.view(np.int8), scale)
            rounded[n] = dequantize_fp8_blocks(c, scale, FP8_BLOCK)
    with torch.no_grad():  # the block computes on the bf16 values, in f32
        for n, p in list(block.named_parameters()) + list(block.named_buffers()):
            p.copy_(torch.from_numpy(rounded[n].astype(np.float32)))
    weights = {n: (v.astype(np.float32) if n == "correction_bias" else v)
               for n, v in _layer_weights(rounded, plan).items()}
    if codes:
        weights["w13"], weights["w13_scale"] = codes["experts.gate_up_proj"]
        weights["w2"], weights["w2_scale"] = codes["experts.down_proj"]
    tolerance = FP8_ROWS_TOLERANCE if "--gpu-fp8-rows" in flags else TOLERANCE
    for t in tokens:
        x = _bf16(np.random.default_rng(t).standard_normal((t, plan["hidden_size"])))
        ref = _hf_forward(block, x.astype(np.float32))
        y, host = _run(text, plan, x, weights)
        error = float(np.abs(y - ref).max() / np.abs(ref).max())
        assert error <= tolerance, (name, flags, t, error)
    i = plan["intermediate_size"]
    swapped = dict(weights, w13=np.ascontiguousarray(
        np.concatenate([weights["w13"][:, i:], weights["w13"][:, :i]], axis=1)))
    y, _ = _run(text, plan, x, swapped)
    assert float(np.abs(y - ref).max() / np.abs(ref).max()) > 5 * tolerance


@pytest.mark.emulation
def test_overlapping_workspace_buffers_are_caught(tmp_path):
    """The emulator's check of the workspace plan: the route's expert weights
    moved onto its expert ids' bytes (both live until the combine) is
    reported, not silently computed."""
    config_json, block = _build("qwen3_moe")
    text, plan = _compile(config_json, tmp_path, [])
    values = _randomize(block, seed=3)
    weights = _layer_weights({n: _bf16(v) for n, v in values.items()}, plan)
    # Views of the workspace (the entry's checked view of its argument).
    views = re.findall(r"= memref\.view (%\w+)\[(%\w+)\]\[.*memref<\?x4x(?:i32|f32)>", text)
    (workspace, first), (_, second) = views[:2]  # the route's ids and weights
    moved = text.replace(f"memref.view {workspace}[{second}]", f"memref.view {workspace}[{first}]",
                         1)
    x = _bf16(np.random.default_rng(0).standard_normal((9, plan["hidden_size"])))
    _run(text, plan, x, weights)  # as planned: no complaint
    with pytest.raises(emulator.KernelError, match="two live buffers overlap"):
        _run(moved, plan, x, weights)


@pytest.mark.emulation
@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v3_fp8"])
def test_side_stream_order_is_checked(name, tmp_path):
    """The shared expert's kernels on the side stream (--gpu-shared-stream):
    the emulator runs the fork and the join that moe-gpu-side-stream placed,
    and checks the order of every byte of the arguments and the workspace
    between the two streams. Without the fork (the side stream would read x
    before the caller's work wrote it) or the join (the combine would add
    rows the side stream may not have written), it reports the race."""
    config_json, block = _build(name)
    text, plan = _compile(config_json, tmp_path, ["--gpu-shared-stream"])
    values = _randomize(block, seed=5)
    weights = {n: (v.astype(np.float32) if n == "correction_bias" else v)
               for n, v in _layer_weights({n: _bf16(v) for n, v in values.items()}, plan).items()}
    if name.endswith("_fp8"):
        for n, w in (("experts.gate_up_proj", "w13"), ("experts.down_proj", "w2")):
            c, scale = quantize_fp8_blocks(values[n], FP8_BLOCK)
            weights[w], weights[w + "_scale"] = c.view(np.int8), scale
    x = _bf16(np.random.default_rng(1).standard_normal((6, plan["hidden_size"])))
    _, host = _run(text, plan, x, weights)
    assert host.side_launches > 0
    for call in ("moertGpuForkSide", "moertGpuJoinSide"):
        dropped, found = re.subn(rf"\n *call @{call}\(%\w+\) : \(!llvm\.ptr\) -> \(\)", "",
                                 text, count=1)
        assert found == 1, call
        with pytest.raises(emulator.KernelError, match="no fork or join between them"):
            _run(dropped, plan, x, weights)


# A runtime call on the entry's stream writes x, which a side kernel reads.
RUNTIME_WRITE_THEN_SIDE_READ = """
module {
  func.func private @fill(memref<4xf32>)
  func.func @k(%x: memref<4xf32> {moe.gpu_written}, %y: memref<4xf32> {moe.gpu_written},
               %s: !llvm.ptr {moe.gpu_stream}) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    call @fill(%x) : (memref<4xf32>) -> ()
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c4, %sy = %c1, %sz = %c1)
               function(@moe_side_stream) {
      %v = memref.load %x[%tx] : memref<4xf32>
      memref.store %v, %y[%tx] : memref<4xf32>
      gpu.terminator
    }
    return
  }
}
"""


@pytest.mark.emulation
def test_runtime_call_writes_are_ordered_with_the_side_stream():
    """What a runtime call writes on the entry's stream counts for the
    streams' order too (the bytes of its buffers it changed): the side
    kernel that reads them must be forked after the call, where
    moe-gpu-side-stream puts the fork. Forked before it, the read races."""
    text = subprocess.run([str(tool("moe-opt")), "--moe-gpu-side-stream"],
                          input=RUNTIME_WRITE_THEN_SIDE_READ, capture_output=True, text=True,
                          check=True).stdout
    fork = re.search(r"\n *call @moertGpuForkSide\(%\w+\) : \(!llvm\.ptr\) -> \(\)", text)
    fill = re.search(r"\n *call @fill\(", text)
    assert fork and fill and fill.start() < fork.start()

    def run(module):
        x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
        fill_x = {"fill": lambda op, values: values[0].array.__setitem__(slice(None), 7.0)}
        emulator.run_function(module, "k", x, y, np.zeros(1, np.int64), externals=fill_x)
        return y

    assert (run(text) == 7.0).all()
    forked_first = text[:fill.start()] + fork.group(0) + text[fill.start():fork.start()] + \
        text[fork.end():]
    with pytest.raises(emulator.KernelError, match=r"side stream\) reads bytes \d+\.\. of .*"
                       "runtime call on the entry's stream wrote, with no fork or join"):
        run(forked_first)


EXAMPLES = ROOT / "examples"
EP_CASES = [  # (name, config, ranks, tokens a rank, scenario, rows quantized, flags)
    ("qwen3_ep2", "qwen3-moe-tiny", 2, 12, "uniform", "none", []),
    ("qwen3_ep2_empty_rank", "qwen3-moe-tiny", 2, 12, "empty-rank", "none", []),
    ("qwen3_ep4_one_rank", "qwen3-moe-tiny", 4, 6, "one-rank", "none", []),
    ("deepseek_v3_ep2_decode_variant", "deepseek-v3-tiny", 2, 5, "uniform", "none",
     ["--decode-max-tokens", "8"]),
    ("deepseek_v3_ep2_all_gather", "deepseek-v3-tiny", 2, 5, "uniform", "none",
     ["--decode-max-tokens", "8", "--ep-all-gather"]),
    # The shared expert on the side stream beside the exchange (the runtime's calls on the
    # entry's stream, ordered after the side kernels whose buffers they read).
    ("deepseek_v3_ep2_shared_stream", "deepseek-v3-tiny", 2, 5, "uniform", "none",
     ["--decode-max-tokens", "8", "--gpu-shared-stream"]),
    ("qwen3_ep2_pack_in_layer", "qwen3-moe-tiny", 2, 12, "uniform", "none",
     ["--decode-max-tokens", "8", "--ep-pack-in-layer"]),
    # Tensor-parallel pairs holding the same tokens: one dispatch a pair (the dedupe).
    ("qwen3_ep4_tp2_dedupe", "qwen3-moe-tiny", 4, 10, "uniform", "none", ["--tp", "2"]),
    ("deepseek_v3_ep4_tp2_all_gather", "deepseek-v3-tiny", 4, 5, "uniform", "none",
     ["--tp", "2", "--decode-max-tokens", "8", "--ep-all-gather"]),
    # bf16 weights reading the codes (--fp8-gemm=true given): the gate/up GEMM (K = 64, a
    # prefill form only) reads what the dequantize kernel writes.
    ("qwen3_ep2_bf16_weights_read_codes", "qwen3-moe-tiny", 2, 12, "uniform",
     "fp8-e4m3-g32-ue8m0", ["--dispatch-quant", "fp8-e4m3-g32-ue8m0", "--fp8-gemm=true"]),
    ("fp8_ep2_codes_g32", "deepseek_v3_fp8", 2, 12, "uniform", "fp8-e4m3-g32-ue8m0",
     ["--dispatch-quant", "fp8-e4m3-g32-ue8m0", "--gpu-fp8-rows", "--gpu-prefill-mma", "wgmma",
      "--gpu-prefill-block", "128x128"]),
    # 330 tokens a rank: ~1,300 rows an expert-parallel rank receives, above its decode
    # limit (16 experts x 79): the FP8 rows prefill form by wgmma runs on the codes.
    ("fp8_ep2_codes_g128_prefill", "deepseek_v3_fp8", 2, 330, "uniform", "fp8-e4m3-g128",
     ["--dispatch-quant", "fp8-e4m3-g128", "--gpu-fp8-rows", "--gpu-prefill-mma", "wgmma",
      "--gpu-prefill-block", "128x128"]),
]


@pytest.mark.parametrize("name, config, ranks, tokens, scenario, quant, flags", EP_CASES,
                         ids=[c[0] for c in EP_CASES])
def test_emulated_expert_parallel_layer_matches_the_reference(name, config, ranks, tokens,
                                                              scenario, quant, flags, tmp_path):
    """Each rank emulates its layer, the exchanges through libmoert on MPI (host
    memory), and compares its tokens' y with moec.reference (the experts' rows
    quantized as the FP8 dispatch delivers them). With FP8 rows the down GEMM's
    rows are quantized too, which the reference does not: the FP8 dispatch's
    bound then."""
    if (EXAMPLES / config).is_dir():
        path = EXAMPLES / config / "config.json"
    else:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(_build(config)[0]))
    ir, plan = tmp_path / "layer.mlir", tmp_path / "plan.json"
    subprocess.run([tool("moe-compile"), "--config", str(path), "--dtype", "bf16", "--target",
                    "cuda", "--ep", str(ranks), "--max-tokens-per-rank", str(tokens + 3 * ranks),
                    "--emit=launches", "--plan", str(plan), "-o", str(ir), *flags], check=True)
    tolerance = FP8_ROWS_TOLERANCE if "--gpu-fp8-rows" in flags else TOLERANCE
    tp = flags[flags.index("--tp") + 1] if "--tp" in flags else "1"
    done = mpirun(ranks, sys.executable,
                  str(ROOT / "test" / "Integration" / "GPU" / "ep_layer_emulation.py"),
                  "--ir", str(ir), "--plan", str(plan), "--tokens", str(tokens), "--scenario",
                  scenario, "--tp", tp, "--expert-rows-quantization", quant, "--tolerance",
                  str(tolerance),
                  "--out", str(tmp_path))
    results = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert len(results) == ranks, done.stdout[-3000:] + done.stderr[-3000:]
    for r in results:
        assert r["ok"], r
    if name.endswith("_prefill"):
        assert all("nvvm.wgmma.mma_async" in r["ran"] for r in results), results
    if "--gpu-shared-stream" in flags:
        assert all(r["side_stream_kernels"] > 0 for r in results), results
