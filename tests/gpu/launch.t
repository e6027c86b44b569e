#!/usr/bin/env bash
# libkilnrt's launch path on a real GPU: results, typed errors with no CUDA fault, CUDA-graph
# capture, threads, a pack for another SM, host overhead against a bare cuLaunchKernel. Skips
# without a device.
. "$(dirname "$0")/../lib.sh"
"$KILN" build tests/specs/gpu/add_fp32.lua --sm 80 --sm 90a --sm 100a -o "$TMP/add.kpack" >/dev/null 2>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the add pack"; sed 's/^/# /' "$ERRF"; exit 1; }
# a pack with no image for this GPU: sm_100a's for Hopper and older, sm_90a's for the rest
cc=$("$KILN" env | sed -n 's/^gpu0: .*compute capability \([0-9]*\)\..*/\1/p')
other=100a; [ "${cc:-9}" -ge 10 ] && other=90a
"$KILN" build tests/specs/gpu/add_fp32.lua --sm "$other" -o "$TMP/foreign.kpack" >/dev/null 2>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the sm_$other pack"; sed 's/^/# /' "$ERRF"; exit 1; }
exec build/tests/test_launch "$TMP/add.kpack" --foreign="$TMP/foreign.kpack"
