#!/usr/bin/env bash
# Kernels compiled as PTX modules (ptxas through nvJitLink; KILN_PTX_MODULE=all: the row kernels
# too) give the same bits as their CUDA forms through NVRTC (KILN_PTX_MODULE=off;
# tests/gpu/ptx_module.py): the forward and backward norms, the finalize and the amax init
# kernel, softmax. Skips without a device or torch.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
python3 -c "import torch" 2>/dev/null || skip_all "no torch"
S="specs/layernorm_bwd.lua specs/rmsnorm_bwd.lua specs/rmsnorm_residual_fp8.lua specs/layernorm.lua specs/softmax_bwd.lua"
KILN_PTX_MODULE=all "$KILN" build $S --set H=2048 --sm 90a -o "$TMP/mod.kpack" >/dev/null 2>"$ERRF" &&
  KILN_PTX_MODULE=off KILN_CACHE_DIR="$TMP/cache_off" "$KILN" build $S --set H=2048 --sm 90a -o "$TMP/cuda.kpack" >/dev/null 2>>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the packs"; sed 's/^/# /' "$ERRF"; exit 1; }
exec python3 tests/gpu/ptx_module.py "$TMP/mod.kpack" "$TMP/cuda.kpack"
