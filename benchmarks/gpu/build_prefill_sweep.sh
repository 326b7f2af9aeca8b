#!/usr/bin/env bash
# Compiles the large bf16 layers once per prefill GEMM shape
# (--gpu-prefill-block, --gpu-prefill-stages) for gpu_layers.py to time side
# by side at T = 4096: the narrow form against blocks of R x C with S stages.
# Usage: benchmarks/gpu/build_prefill_sweep.sh [out-dir (default benchmarks/gpu/sweep)] [chip]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-benchmarks/gpu/sweep}
chip=${2:-sm_90a}
mkdir -p "$out"
entries=()
for layer in deepseek-v3:examples/full-size/deepseek-v3.json \
             qwen3-30b-a3b:examples/full-size/qwen3-30b-a3b.json; do
  for shape in narrow:2 64x128:2 64x128:3 128x64:3 64x64:4 32x128:3; do
    block=${shape%:*} stages=${shape#*:}
    name="${layer%%:*}-bf16-$block-s$stages"
    build/bin/moe-compile --config "${layer#*:}" --dtype bf16 --target cuda --chip "$chip" \
      --fp8-weights=dequantize --max-tokens-per-rank 4096 --gpu-prefill-block "$block" \
      --gpu-prefill-stages "$stages" --plan "$out/$name.plan.json" -o "$out/$name.so"
    entries+=("{\"name\": \"$name\", \"library\": \"$name.so\", \"plan\": \"$name.plan.json\", \"tokens\": [4096], \"ep\": 1}")
  done
done
{
  echo "{\"chip\": \"$chip\", \"layers\": ["
  (IFS=,; echo "${entries[*]}")
  echo "]}"
} >"$out/manifest.json"
echo "wrote $out/manifest.json (${#entries[@]} layers)"
