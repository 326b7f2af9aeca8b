#!/usr/bin/env bash
# Compiles the large bf16 layers once per prefill GEMM shape
# (--gpu-prefill-block, --gpu-prefill-stages, --gpu-prefill-stage-depth,
# --gpu-prefill-mma) for gpu_layers.py to time side by side at T = 4096: the
# narrow form against blocks of R x C with S stages of depth D, their
# products by mma.sync or (sm_90a) wgmma.
# Usage: benchmarks/gpu/build_prefill_sweep.sh [out-dir (default benchmarks/gpu/sweep)] [chip]
#        [shapes, e.g. "narrow:2:32 64x128:3:32 64x128:4:64:wgmma" (block:stages:depth[:mma])]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-benchmarks/gpu/sweep}
chip=${2:-sm_90a}
shapes=${3:-narrow:2:32 64x128:2:32 64x128:3:32 128x64:3:32 64x64:4:32 32x128:3:32}
mkdir -p "$out"
entries=()
for layer in deepseek-v3:examples/full-size/deepseek-v3.json \
             qwen3-30b-a3b:examples/full-size/qwen3-30b-a3b.json; do
  for shape in $shapes; do
    IFS=: read -r block stages depth mma <<<"$shape"
    mma=${mma:-mma-sync}
    name="${layer%%:*}-bf16-$block-s$stages-d$depth-$mma"
    build/bin/moe-compile --config "${layer#*:}" --dtype bf16 --target cuda --chip "$chip" \
      --fp8-weights=dequantize --max-tokens-per-rank 4096 --gpu-prefill-block "$block" \
      --gpu-prefill-stages "$stages" --gpu-prefill-stage-depth "$depth" \
      --gpu-prefill-mma "$mma" --plan "$out/$name.plan.json" -o "$out/$name.so"
    entries+=("{\"name\": \"$name\", \"library\": \"$name.so\", \"plan\": \"$name.plan.json\", \"tokens\": [4096], \"ep\": 1}")
  done
done
{
  echo "{\"chip\": \"$chip\", \"layers\": ["
  (IFS=,; echo "${entries[*]}")
  echo "]}"
} >"$out/manifest.json"
echo "wrote $out/manifest.json (${#entries[@]} layers)"
