#!/usr/bin/env bash
# Every shipped spec, JIT-compiled for this GPU, matches the reference executor on fresh
# random inputs (odd dynamic sizes). Skips without a device.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
specs=(specs/*.lua)
plan $(( ${#specs[@]} * 2 ))
for s in "${specs[@]}"; do
  run_kiln run "$s" --check
  expect_rc 0 "kiln run --check $s (T=1031)"
  sed 's/^/# /' "$OUTF"
  run_kiln run "$s" --check --set T=1
  expect_rc 0 "kiln run --check $s (T=1)"
done
done_testing
