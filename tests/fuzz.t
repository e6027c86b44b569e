#!/usr/bin/env bash
# The libFuzzer harnesses of tests/fuzz/: builds them (`ninja fuzz`, clang with
# ASan + UBSan), replays each one's corpus (tests/fuzz/corpus/NAME, which holds every crash
# ever found, fixed: a regression run) and fuzzes each for a short smoke run; no input may
# crash, leak or hang. FUZZ_SECONDS (default 10; tests/slow/fuzz.t, `ninja test-slow`: 60) is
# the length of each smoke run (0: none); the four run side by side. Skips without a clang that has libFuzzer.
. "$(dirname "$0")/lib.sh"
HARNESSES="ref pack cache spec"
SECS=${FUZZ_SECONDS:-10}

command -v clang >/dev/null || skip_all "no clang (the harnesses need clang's libFuzzer)"
command -v ninja >/dev/null || skip_all "no ninja"
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$TMP/probe.c"
clang -fsanitize=fuzzer,address,undefined "$TMP/probe.c" -o "$TMP/probe" 2>/dev/null ||
  skip_all "clang cannot build a libFuzzer target with ASan and UBSan"

plan $((2 + 2 * 4))

# built here, so that `ninja test` (which builds `all`, not `fuzz`) runs current harnesses
if ninja fuzz >"$TMP/build.log" 2>&1; then
  pass "ninja fuzz builds build/fuzz/fuzz_{ref,pack,cache,spec}"
else
  fail "ninja fuzz builds build/fuzz/fuzz_{ref,pack,cache,spec}"
  tail -20 "$TMP/build.log" | sed 's/^/#   /'
  done_testing
fi

# one job per harness, side by side: regression over the corpus, then the smoke run
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
for h in $HARNESSES; do
  (
    mkdir -p "$TMP/$h/new" "$TMP/$h/art"
    rc=0
    "build/fuzz/fuzz_$h" -runs=0 -timeout=30 -artifact_prefix="$TMP/$h/art/" "tests/fuzz/corpus/$h" \
      >"$TMP/$h/replay.log" 2>&1 || rc=$?
    echo "$rc" >"$TMP/$h/replay.rc"
    rc=0
    if [ "$SECS" -gt 0 ]; then
      # new inputs go to a scratch folder: the committed corpus is only read
      "build/fuzz/fuzz_$h" -max_total_time="$SECS" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$TMP/$h/art/" "$TMP/$h/new" "tests/fuzz/corpus/$h" >"$TMP/$h/smoke.log" 2>&1 || rc=$?
    fi
    echo "$rc" >"$TMP/$h/smoke.rc"
  ) &
done
wait

for h in $HARNESSES; do
  n=$(ls "tests/fuzz/corpus/$h" | wc -l)
  if [ "$(cat "$TMP/$h/replay.rc")" = 0 ]; then
    pass "fuzz_$h: no crash on its $n corpus inputs"
  else
    fail "fuzz_$h: no crash on its $n corpus inputs"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$TMP/$h/replay.log" | head -10 | sed 's/^/#   /'
  fi
  if [ "$SECS" -gt 0 ]; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$TMP/$h/smoke.log")
    if [ "$(cat "$TMP/$h/smoke.rc")" = 0 ]; then
      pass "fuzz_$h: no crash in a ${SECS}s smoke run (${runs:-?} executions)"
    else
      fail "fuzz_$h: no crash in a ${SECS}s smoke run (${runs:-?} executions)"
      grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$TMP/$h/smoke.log" | head -10 | sed 's/^/#   /'
      for a in "$TMP/$h/art"/*; do
        [ -f "$a" ] || continue
        mkdir -p "build/fuzz/artifacts/$h" && cp "$a" "build/fuzz/artifacts/$h/"
        echo "#   input kept as build/fuzz/artifacts/$h/$(basename "$a")"
      done
    fi
  else
    pass "# SKIP fuzz_$h smoke run (FUZZ_SECONDS=0)"
  fi
done

# The escape detector: with the sandbox weakened on purpose (the spec's `string` is the
# compiler's own library, through a KILN_LUA_PATH override), a spec that rewrites
# string.upper must make fuzz_spec abort, naming the table it changed.
mkdir -p "$TMP/weak/kiln"
sed 's/string = copy_lib(string, { dump = true }),/string = string,/' compiler/kiln/spec.lua >"$TMP/weak/kiln/spec.lua"
cat >"$TMP/escape.lua" <<'LUA'
string.upper = string.lower
local k = require "kiln"
return k.graph "escape" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
LUA
if ! grep -q 'string = string,' "$TMP/weak/kiln/spec.lua"; then
  fail "fuzz_spec aborts on a spec that changes shared state (cannot weaken kiln/spec.lua's sandbox)"
elif KILN_LUA_PATH="$TMP/weak" build/fuzz/fuzz_spec "$TMP/escape.lua" >"$TMP/escape.log" 2>&1; then
  fail "fuzz_spec aborts on a spec that changes shared state"
else
  # the string library, seen directly or as _G.string, whichever the walk meets first
  grep -qE 'changed package\.loaded\["(string|_G)"\]' "$TMP/escape.log" &&
    pass "fuzz_spec aborts on a spec that changes shared state ($(grep -o 'package.loaded\[[^]]*\]' "$TMP/escape.log" | head -1))" ||
    { fail "fuzz_spec aborts on a spec that changes shared state"; tail -5 "$TMP/escape.log" | sed 's/^/#   /'; }
fi
done_testing
