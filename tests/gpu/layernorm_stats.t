#!/usr/bin/env bash
# LayerNorm's mean and inv_std on rows far from zero, every form of its row, in one reduction
# (the default), in trips of one vector (the re-read rows' running merge) and in two reductions
# (tests/gpu/layernorm_stats.py). Skips without a device or torch.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
python3 -c "import torch" 2>/dev/null || skip_all "no torch"
SPEC=tests/specs/gpu/layernorm_offset.lua
"$KILN" build $SPEC --sm 90a -o "$TMP/one.kpack" >/dev/null 2>"$ERRF" &&
  KILN_PLAN=*.trip=1 "$KILN" build $SPEC --sm 90a -o "$TMP/trip1.kpack" >/dev/null 2>>"$ERRF" &&
  KILN_PLAN=*.reductions=2 "$KILN" build $SPEC --sm 90a -o "$TMP/two.kpack" >/dev/null 2>>"$ERRF" ||
  { echo "1..1"; echo "not ok 1 - build the packs"; sed 's/^/# /' "$ERRF"; exit 1; }
exec python3 tests/gpu/layernorm_stats.py "one reduction=$TMP/one.kpack" "trips of 1=$TMP/trip1.kpack" \
  "two reductions=$TMP/two.kpack"
