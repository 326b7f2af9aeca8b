#!/usr/bin/env bash
# The test command: set up and build, then lit, unit (ctest) and Python tests;
# then the hardening tiers (docs/Hardening.md): the ASan+UBSan build in
# build-san/ runs the unit and lit tests (and the Python tests unless
# MOE_TEST_SANITIZE_TIERS says otherwise) and the fuzz targets' regression
# run. MOE_TEST_SANITIZERS=0 skips the hardening tiers (quick local runs).
# Ends with one line `N passed, N failed`; exits non-zero on any failure.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
export MOE_BUILD_DIR=$build
bash "$root/utils/setup.sh" || { echo "0 passed, 1 failed"; exit 1; }

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
passed=0 failed=0
source "$root/utils/tiers.sh"

run_lit "$build"
run_ctest "$build"
run_pytest "$build"

if [ "${MOE_TEST_SANITIZERS:-1}" != 0 ]; then
  # Each sub-script ends with its own `N passed, N failed`, added here; a
  # build that fails counts as one failure.
  echo "== sanitizers (utils/sanitize.sh)"
  bash "$root/utils/sanitize.sh" --tiers "${MOE_TEST_SANITIZE_TIERS:-unit,lit,pytest}" 2>&1 |
    tee "$logs/sanitize"
  add_summary sanitizers "$logs/sanitize"
  echo "== fuzz regression (utils/fuzz.sh)"
  bash "$root/utils/fuzz.sh" --no-build 2>&1 | tee "$logs/fuzz"
  add_summary fuzz "$logs/fuzz"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
