#!/usr/bin/env bash
# The softmax family's PTX and CUDA forms agree on special values (tests/gpu/row_forms.py).
# Skips without a device or torch.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
python3 -c "import torch" 2>/dev/null || skip_all "no torch"
"$KILN" build tests/specs/gpu/softmax_special.lua --sm 90a -o "$TMP/ptx.kpack" >/dev/null 2>"$ERRF" &&
  KILN_PLAN=*.code=cuda "$KILN" build tests/specs/gpu/softmax_special.lua --sm 90a -o "$TMP/cuda.kpack" >/dev/null 2>>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the packs"; sed 's/^/# /' "$ERRF"; exit 1; }
exec python3 tests/gpu/row_forms.py "$TMP/ptx.kpack" "$TMP/cuda.kpack"
