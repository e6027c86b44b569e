#!/usr/bin/env bash
# The attention backward on the CPU emulator (`ninja test-slow`; tests/attention.t runs one case):
# every graph of tests/specs/attention/backward_emu.lua under each of its candidate plans, at
# lengths off the tiles (S < SK, S > SK, one query), its three kernels in order against the fp64
# reference (tests/gemm_emu/run_plan.sh).
. "$(dirname "$0")/../lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
command -v g++ >/dev/null && [ -f /usr/include/jansson.h ] && [ -f build/obj/ref.o ] || skip_all "the emulator needs g++, jansson and ninja's objects"
S=tests/specs/attention/backward_emu.lua
# graph, SM, plan (- the default), dims
cases=(
  "gqa_causal 90a - B=2 S=70 SK=150" "gqa_causal 80 attention:v1:bwd:128x32 B=1 S=200 SK=65"
  "gqa_causal 90a attention:v1:bwd:64x64 B=1 S=1 SK=90"
  "det_causal 90a - B=2 S=150 SK=70" "det_causal 100a attention:v1:bwd:128x32:det B=1 S=130 SK=130"
  "band_softcap_sink 90a - B=2 S=70 SK=150" "band_softcap_sink 80 attention:v1:bwd:128x64 B=1 S=90 SK=40"
  "band_softcap_sink 90a attention:v1:bwd:64x32 B=1 S=33 SK=200"
  "fp16_d96 90a - B=2 S=70 SK=150" "fp16_d96 90a attention:v1:bwd:64x64 B=1 S=100 SK=17"
)
plan ${#cases[@]}
for c in "${cases[@]}"; do
  read -r graph sm forced dims <<<"$c"
  # shellcheck disable=SC2086
  out=$(KILN_PLAN=$([ "$forced" = - ] || echo "$forced") tests/gemm_emu/run_plan.sh $S "$graph" "$sm" $dims 2>&1); rc=$?
  ok "emulated backward $graph on sm_$sm ($forced, $dims) matches the reference" test "$rc" = 0
  [ "$rc" = 0 ] || sed 's/^/#   /' <<<"$out" | tail -12
done
done_testing
