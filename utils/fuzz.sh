#!/usr/bin/env bash
# Runs the libFuzzer targets (fuzz/<name>_fuzzer.cpp, built in build-san/ with
# ASan + UBSan by utils/sanitize.sh --build-only). See docs/Hardening.md.
#
#   bash utils/fuzz.sh                  # regression: every checked-in seed of
#                                       # fuzz/corpus/<name>/ once, then
#                                       # MOE_FUZZ_RUNS (10000) mutations, seed 1
#                                       # (at most MOE_FUZZ_MAX_SECONDS, 120)
#   bash utils/fuzz.sh --long [SECONDS] # each target SECONDS (300) of fuzzing,
#                                       # going on after crashes (-fork=1)
#   bash utils/fuzz.sh [...] NAME...    # only these targets
#   --no-build                          # use build-san/ as it is
#
# New corpus entries and crash reproducers go to MOE_FUZZ_OUT (default a new
# /tmp/moe-fuzz.XXXXXX), never into the repository: copy a reproducer into
# fuzz/corpus/<name>/ once the bug is fixed. Each target counts as one test;
# ends with `N passed, N failed` and exits non-zero if any target crashed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
san=${MOE_SAN_BUILD_DIR:-$root/build-san}
runs=${MOE_FUZZ_RUNS:-10000}
cap=${MOE_FUZZ_MAX_SECONDS:-120}
long=0 seconds=300 build=1 only=()
while [ $# -gt 0 ]; do
  case $1 in
    --long)
      long=1; shift
      if [[ ${1:-} =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n 2,18p "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) only+=("$1"); shift ;;
  esac
done

keep=1
[ -z "${MOE_FUZZ_OUT:-}" ] && [ $long = 0 ] && keep=0   # a passing regression run leaves nothing
out=${MOE_FUZZ_OUT:-$(mktemp -d /tmp/moe-fuzz.XXXXXX)}
mkdir -p "$out"

if [ $build = 1 ]; then
  bash "$root/utils/sanitize.sh" --build-only || { echo "0 passed, 1 failed"; exit 1; }
fi

# The sanitizer environment of utils/sanitize.sh. libFuzzer reports leaks per
# input itself; Open MPI is not linked by any target.
export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-22/bin/llvm-symbolizer
export ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1${MOE_ASAN_OPTIONS:+:$MOE_ASAN_OPTIONS}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1${MOE_UBSAN_OPTIONS:+:$MOE_UBSAN_OPTIONS}
export LSAN_OPTIONS=suppressions=$root/utils/lsan.supp:print_suppressions=0

if [ ${#only[@]} -eq 0 ]; then
  for src in "$root"/fuzz/*_fuzzer.cpp; do
    [ -e "$src" ] || continue
    name=$(basename "$src" _fuzzer.cpp)
    only+=("$name")
  done
fi

passed=0 failed=0
for name in "${only[@]}"; do
  bin=$san/fuzz/${name}_fuzzer
  seeds=$root/fuzz/corpus/$name
  work=$out/$name
  mkdir -p "$work/corpus" "$work/crashes"
  if [ ! -x "$bin" ]; then
    echo "== fuzz $name: FAIL (no $bin: not built)"
    failed=$((failed + 1))
    continue
  fi
  args=(-artifact_prefix="$work/crashes/" -print_final_stats=1 -timeout=30)
  [ -f "$root/fuzz/$name.dict" ] && args+=(-dict="$root/fuzz/$name.dict")
  if [ $long = 1 ]; then
    # One child process at a time that restarts after a crash, so that one
    # known bug does not end the run; every crash is kept.
    args+=(-max_total_time="$seconds" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  else
    nseeds=$(find "$seeds" -type f 2>/dev/null | wc -l)
    # Fixed seed: the same build mutates the same way every run. The time cap
    # only guards CI against a slow target.
    args+=(-seed=1 -runs=$((nseeds + runs)) -max_total_time="$cap")
  fi
  dirs=("$work/corpus")   # new entries land in the first directory
  [ -d "$seeds" ] && dirs+=("$seeds")
  start=$SECONDS
  "$bin" "${args[@]}" "${dirs[@]}" > "$work/log" 2>&1
  rc=$?
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p; s/^#([0-9]+):? .*cov: .*/\1/p' "$work/log" | tail -n 1)
  cov=$(grep -oE 'cov: [0-9]+' "$work/log" | tail -n 1)
  ncrash=$(find "$work/crashes" -type f | wc -l)
  if [ $rc -eq 0 ] && [ "$ncrash" -eq 0 ]; then
    echo "== fuzz $name: PASS (${execs:-?} runs, ${cov:-cov: ?}, $((SECONDS - start)) s)"
    passed=$((passed + 1))
  else
    echo "== fuzz $name: FAIL (exit $rc, $ncrash reproducer(s) after $((SECONDS - start)) s); the report:"
    grep -vE '^(#[0-9]+|INFO:|MS:|Dictionary:|stat::)' "$work/log" | tail -n 60
    for crash in $(ls "$work"/crashes/* 2>/dev/null | head -n 3); do
      echo "-- reproducer $crash ($(wc -c < "$crash") bytes); rerun: $bin $crash"
      head -c 2000 "$crash" | od -c | head -n 40
    done
    failed=$((failed + 1))
  fi
done

if [ $keep = 0 ] && [ $failed -eq 0 ]; then
  rm -rf "$out"
else
  echo "fuzz: logs, new corpus entries and reproducers in $out"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
