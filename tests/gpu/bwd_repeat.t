#!/usr/bin/env bash
# The backward norms launched back to back on one workspace, on the stream and from a CUDA
# graph, give the same bits every launch (tests/gpu/bwd_repeat.py). Skips without a device or
# torch.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
python3 -c "import torch" 2>/dev/null || skip_all "no torch"
"$KILN" build specs/layernorm_bwd.lua specs/rmsnorm_bwd.lua --sm 90a -o "$TMP/bwd.kpack" >/dev/null 2>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the pack"; sed 's/^/# /' "$ERRF"; exit 1; }
"$KILN" build specs/layernorm_bwd.lua specs/rmsnorm_bwd.lua --set H=65536 --sm 90a -o "$TMP/bwd65k.kpack" >/dev/null 2>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the H = 65536 pack"; sed 's/^/# /' "$ERRF"; exit 1; }
exec python3 tests/gpu/bwd_repeat.py "$TMP/bwd.kpack" "$TMP/bwd65k.kpack"
