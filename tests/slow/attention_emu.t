#!/usr/bin/env bash
# The attention kernels of the mma.sync form on the CPU emulator (`ninja test-slow`;
# tests/attention.t runs one forward and one backward case), each plan's kernels in order against
# the fp64 reference (tests/gemm_emu/run_plan.sh), at lengths off the tiles (S < SK, S > SK, one
# query): every forward graph of tests/specs/attention/forward.lua, every graph of
# tests/specs/attention/backward_emu.lua under each of its candidate plans, and training graphs of
# backward.lua (the forward's O and Stats into the backward).
. "$(dirname "$0")/../lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
command -v g++ >/dev/null && [ -f /usr/include/jansson.h ] && [ -f build/obj/ref.o ] || skip_all "the emulator needs g++, jansson and ninja's objects"
F=tests/specs/attention/forward.lua W=tests/specs/attention/backward.lua S=tests/specs/attention/backward_emu.lua
# spec, graph, SM, plan (- the default), dims
cases=(
  "$F d128 80 - B=2 S=70 SK=150" "$F d64_causal 80 - B=1 S=150 SK=70" "$F d96 80 - B=1 S=1 SK=90"
  "$F d192_dv128_causal_br 80 - B=2 S=70 SK=150" "$F d256_window 80 - B=1 S=200 SK=170"
  "$F d128_gqa_causal 90a attention:v1:mma:128x64:s2:lse B=2 S=130 SK=129" "$F d128_mqa_band 80 - B=2 S=70 SK=150"
  "$F d128_softcap 100a - B=1 S=70 SK=150" "$F d64_fp16_stats 80 - B=2 S=70 SK=150" "$F d128_log2_stats 80 - B=1 S=70 SK=150"
  "$F d128_runtime_scale 80 - B=2 S=70 SK=150" "$F d128_padding_sink 80 - B=3 S=70 SK=150" "$F d128_bshd 80 - B=2 S=140"
  "$W d128_causal 80 - B=2 S=70 SK=150" "$W d64_causal_det 80 - B=1 S=150 SK=70" "$W d128_gqa_causal 80 - B=1 S=129 SK=130"
  "$S gqa_causal 90a - B=2 S=70 SK=150" "$S gqa_causal 80 attention:v1:bwd:128x32 B=1 S=200 SK=65"
  "$S gqa_causal 90a attention:v1:bwd:64x64 B=1 S=1 SK=90"
  "$S det_causal 90a - B=2 S=150 SK=70" "$S det_causal 100a attention:v1:bwd:128x32:det B=1 S=130 SK=130"
  "$S band_softcap_sink 90a - B=2 S=70 SK=150" "$S band_softcap_sink 80 attention:v1:bwd:128x64 B=1 S=90 SK=40"
  "$S band_softcap_sink 90a attention:v1:bwd:64x32 B=1 S=33 SK=200"
  "$S fp16_d96 90a - B=2 S=70 SK=150" "$S fp16_d96 90a attention:v1:bwd:64x64 B=1 S=100 SK=17"
)
plan ${#cases[@]}
for c in "${cases[@]}"; do
  read -r spec graph sm forced dims <<<"$c"
  # shellcheck disable=SC2086
  out=$(KILN_PLAN=$([ "$forced" = - ] || echo "$forced") tests/gemm_emu/run_plan.sh "$spec" "$graph" "$sm" $dims 2>&1); rc=$?
  ok "emulated $(basename "$spec" .lua) $graph on sm_$sm ($forced, $dims) matches the reference" test "$rc" = 0
  [ "$rc" = 0 ] || sed 's/^/#   /' <<<"$out" | tail -12
done
done_testing
