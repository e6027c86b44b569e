#!/usr/bin/env bash
# Typed errors at the runtime boundary on a real GPU: a corrupted pack is refused, and the
# command line reports it. Skips without a device.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
plan 4
run_kiln build tests/specs/gpu/add_fp32.lua --sm 90a -o "$TMP/p.kpack"; expect_rc 0 "build a pack"
cp "$TMP/p.kpack" "$TMP/bad.kpack"
printf '\x42' | dd of="$TMP/bad.kpack" bs=1 seek=200 conv=notrunc 2>/dev/null
run_kiln pack verify "$TMP/bad.kpack"; expect_rc 1 "a corrupted pack fails verify"; expect_err "E_PACK" "typed E_PACK"
run_kiln pack verify "$TMP/p.kpack"; expect_rc 0 "the intact pack verifies"
done_testing
