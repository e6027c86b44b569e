#!/usr/bin/env bash
# kiln.torch: plans as torch custom ops under eager, torch.compile(fullgraph=True), CUDA graphs
# and autograd (tests/gpu/torch_ops.py). Skips without a device or torch.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
python3 -c "import torch" 2>/dev/null || skip_all "no torch"
"$KILN" build specs/rmsnorm.lua specs/rmsnorm_bwd.lua --set H=4096 --sm 90a -o "$TMP/rms.kpack" >/dev/null 2>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the pack"; sed 's/^/# /' "$ERRF"; exit 1; }
exec python3 tests/gpu/torch_ops.py "$TMP/rms.kpack"
