#!/usr/bin/env bash
# libkilnrt's launch path on a real GPU: results, typed errors with no CUDA fault, CUDA-graph
# capture, threads, a pack for another SM, host overhead against a bare cuLaunchKernel. Skips
# without a device.
. "$(dirname "$0")/../lib.sh"
tests/gpu/add_packs.sh "$KILN" "$TMP" 2>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the add packs"; sed 's/^/# /' "$ERRF"; exit 1; }
exec build/tests/test_launch "$TMP/add.kpack" --foreign="$TMP/foreign.kpack"
