#!/usr/bin/env bash
# Optional extras of the CPU benchmark (benchmarks/cpu/bench_layers.py); the
# project's tests need none of them. torch gives the torch column (without it
# the benchmark prints "torch: not installed" and goes on), transformers lets
# that column run HuggingFace's own Qwen3MoeSparseMoeBlock / DeepseekV3MoE,
# threadpoolctl pins numpy's BLAS threads in-process as well.
set -u
PY=${PYTHON:-python3}
"$PY" -m pip install threadpoolctl || echo "threadpoolctl: not installed (env variables still pin threads)"
"$PY" -c "import torch" 2>/dev/null \
  || "$PY" -m pip install --index-url https://download.pytorch.org/whl/cpu torch \
  || "$PY" -m pip install torch \
  || echo "torch: not installed (the benchmark prints 'torch: not installed' and goes on)"
"$PY" -c "import transformers" 2>/dev/null \
  || "$PY" -m pip install transformers \
  || echo "transformers: not installed (the torch column uses the HF-style loop in common.py)"
"$PY" -c "import numpy; print('numpy', numpy.__version__)"
"$PY" -c "import torch; print('torch', torch.__version__)" 2>/dev/null || true
"$PY" -c "import transformers; print('transformers', transformers.__version__)" 2>/dev/null || true
