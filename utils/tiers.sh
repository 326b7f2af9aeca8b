# Test tiers shared by utils/test.sh and utils/sanitize.sh (sourced, not run).
# Each runner takes the build directory, tees its log to $logs/<name> and
# adds its tally to $passed/$failed through count.

# count <stage> <exit code> <passed> <failed>: a stage that failed without a
# failing test (a crash, a broken runner) still counts as one failure.
count() {
  local p=${3:-0} f=${4:-0}
  if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  echo "== $1: $p passed, $f failed"
  passed=$((passed + p)) failed=$((failed + f))
}

# run_lit <build> [label]
run_lit() {
  local label=${2:-lit} rc
  echo "== $label"
  /usr/lib/llvm-22/bin/lit -v --timeout 300 "$1/test" 2>&1 | tee "$logs/lit"
  rc=${PIPESTATUS[0]}
  count "$label" "$rc" "$(grep -cE '^(PASS|XFAIL|UNSUPPORTED):' "$logs/lit")" \
    "$(grep -cE '^(FAIL|XPASS|UNRESOLVED|TIMEOUT):' "$logs/lit")"
}

# run_ctest <build> [label]
run_ctest() {
  local label=${2:-ctest} rc total bad
  echo "== unit tests ($label)"
  (cd "$1" && ctest --output-on-failure --timeout 300) 2>&1 | tee "$logs/ctest"
  rc=${PIPESTATUS[0]}
  total=$(sed -nE 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+).*/\2/p' "$logs/ctest")
  bad=$(sed -nE 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+).*/\1/p' "$logs/ctest")
  count "$label" "$rc" "$(( ${total:-0} - ${bad:-0} ))" "${bad:-0}"
}

# run_pytest <build> [label [pytest arguments...]]: the Python tests find the
# tools and libmoert through MOE_BUILD_DIR.
run_pytest() {
  local build=$1 label=${2:-pytest} rc
  shift $(($# < 2 ? $# : 2))
  echo "== Python tests ($label)"
  MOE_BUILD_DIR=$build python3 -m pytest -q -p no:cacheprovider "$@" "$root/python/tests" 2>&1 |
    tee "$logs/pytest"
  rc=${PIPESTATUS[0]}
  # pytest's closing line, e.g. "2 failed, 29 passed, 1 error in 4.1s"
  tally() { tail -n 1 "$logs/pytest" | awk -v want="$1" '{for (i = 1; i < NF; i++) if ($(i+1) ~ "^(" want "),?$") s += $i} END {print s + 0}'; }
  count "$label" "$rc" "$(tally passed)" "$(tally 'failed|errors?')"
}

# add_summary <label> <log>: adds the closing `N passed, N failed` line of a
# sub-script's log (utils/sanitize.sh, utils/fuzz.sh) to the totals; a log
# without one counts as one failure.
add_summary() {
  local line p f
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$2" | tail -n 1)
  if [ -z "$line" ]; then
    count "$1" 1 0 1
    return
  fi
  p=${line%% passed*}
  f=${line#*, }; f=${f%% failed}
  count "$1" 0 "$p" "$f"
}
