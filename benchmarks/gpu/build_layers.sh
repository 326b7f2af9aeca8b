#!/usr/bin/env bash
# Compiles the layers that gpu_layers.py checks and times on a GPU machine
# (which has no MLIR): the two tiny examples (f32 and bf16) and a
# Qwen3-30B-A3B- and a DeepSeek-V3-shaped layer (bf16; DeepSeek-V3 also with
# its FP8 expert weights), and expert-parallel ones (ep 2), each as a CUDA library for --chip, with its plan
# report and a manifest.
# Usage: benchmarks/gpu/build_layers.sh [out-dir (default benchmarks/gpu/layers)] [chip]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-benchmarks/gpu/layers}
chip=${2:-sm_90a}
compile=build/bin/moe-compile
mkdir -p "$out"
entries=()
add() {  # name config dtype tokens [moe-compile options...]
  local name=$1 config=$2 dtype=$3 tokens=$4 ep=1
  shift 4
  for option in "$@"; do [[ $option == --ep=* ]] && ep=${option#--ep=}; done
  "$compile" --config "$config" --dtype "$dtype" --target cuda --chip "$chip" \
    --max-tokens-per-rank 4096 --plan "$out/$name.plan.json" -o "$out/$name.so" "$@"
  entries+=("{\"name\": \"$name\", \"library\": \"$name.so\", \"plan\": \"$name.plan.json\", \"tokens\": [$tokens], \"ep\": $ep}")
}
add qwen3-tiny-f32 examples/qwen3-moe-tiny/config.json f32 "1, 7, 64, 4096"
add qwen3-tiny-bf16 examples/qwen3-moe-tiny/config.json bf16 "1, 7, 64, 4096"
add deepseek-tiny-f32 examples/deepseek-v3-tiny/config.json f32 "1, 7, 64, 4096"
add deepseek-tiny-bf16 examples/deepseek-v3-tiny/config.json bf16 "1, 7, 64, 4096"
add qwen3-30b-a3b-bf16 examples/full-size/qwen3-30b-a3b.json bf16 "1, 7, 64, 4096"
add deepseek-v3-bf16 examples/full-size/deepseek-v3.json bf16 "1, 7, 64, 4096" --fp8-weights=dequantize
# The same with the shared expert on a second stream beside the routing,
# dispatch and routed experts (--gpu-shared-stream), timed beside it.
add deepseek-v3-bf16-shared-stream examples/full-size/deepseek-v3.json bf16 "1, 7, 64, 4096" \
  --fp8-weights=dequantize --gpu-shared-stream
# The checkpoint's FP8 expert weights (128 x 128 block scales) kept as codes
# (the default).
add deepseek-v3-fp8 examples/full-size/deepseek-v3.json bf16 "1, 7, 64, 4096" --fp8-weights=keep
# The same with FP8 rows: the prefill GEMMs quantize their rows per 128 and
# multiply E4M3 by E4M3 (--gpu-fp8-rows; T = 64 takes the decode form).
add deepseek-v3-fp8-rows examples/full-size/deepseek-v3.json bf16 "64, 4096" --fp8-weights=keep \
  --gpu-fp8-rows
# Chunked to a 64 MiB activation budget: 4096 tokens in chunks, the
# workspace that of one chunk.
add qwen3-30b-a3b-bf16-chunked examples/full-size/qwen3-30b-a3b.json bf16 "7, 4096" \
  --chunk-budget-bytes=67108864
# Expert-parallel layers for run_gpu_ep.sh (2 MPI ranks on one GPU): decode
# up to 8 tokens per rank, prefill above; the tokens are rank 0's (0: rank 0
# empty).
add qwen3-tiny-bf16-ep2 examples/qwen3-moe-tiny/config.json bf16 "0, 1, 7, 64, 1000" \
  --ep=2 --decode-max-tokens=8
add deepseek-tiny-bf16-ep2 examples/deepseek-v3-tiny/config.json bf16 "0, 1, 7, 64, 1000" \
  --ep=2 --decode-max-tokens=8
add qwen3-30b-a3b-bf16-ep2 examples/full-size/qwen3-30b-a3b.json bf16 "1, 7, 64, 1000" \
  --ep=2 --decode-max-tokens=8
add qwen3-30b-a3b-bf16-ep2-fp8 examples/full-size/qwen3-30b-a3b.json bf16 "7, 1000" \
  --ep=2 --decode-max-tokens=8 --dispatch-quant=fp8-e4m3-g128
# The decode variant's exchange by all-gather (--ep-all-gather): blocks of 8
# token rows a rank, ids mapped and rows summed by the layer's kernels.
add deepseek-tiny-bf16-ep2-allgather examples/deepseek-v3-tiny/config.json bf16 \
  "0, 1, 7, 64" --ep=2 --decode-max-tokens=8 --ep-all-gather
add qwen3-30b-a3b-bf16-ep2-allgather examples/full-size/qwen3-30b-a3b.json bf16 "1, 7" \
  --ep=2 --decode-max-tokens=8 --ep-all-gather
# FP8 rows by all-gather: the layer's kernels quantize before and dequantize after.
add qwen3-30b-a3b-bf16-ep2-allgather-fp8 examples/full-size/qwen3-30b-a3b.json bf16 "1, 7" \
  --ep=2 --decode-max-tokens=8 --ep-all-gather --dispatch-quant=fp8-e4m3-g128
# The prefill exchange packed by the layer's kernels (--ep-pack-in-layer):
# destinations, grouping by rank and the returned rows' sums on the device.
add deepseek-tiny-bf16-ep2-pack examples/deepseek-v3-tiny/config.json bf16 "0, 1, 64, 1000" \
  --ep=2 --ep-pack-in-layer
add qwen3-30b-a3b-bf16-ep2-pack examples/full-size/qwen3-30b-a3b.json bf16 "64, 1000" \
  --ep=2 --ep-pack-in-layer
add qwen3-30b-a3b-bf16-ep2-pack-fp8 examples/full-size/qwen3-30b-a3b.json bf16 "64, 1000" \
  --ep=2 --ep-pack-in-layer --dispatch-quant=fp8-e4m3-g128
# An FP8 dispatch (g128) read as it came: with FP8 weights and --gpu-fp8-rows the gate/up GEMM
# multiplies the received E4M3 codes by its scales (every rank holds 128 FP8 experts).
add deepseek-v3-fp8-rows-ep2-codes examples/full-size/deepseek-v3.json bf16 "7, 1000" \
  --ep=2 --decode-max-tokens=8 --gpu-fp8-rows --dispatch-quant=fp8-e4m3-g128
# The same with UE8M0 scales per 32: each k32 product joins the total times its own row scale.
add deepseek-v3-fp8-rows-ep2-codes-g32 examples/full-size/deepseek-v3.json bf16 "7, 1000" \
  --ep=2 --decode-max-tokens=8 --gpu-fp8-rows --dispatch-quant=fp8-e4m3-g32-ue8m0
# bf16 weights reading the FP8 dispatch's codes (--fp8-gemm=true): the decode form dequantizes
# as it loads, the prefill form after one dequantize kernel (next to -ep2-fp8, which
# dequantizes on receipt).
add qwen3-30b-a3b-bf16-ep2-fp8-codes examples/full-size/qwen3-30b-a3b.json bf16 "7, 1000" \
  --ep=2 --decode-max-tokens=8 --dispatch-quant=fp8-e4m3-g128 --fp8-gemm=true
# The shared expert on a second stream while the ranks exchange rows.
add deepseek-tiny-bf16-ep2-shared-stream examples/deepseek-v3-tiny/config.json bf16 \
  "0, 1, 7, 64, 1000" --ep=2 --decode-max-tokens=8 --gpu-shared-stream
# Both ranks one tensor-parallel group (the same tokens), each dispatching
# half of them (the dedupe), then all-gathering the results.
add deepseek-tiny-bf16-ep2-tp2 examples/deepseek-v3-tiny/config.json bf16 "1, 7, 64, 1000" \
  --ep=2 --tp=2 --decode-max-tokens=8
{
  echo "{\"chip\": \"$chip\", \"layers\": ["
  (IFS=,; echo "${entries[*]}")
  echo "]}"
} >"$out/manifest.json"
echo "wrote $out/manifest.json (${#entries[@]} layers)"
