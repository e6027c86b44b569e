#!/usr/bin/env bash
# sdpa under a padding mask with NaN in the K and V rows past each seq_len_kv, on the sm_90a
# (wgmma) kernel and the mma.sync kernel (tests/gpu/sdpa_padding.py). Skips without a device or torch.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
python3 -c "import torch" 2>/dev/null || skip_all "no torch"
SPEC=tests/specs/gpu/sdpa_padding.lua
"$KILN" build $SPEC --sm 90a -o "$TMP/sm90.kpack" >/dev/null 2>"$ERRF" &&
  "$KILN" build $SPEC --sm 90 -o "$TMP/mma.kpack" >/dev/null 2>>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the packs"; sed 's/^/# /' "$ERRF"; exit 1; }
exec python3 tests/gpu/sdpa_padding.py "sm90=$TMP/sm90.kpack" "mma=$TMP/mma.kpack"
