#!/usr/bin/env bash
# Every shipped spec, JIT-compiled for this GPU, matches the reference executor on fresh
# random inputs (odd dynamic sizes, and a single row). Skips without a device.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
specs=(specs/*.lua)
plan $(( ${#specs[@]} * 2 ))
# GEMM specs: the odd-size instances (the fp64 reference of large GEMMs is too slow here)
only() { case $1 in *gemm*) echo "--instance K=1056,N=1032" ;; esac; }
for s in "${specs[@]}"; do
  run_kiln run "$s" --check $(only "$s")
  expect_rc 0 "kiln run --check $s (T=1031)"
  sed 's/^/# /' "$OUTF"
  run_kiln run "$s" --check --set T=1 --set M=1 $(only "$s")
  expect_rc 0 "kiln run --check $s (T=1)"
done
done_testing
