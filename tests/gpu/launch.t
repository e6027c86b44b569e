#!/usr/bin/env bash
# libkilnrt's launch path on a real GPU: results, typed errors with no CUDA fault, CUDA-graph
# capture, threads, host overhead against a bare cuLaunchKernel. Skips without a device.
. "$(dirname "$0")/../lib.sh"
"$KILN" build tests/specs/gpu/add_fp32.lua --sm 80 --sm 90a --sm 100a -o "$TMP/add.kpack" >/dev/null 2>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the add pack"; sed 's/^/# /' "$ERRF"; exit 1; }
exec build/tests/test_launch "$TMP/add.kpack"
