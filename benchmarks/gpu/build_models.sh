#!/usr/bin/env bash
# Compiles the shipped tiny HuggingFace checkpoints for the GPU the way a
# user does (moe-compile --model --target cuda), and writes what
# transformers' own MoE blocks make of seeded inputs next to each output, for
# gpu_models.py to check the moec package's CUDA layers against on a GPU
# machine (which has no MLIR and maybe no transformers).
# Usage: benchmarks/gpu/build_models.sh [out-dir (default benchmarks/gpu/models)] [chip]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-benchmarks/gpu/models}
chip=${2:-sm_90a}
mkdir -p "$out"
for name in qwen3-moe-tiny deepseek-v3-tiny gpt-oss-tiny; do
  build/bin/moe-compile --model "examples/$name" -o "$out/$name" --dtype bf16 --target cuda \
    --chip "$chip"
  python3 benchmarks/gpu/model_references.py "examples/$name" "$out/$name"
done
