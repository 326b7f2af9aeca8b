#!/usr/bin/env bash
# On a GPU machine, every GPU check and benchmark in one call, most wanted
# first, each within what is left of a wall-clock budget (a lent GPU comes
# with minutes, and each call of the device tool starts slowly):
#   check   runtime/gpu/run_gpu_check.sh (the NCCL backend on one rank)
#   layers  benchmarks/gpu/run_gpu_layers.sh --budget-s 0.2 --profile
#   models  benchmarks/gpu/run_gpu_models.sh
#   ep      benchmarks/gpu/run_gpu_ep.sh (2 MPI ranks)
# A step that fails or runs out of time does not stop the next ones.
# Usage: benchmarks/gpu/run_gpu_all.sh [budget seconds (default 540)] [steps (default all)]
#   e.g. run_gpu_all.sh 300 layers,ep
# Results: each step's log and JSON in $OUT (or ./gpu-results), a summary
# line per step on stdout; exits non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
budget=${1:-540}
steps=${2:-check,layers,models,ep}
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
export OUT=$out
start=$SECONDS
summary=()
failed=0

for step in ${steps//,/ }; do
  case $step in
    check) command=(bash runtime/gpu/run_gpu_check.sh) ;;
    layers) command=(bash benchmarks/gpu/run_gpu_layers.sh --budget-s 0.2 --profile) ;;
    models) command=(bash benchmarks/gpu/run_gpu_models.sh) ;;
    ep) command=(bash benchmarks/gpu/run_gpu_ep.sh) ;;
    *) echo "run_gpu_all.sh: unknown step '$step' (check, layers, models, ep)" >&2; exit 2 ;;
  esac
  left=$((budget - (SECONDS - start)))
  if [ "$left" -lt 20 ]; then
    summary+=("$step: skipped (${left} s of the budget left)")
    failed=1
    continue
  fi
  echo "== $step (${left} s left): ${command[*]}"
  began=$SECONDS
  timeout --kill-after=10 "$left" "${command[@]}" 2>&1 | tee "$out/$step.log"
  rc=${PIPESTATUS[0]}
  took=$((SECONDS - began))
  case $rc in
    0) summary+=("$step: passed (${took} s)") ;;
    124 | 137) summary+=("$step: ran out of time after ${took} s") ;;
    *) summary+=("$step: failed, exit code $rc (${took} s)") ;;
  esac
  [ "$rc" -eq 0 ] || failed=1
done

echo "== summary (logs and JSON in $out)"
printf '%s\n' "${summary[@]}"
exit "$failed"
