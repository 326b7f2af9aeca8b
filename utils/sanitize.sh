#!/usr/bin/env bash
# ASan + UBSan: builds the whole project and the runtime with clang-22 in
# build-san/ (the same build also holds the fuzz targets, see utils/fuzz.sh)
# and runs the test suite under the sanitizers. Ends with one line
# `N passed, N failed`; exits non-zero on any failure. See docs/Hardening.md.
#
#   bash utils/sanitize.sh                    # build, then lit, unit and pytest
#   bash utils/sanitize.sh --tiers unit,lit   # a subset (lit, unit, pytest)
#   bash utils/sanitize.sh --build-only       # configure and build only
#
# MOE_SAN_BUILD_DIR (default build-san/), MOE_SAN_JOBS (default nproc).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
san=${MOE_SAN_BUILD_DIR:-$root/build-san}
jobs=${MOE_SAN_JOBS:-$(nproc)}
llvm=/usr/lib/llvm-22
tiers=lit,unit,pytest
build_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --tiers) tiers=$2; shift 2 ;;
    --tiers=*) tiers=${1#--tiers=}; shift ;;
    --build-only) build_only=1; shift ;;
    *) echo "usage: $0 [--tiers lit,unit,pytest] [--build-only]" >&2; exit 2 ;;
  esac
done

# build_san: installs what is missing, configures and builds build-san/.
build_san() {
  MOE_SETUP_INSTALL_ONLY=1 bash "$root/utils/setup.sh" || return 1
  mkdir -p "$san"
  # Configured every time (a few seconds) so that a change here reaches an
  # existing build-san/. -O1: the usual sanitizer trade-off between build and
  # run time.
  cmake -S "$root" -B "$san" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=$llvm/bin/clang -DCMAKE_CXX_COMPILER=$llvm/bin/clang++ \
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" \
    -DMOE_ENABLE_SANITIZERS=ON -DMOE_ENABLE_FUZZ=ON \
    -DMLIR_DIR=$llvm/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=$llvm/bin/lit > "$san/configure.log" 2>&1 ||
    { cat "$san/configure.log"; return 1; }
  cmake --build "$san" -j "$jobs" --target all || return 1
  # The fuzz targets, each on its own: one that does not build is removed
  # (not left stale), reported, and counted as failed by utils/fuzz.sh.
  if ! cmake --build "$san" -j "$jobs" --target moe-fuzzers -- -k 0; then
    local stale
    for stale in $(ninja -C "$san" -n -k 0 moe-fuzzers 2>/dev/null |
                   sed -nE 's|.*Linking CXX executable (fuzz/[a-z0-9_]+_fuzzer)$|\1|p'); do
      echo "sanitize.sh: $stale did not build"
      rm -f "$san/$stale"
    done
  fi
  return 0
}

# The sanitizer environment (exported: lit passes *SAN_OPTIONS through, ctest
# and mpirun inherit them).
# - abort_on_error: a report kills the process with SIGABRT instead of exit
#   code 1, so `not tool` in a lit test and expected-failure checks in the
#   Python tests cannot mistake a sanitizer report for the expected error.
# - LeakSanitizer is on; utils/lsan.supp suppresses leaks inside Open MPI.
#   Open MPI is built without frame pointers, so the stacks of its
#   allocations only resolve with the slow unwinder (fast_unwind_on_malloc=0),
#   which would make the whole suite ~10x slower: only MPI ranks get it, via
#   Open MPI's mca_base_env_list (unit tier).
export ASAN_SYMBOLIZER_PATH=$llvm/bin/llvm-symbolizer
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1${MOE_ASAN_OPTIONS:+:$MOE_ASAN_OPTIONS}
export UBSAN_OPTIONS=abort_on_error=1:print_stacktrace=1:halt_on_error=1${MOE_UBSAN_OPTIONS:+:$MOE_UBSAN_OPTIONS}
export LSAN_OPTIONS=suppressions=$root/utils/lsan.supp:print_suppressions=0
# Open MPI (mpirun, the ranks) over shared memory on loopback; its plug-ins
# stay mapped so that leak reports inside them resolve (see utils/lsan.supp).
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mca_base_component_disable_dlclose=1

if [ $build_only = 1 ]; then
  build_san
  exit
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
passed=0 failed=0
source "$root/utils/tiers.sh"

echo "== sanitizer build ($san)"
if ! build_san; then
  echo "== sanitizer build failed"
  echo "$passed passed, 1 failed"
  exit 1
fi

for tier in ${tiers//,/ }; do
  case $tier in
    lit) run_lit "$san" lit-asan ;;
    unit)
      OMPI_MCA_mca_base_env_list="ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0" \
        run_ctest "$san" ctest-asan ;;
    pytest)
      # Python is not instrumented: it loads libmoert (instrumented) through
      # ctypes, so the ASan runtime must come first (LD_PRELOAD); the tools
      # and ranks it starts use the same shared runtime. Python's own
      # allocations are never freed at exit: no leak check there. Tests
      # marked emulation are left out: they only interpret GPU kernels in
      # Python, for minutes (docs/Hardening.md); the expert-parallel
      # emulation, whose ranks call libmoert, is not marked and runs.
      LD_PRELOAD=$("$llvm/bin/clang" -print-file-name=libclang_rt.asan-x86_64.so) \
      ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 \
        run_pytest "$san" pytest-asan -m "not emulation" ;;
    *) echo "sanitize.sh: unknown tier '$tier'" >&2; count "$tier" 1 0 1 ;;
  esac
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
