#!/usr/bin/env bash
# The ptxas executable and kiln's PTX compiler library give a PTX module NVRTC's code: every row
# and pointwise kernel that the shipped memory-bound specs compile as a module (a ragged row; a
# wide one over a cluster), byte for byte against its CUDA form (TAP).
. "$(dirname "$0")/lib.sh"
S="specs/layernorm.lua specs/layernorm_bwd.lua specs/rmsnorm_bwd.lua specs/softmax.lua specs/softmax_bwd.lua specs/rmsnorm_residual_fp8.lua specs/add_rmsnorm_silu_gate.lua specs/swiglu.lua specs/scale_residual_cast.lua specs/bias_gelu.lua"
for H in 1000 65536; do
  "$KILN" source $S --set H=$H --sm 90a >> "$TMP/cuda.txt" 2>"$ERRF" &&
    "$KILN" source $S --set H=$H --sm 90a --ptx >> "$TMP/ptx.txt" 2>>"$ERRF" ||
    { echo "Bail out! kiln source: $(head -c 400 "$ERRF")"; exit 1; }
done
# the pointwise test spec with its repeating inputs (a mask at H = 4096, a multiply at 1000)
"$KILN" source tests/specs/mem/pointwise.lua --sm 90a >> "$TMP/cuda.txt" 2>"$ERRF" &&
  "$KILN" source tests/specs/mem/pointwise.lua --sm 90a --ptx >> "$TMP/ptx.txt" 2>>"$ERRF" ||
  { echo "Bail out! kiln source: $(head -c 400 "$ERRF")"; exit 1; }
build/tests/test_ptxas_exe "$TMP/cuda.txt" "$TMP/ptx.txt" sm_90a
