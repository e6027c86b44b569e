#!/usr/bin/env bash
# The CPU emulator's full matrix of GEMM cases (`ninja test-slow`; tests/gemm.t runs one of each
# kind): every layout, a batch, the epilogue kinds, fp8, block-scaled fp8 and grouped (MoE) GEMMs
# on both paths, clusters, stream-K and ping-pong (tests/gemm_emu.sh says what each field means).
. "$(dirname "$0")/../lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
emu=(
  "nn sm_90a 256" "nn sm_90a 192" "nn sm_90a 128" "nt sm_90a 256" "batched sm_90a 192" "epilogue sm_90a 128"
  "tn_static sm_90a 256" "tn_static sm_90a 128" "nn sm_90a 256 2" "nt sm_90a 192 2" "fp8 sm_90a 192 2" "fp8 sm_90a 192" "fp8 sm_90a 128" "amax_tail sm_90a 256" "f32out sm_90a 256" "f32out sm_90a 128" "nn sm_80 -" "tn sm_80 -" "tt sm_80 -" "batched sm_80 -" "epilogue sm_80 -" "fp8 sm_80 -" "f32out sm_80 -"
  "dual sm_90a 256" "dual_nn sm_90a 256" "dual sm_80 -" "dual_nn sm_80 -"
  "fp8_block sm_90a 192" "fp8_block sm_90a 128" "fp8_block sm_80 -" "fp8_mx sm_90a -" "fp8_mx sm_80 -"
  "grouped sm_90a 192" "grouped_nn sm_90a 256" "grouped_fp8 sm_90a 192" "grouped sm_80 -" "grouped_nn sm_80 -" "grouped_fp8 sm_80 -"
)
# 12 k-blocks: 8 tiles on 3 CTAs (2 stream-K tiles, CTA 1's range ends one and starts the next),
# 9 tiles on 4 (one tile over 4 ranges, two of them inside it); fp8 splits only a grid's one
# wave (3 tiles of M = 100 over 8 CTAs; not 9 tiles on 4); one row (M = 1) over 8 and 16 CTAs
# (a tile splits into 4 pieces; the candidate grown for 16 live rows into up to 32); 4 k-blocks
# (nn): too few to split, the plain schedule; the mma kernel takes the workspace and ignores it
sk=(
  "nn_sk sm_90a 256 3 500 16" "nn_sk sm_90a 128 4 300 24" "epilogue_sk sm_90a 192 3 500 16"
  "fp8_sk sm_90a 128 4 300 24 gemm.streamk=1" "fp8_sk sm_90a 128 8 100 56" "fp8_sk sm_90a 128 4 300 0" "nn_sk sm_90a 256 8 1 48" "nn_sk sm_90a 256 16 1 48" "nn_sk sm_90a 256 16 1 112 gemm:v1:sm90:128x256x64:s4:sk:ts" "dual_nn sm_90a 256 2 300 8" "dual_nn sm_90a 256 3 500 0 gemm.epilogue=direct" "nn sm_90a 256 3 500 0" "nn_sk sm_80 - 3 200 0" "nn_sk sm_90a 256 3 200 - gemm.streamk=0"
  "epilogue_sk sm_90a 256 3 500 16 gemm.epilogue=direct"
  # block-scaled fp8: 12 k-blocks of one wave split over 8 CTAs (M = 100, and one row)
  "fp8_block_sk sm_90a 128 8 100 48" "fp8_block_sk sm_90a 128 8 1 48"
  # the tile order and operand-copy settings (gemm.group, gemm.l2hint)
  "nn_sk sm_90a 256 3 500 16 gemm.group=4" "batched sm_90a 192 2 300 0 gemm.l2hint=both"
  # the opt-in epilogue warps: with stream-K owners, an amax with its largest values in the tails,
  # a 4-byte output, and the mma kernel that takes their workspace and ignores it
  "epilogue_sk sm_90a 256 3 500 16 gemm.epilogue=warpgroup" "amax_tail sm_90a 192 2 300 0 gemm.epilogue=warpgroup"
  "f32out sm_90a 128 2 300 0 gemm.epilogue=warpgroup" "nn_sk sm_80 - 3 200 0 gemm.epilogue=warpgroup"
)
# ping-pong, 128 x 128 tiles (N = 264: 3 n tiles): several tiles per CTA on both warpgroups, a
# warpgroup with an empty last slot (an odd count per CTA), M tails, 12 k-blocks (the *_sk graphs:
# the 7-stage ring wraps inside a tile; stream-K declined), the tn layout (MN-major A), a batch,
# the epilogue; fp8 keeps the cooperative kernel, sm_80 runs the mma kernel with pingpong's launch
pp=(
  "nn sm_90a 2 300 sm_90a-pingpong" "nt sm_90a 3 300 sm_90a-pingpong" "tn_static sm_90a 2 304 sm_90a-pingpong"
  "epilogue sm_90a 3 500 sm_90a-pingpong" "batched sm_90a 4 300 sm_90a-pingpong" "nn_sk sm_90a 5 500 sm_90a-pingpong"
  "epilogue_sk sm_90a 2 300 sm_90a-pingpong" "fp8 sm_90a 2 300 sm_90a" "nn sm_80 2 300 portable"
)
plan $(( ${#emu[@]} + ${#sk[@]} + ${#pp[@]} ))
. tests/gemm_emu.sh
done_testing
