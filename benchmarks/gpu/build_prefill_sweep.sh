#!/usr/bin/env bash
# Compiles the large bf16 layers once per prefill GEMM shape
# (--gpu-prefill-block, --gpu-prefill-stages, --gpu-prefill-stage-depth,
# --gpu-prefill-mma) for gpu_layers.py to time side by side at T = 4096: the
# narrow form against blocks of R x C with S stages of depth D, their
# products by mma.sync or (sm_90a) wgmma.
# Usage: benchmarks/gpu/build_prefill_sweep.sh [out-dir (default benchmarks/gpu/sweep)] [chip]
#        [shapes, e.g. "narrow:2:32 64x128:3:32 64x128:4:64:wgmma" (block:stages:depth[:mma])]
#        [weights: "dequantize" (bf16, the default) or "keep" (DeepSeek-V3's FP8 codes)]
# MOE_COMPILE names another moe-compile (e.g. a copy built from an older
# commit, to time two compilers' kernels side by side); SWEEP_OPTS adds
# moe-compile options (e.g. --gpu-fuse-swiglu); SWEEP_TAG is added to the
# names.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-benchmarks/gpu/sweep}
chip=${2:-sm_90a}
shapes=${3:-narrow:2:32 64x128:2:32 64x128:3:32 128x64:3:32 64x64:4:32 32x128:3:32}
weights=${4:-dequantize}
compile=${MOE_COMPILE:-build/bin/moe-compile}
layers="deepseek-v3:examples/full-size/deepseek-v3.json"
if [[ $weights == dequantize ]]; then
  layers+=" qwen3-30b-a3b:examples/full-size/qwen3-30b-a3b.json"
fi
kind=$([[ $weights == keep ]] && echo fp8 || echo bf16)
mkdir -p "$out"
entries=()
if [[ -f $out/manifest.json ]]; then  # add to the layers already there
  while read -r line; do entries+=("$line"); done < <(python3 -c '
import json, sys
for layer in json.load(open(sys.argv[1]))["layers"]:
    print(json.dumps(layer))' "$out/manifest.json")
fi
for layer in $layers; do
  for shape in $shapes; do
    IFS=: read -r block stages depth mma <<<"$shape"
    mma=${mma:-mma-sync}
    name="${layer%%:*}-$kind-$block-s$stages-d$depth-$mma${SWEEP_TAG:+-$SWEEP_TAG}"
    "$compile" --config "${layer#*:}" --dtype bf16 --target cuda --chip "$chip" \
      --fp8-weights="$weights" --max-tokens-per-rank 4096 --gpu-prefill-block "$block" \
      --gpu-prefill-stages "$stages" --gpu-prefill-stage-depth "$depth" \
      --gpu-prefill-mma "$mma" ${SWEEP_OPTS:-} --plan "$out/$name.plan.json" -o "$out/$name.so"
    entries+=("{\"name\": \"$name\", \"library\": \"$name.so\", \"plan\": \"$name.plan.json\", \"tokens\": [4096], \"ep\": 1}")
  done
done
# One entry a name, the latest.
printf '%s\n' "${entries[@]}" | python3 -c '
import json, sys
layers = {}
for line in sys.stdin:
    layer = json.loads(line)
    layers[layer["name"]] = layer
json.dump({"chip": sys.argv[1], "layers": list(layers.values())}, open(sys.argv[2], "w"), indent=1)
print(f"wrote {sys.argv[2]} ({len(layers)} layers)")' "$chip" "$out/manifest.json"
