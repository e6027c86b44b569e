#!/usr/bin/env bash
# kiln build: every shipped spec compiles for sm_80, sm_90a and sm_100a; a second build is
# all cache hits; KILN_JIT=strict turns a miss into a typed error (cold compile times:
# tests/timing/compile_times.t).
# The GEMM, conv1d and GDN specs have these checks in tests/gemm.t, conv1d.t and gdn.t (which
# build them cold for their ptxas reports); the others build here, in the run's warm cache.
. "$(dirname "$0")/lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
specs=()
for s in specs/*.lua; do case $s in specs/gemm* | specs/causal_conv1d* | specs/gdn_*) ;; *) specs+=("$s") ;; esac; done
plan $(( ${#specs[@]} * 4 + 6 ))
use_shared_cache
for s in "${specs[@]}"; do
  run_kiln build "$s" --sm 80 --sm 90a --sm 100a -v
  expect_rc 0 "build $s for sm_80 sm_90a sm_100a"
  grep 'compiled in' "$OUTF" | sed "s|^|# $s: |"
  run_kiln build "$s" --sm 80 --sm 90a --sm 100a
  expect_rc 0 "rebuild $s"
  expect_out ": 0 compiled, [0-9]+ cached" "rebuild of $s compiles nothing"
  KILN_JIT=strict run_kiln build "$s" --sm 80 --sm 90a --sm 100a
  expect_rc 0 "strict build of $s from a warm cache"
done
KILN_CACHE_DIR=$TMP/empty KILN_JIT=strict run_kiln build specs/bias_gelu.lua --sm 90a
expect_rc 1 "strict build on an empty cache fails"
expect_err "E_CACHE_MISS" "strict miss is a typed E_CACHE_MISS"
# PTX beside cubins: the runtime's fallback for an SM the pack has no cubin for
run_kiln build specs/bias_gelu.lua --sm 90a --sm compute_80 -o "$TMP/ptx.kpack"
expect_rc 0 "build with a PTX target (compute_80)"
run_kiln pack inspect "$TMP/ptx.kpack"
expect_out "sm_90a [0-9]+ bytes, compute_80 [0-9]+ bytes" "the pack holds the cubin and the PTX"
run_kiln build specs/bias_gelu.lua --sm compute_8x
expect_rc 2 "a malformed PTX target is a usage error"
KILN_JIT=bogus run_kiln build specs/bias_gelu.lua --sm 90a
expect_rc 2 "a bad KILN_JIT value is a usage error"
done_testing
