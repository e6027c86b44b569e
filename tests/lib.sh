# kiln shell-test helpers: TAP output for prove. Source from a tests/*.t script.
set -u
cd "$(dirname "$0")" || exit 1
while [ ! -f build.ninja ] && [ "$PWD" != / ]; do cd ..; done   # the repo root
KILN=${KILN:-$PWD/build/kiln}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kiln-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export KILN_CACHE_DIR=$TMP/cache   # hermetic: never the caller's cache (a test of a shared one sets its own)
# use_shared_cache: a test whose checks hold whatever its cache holds already (no compiled/cached
# counts, no KILN_DUMP_DIR logs, no cold timings) takes the run's warm cache that `ninja test`
# makes afresh under build/ (KILN_TEST_SHARED_CACHE); run alone, it keeps its own
use_shared_cache() { if [ -n "${KILN_TEST_SHARED_CACHE:-}" ]; then export KILN_CACHE_DIR=$KILN_TEST_SHARED_CACHE; fi; }
# A sanitized build (./configure --sanitize=...): the flags to link against build/libkilnrt.a,
# UBSan stops at its first report with a stack, and `with_san_runtime python3 ...` lets an
# uninstrumented interpreter load the sanitized libkilnrt.so (its own exit-time heap is not kiln's).
KILN_SAN_FLAGS=$(sed -n 's/^san = //p' config.ninja 2>/dev/null)
if [ -n "$KILN_SAN_FLAGS" ]; then export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1; fi
with_san_runtime() {
  local pre=""
  case $KILN_SAN_FLAGS in *address*) pre=$(gcc -print-file-name=libasan.so) ;; esac
  case $KILN_SAN_FLAGS in *undefined*) pre="$pre${pre:+:}$(gcc -print-file-name=libubsan.so)" ;; esac
  if [ -z "$pre" ]; then "$@"; else LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0 "$@"; fi
}
_n=0
_failed=0
plan() { echo "1..$1"; }
skip_all() { echo "1..0 # SKIP $*"; exit 0; }
pass() { _n=$((_n + 1)); echo "ok $_n - $*"; }
# a failure is also told on stderr, with its diagnostics: prove shows stderr in CI logs
fail() { _n=$((_n + 1)); _failed=$((_failed + 1)); echo "not ok $_n - $*"; echo "# $(basename "$0"): not ok $_n - $*" >&2; }
# ok CMD... : passes when the command succeeds; the last argument is not special.
ok() { local msg=$1; shift; if "$@"; then pass "$msg"; else fail "$msg"; fi; }
# run_kiln ARGS...: runs kiln, leaving stdout in $OUTF, stderr in $ERRF, status in $RC.
OUTF=$TMP/out ERRF=$TMP/err RC=0
run_kiln() { RC=0; timeout 120 "$KILN" "$@" >"$OUTF" 2>"$ERRF" || RC=$?; }
# expect_rc N MSG: the last run_kiln exited with N.
expect_rc() {
  if [ "$RC" = "$1" ]; then pass "$2"; else fail "$2 (exit $RC, want $1)"; sed 's/^/#   /' "$ERRF" | head -20 | tee /dev/stderr; fi
}
# expect_err PATTERN MSG: the last run's stderr matches the extended regex.
expect_err() {
  if grep -Eq -- "$1" "$ERRF"; then pass "$2"; else fail "$2 (stderr lacks /$1/)"; sed 's/^/#   /' "$ERRF" | head -20 | tee /dev/stderr; fi
}
expect_out() {
  if grep -Eq -- "$1" "$OUTF"; then pass "$2"; else fail "$2 (stdout lacks /$1/)"; sed 's/^/#   /' "$OUTF" | head -20 | tee /dev/stderr; fi
}
done_testing() { [ "$_failed" = 0 ]; exit $?; }
