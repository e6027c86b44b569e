#!/usr/bin/env bash
# A pack that ships only PTX (kiln build --sm compute_80): the runtime has the driver JIT it
# for the device, and the launch path works as with a cubin. Skips without a device.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
"$KILN" build tests/specs/gpu/add_fp32.lua --sm compute_80 -o "$TMP/ptx.kpack" >/dev/null 2>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build a PTX-only pack"; sed 's/^/# /' "$ERRF"; exit 1; }
exec build/tests/test_launch "$TMP/ptx.kpack"
