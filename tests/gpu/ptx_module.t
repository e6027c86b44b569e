#!/usr/bin/env bash
# Kernels compiled as PTX modules give the same bits as their CUDA forms through NVRTC
# (KILN_PLAN=*.module=off; tests/gpu/ptx_module.py), by the PTX compiler library or the ptxas executable (the default) and
# through nvJitLink (KILN_PTXAS=nvjitlink KILN_PLAN=*.module=all): the forward and backward norms,
# the finalize and the amax init kernel, softmax, the pointwise kernels. Skips without a device or
# torch.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
python3 -c "import torch" 2>/dev/null || skip_all "no torch"
S="specs/layernorm_bwd.lua specs/rmsnorm_bwd.lua specs/rmsnorm_residual_fp8.lua specs/layernorm.lua specs/softmax_bwd.lua specs/swiglu.lua specs/scale_residual_cast.lua specs/bias_gelu.lua"
"$KILN" env | grep -q '^ptx_modules: every kernel' || { echo "1..1"; echo "not ok 1 - no ptxas executable: $("$KILN" env | grep '^ptxas')"; exit 1; }
"$KILN" build $S --set H=2048 --sm 90a -o "$TMP/ptxas.kpack" >/dev/null 2>"$ERRF" &&
  KILN_PTXAS=nvjitlink KILN_PLAN=*.module=all KILN_CACHE_DIR="$TMP/cache_jl" "$KILN" build $S --set H=2048 --sm 90a -o "$TMP/nvjitlink.kpack" >/dev/null 2>>"$ERRF" &&
  KILN_PLAN=*.module=off KILN_CACHE_DIR="$TMP/cache_off" "$KILN" build $S --set H=2048 --sm 90a -o "$TMP/cuda.kpack" >/dev/null 2>>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the packs"; sed 's/^/# /' "$ERRF"; exit 1; }
exec python3 tests/gpu/ptx_module.py "$TMP/ptxas.kpack" "$TMP/nvjitlink.kpack" "$TMP/cuda.kpack"
