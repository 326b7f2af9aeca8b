#!/usr/bin/env bash
# The test command: set up and build, then lit, unit (ctest) and Python tests.
# Ends with one line `N passed, N failed`; exits non-zero on any failure.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MOE_BUILD_DIR:-$root/build}
export MOE_BUILD_DIR=$build
bash "$root/utils/setup.sh" || { echo "0 passed, 1 failed"; exit 1; }

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
passed=0 failed=0

# count <stage> <exit code> <passed> <failed>: a stage that failed without a
# failing test (a crash, a broken runner) still counts as one failure.
count() {
  local p=${3:-0} f=${4:-0}
  if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  echo "== $1: $p passed, $f failed"
  passed=$((passed + p)) failed=$((failed + f))
}

echo "== lit"
/usr/lib/llvm-22/bin/lit -v --timeout 300 "$build/test" 2>&1 | tee "$logs/lit"
rc=${PIPESTATUS[0]}
count lit "$rc" "$(grep -cE '^(PASS|XFAIL|UNSUPPORTED):' "$logs/lit")" \
  "$(grep -cE '^(FAIL|XPASS|UNRESOLVED|TIMEOUT):' "$logs/lit")"

echo "== unit tests (ctest)"
(cd "$build" && ctest --output-on-failure --timeout 300) 2>&1 | tee "$logs/ctest"
rc=${PIPESTATUS[0]}
total=$(sed -nE 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+).*/\2/p' "$logs/ctest")
bad=$(sed -nE 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+).*/\1/p' "$logs/ctest")
count ctest "$rc" "$(( ${total:-0} - ${bad:-0} ))" "${bad:-0}"

echo "== Python tests (pytest)"
python3 -m pytest -q -p no:cacheprovider "$root/python/tests" 2>&1 | tee "$logs/pytest"
rc=${PIPESTATUS[0]}
# pytest's closing line, e.g. "2 failed, 29 passed, 1 error in 4.1s"
tally() { tail -n 1 "$logs/pytest" | awk -v want="$1" '{for (i = 1; i < NF; i++) if ($(i+1) ~ "^(" want "),?$") s += $i} END {print s + 0}'; }
count pytest "$rc" "$(tally passed)" "$(tally 'failed|errors?')"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
