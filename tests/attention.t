#!/usr/bin/env bash
# The attention engine (sdpa and sdpa_backward): every attention spec, shipped and test, builds
# for sm_80, sm_90a and sm_100a; sm_90a takes the wgmma kernel for the forward (ptxas spills
# nothing below D = 256), other SMs the mma.sync kernel, every SM the mma.sync backward; each
# option the kernels do not take is declined by name (and the build fails with E_NO_ENGINE
# naming it); KILN_PLAN forces a candidate; the mma.sync forward and the backward run on the
# CPU emulator.
# Correctness runs on the GPU too (tests/gpu/run: every graph of
# tests/specs/attention/{forward,decode,backward}.lua against the fp64 reference); the cold
# compile time per kernel is tests/timing/compile_times.t's.
. "$(dirname "$0")/lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
specs=(specs/sdpa_*.lua tests/specs/attention/forward.lua tests/specs/attention/decode.lua tests/specs/attention/backward.lua
  tests/specs/bench/sdpa.lua)
declined=(
  "bias|an additive bias \('bias'\)"
  "alibi|ALiBi \('use_alibi_mask'\)"
  "head_dim_80|head dims \(D 80, Dv 80\) are not built"
  "strided_head_dim|q's head dim is not contiguous"
  "dropout|dropout \('seed'\)"
  "backward_d256|head dims \(D 256, Dv 256\) are not built for the backward"
  "o_fp32|O is fp32 but q is bf16"
  "paged_prefill|paged K/V is taken by the decode kernels only"
)
plan $(( ${#specs[@]} * 3 + ${#declined[@]} * 2 + 14 ))

for s in "${specs[@]}"; do
  KILN_DUMP_DIR=$TMP/dump run_kiln build "$s" --sm 80 --sm 90a --sm 100a -o "$TMP/$(basename "$s" .lua).kpack" -j 2
  expect_rc 0 "build $s for sm_80 sm_90a sm_100a"
  # decode shapes (static S of 16 or fewer) take the split decode kernels on every SM
  kind=sm90 other=mma
  case $s in
    *decode*) kind=decode other=decode ;;
    */bench/* | *backward*) kind="(sm90|decode|bwd)" other="(mma|decode|bwd)" ;;
  esac
  run_kiln explain "$s" --sm 90a
  groups=$(grep -c '^  group' "$OUTF"); wg=$(grep -E -c "plan attention:v1:$kind:" "$OUTF")
  ok "explain $s: the attention engine takes all $groups groups with a $kind plan on sm_90a" test "$groups" -gt 0 -a "$wg" = "$groups"
  run_kiln explain "$s" --sm 80
  mma=$(grep -E -c "plan attention:v1:$other:" "$OUTF")
  ok "explain $s: the $other plan on sm_80 for all $groups groups" test "$mma" = "$groups"
done

# spills: none in any kernel but D = 256's sm_90a kernel (O's 128 registers a thread beside S)
spilled=$(grep -l 'bytes spill stores' "$TMP"/dump/*.log 2>/dev/null | xargs -r grep -L ' 0 bytes spill stores' | xargs -r -n1 basename | sort -u)
unexpected=$(grep -v -E 'd256|D_256' <<<"$spilled" | grep sm_90a || true)
ok "no spills in the sm_90a kernels below D = 256 (spilled: $(echo $spilled))" test -z "$unexpected"
ok "the ptxas reports were kept" test -n "$(ls "$TMP"/dump/*sm_90a*.log 2>/dev/null)"

for d in "${declined[@]}"; do
  graph=${d%%|*} why=${d#*|}
  run_kiln explain tests/specs/attention/declined.lua --graph "$graph"
  expect_out "attention  declined: $why" "explain: $graph declined by name"
  run_kiln build tests/specs/attention/declined.lua --graph "$graph" --sm 90a -o "$TMP/d.kpack"
  expect_err "E_NO_ENGINE.*$why" "build: $graph fails with E_NO_ENGINE naming the reason"
done

# KILN_PLAN forces a candidate (here: the tile of 176 keys without ping-pong)
KILN_PLAN=attention:v1:sm90:128x176:s2 run_kiln explain tests/specs/bench/sdpa.lua --graph sdpa_causal --sm 90a
expect_out "plan attention:v1:sm90:128x176:s2$" "KILN_PLAN forces the 128x176 tile without ping-pong"
KILN_PLAN=0=attention:v1:mma:128x64:s2 run_kiln explain tests/specs/bench/sdpa.lua --graph sdpa_causal --sm 90a
expect_out "plan attention:v1:mma:128x64:s2$" "KILN_PLAN=G=ID forces group G's mma.sync plan on sm_90a"

# decode: the deepest ring that fits first (sm_90a: 227 KB, sm_80: 163 KB), another forced by
# KILN_PLAN; the split kernel and its combine in the pack
run_kiln explain specs/sdpa_decode.lua --sm 90a
expect_out "plan attention:v1:decode:k32:s3$" "sm_90a: blocks of 32 keys in rings of 3"
run_kiln explain specs/sdpa_decode.lua --sm 80
expect_out "plan attention:v1:decode:k16:s4$" "sm_80: blocks of 16 keys in rings of 4"
KILN_PLAN=attention:v1:decode:k16:s2 run_kiln explain specs/sdpa_decode.lua --sm 90a
expect_out "plan attention:v1:decode:k16:s2$" "KILN_PLAN forces another candidate"
"$KILN" pack inspect "$TMP/sdpa_decode.kpack" > "$OUTF" 2>&1
ok "the decode pack holds the split and combine kernels" grep -q '_combine' "$OUTF"

# backward: the widest tile without spills first (D 128: 32 query rows a step; D 64: 64), the
# deterministic plan named, another forced for the backward's group; the pre-pass, the main
# kernel and the dQ pass in the pack
B=tests/specs/attention/backward.lua
run_kiln explain $B --graph d128_causal --sm 90a
expect_out "plan attention:v1:bwd:128x32$" "D 128: 128 keys by 32 query rows first"
run_kiln explain $B --graph d64_causal_det --sm 80
expect_out "plan attention:v1:bwd:128x64:det$" "D 64, deterministic: 128 keys by 64 query rows, :det"
KILN_PLAN=1=attention:v1:bwd:64x32 run_kiln explain $B --graph d128_causal --sm 90a
expect_out "plan attention:v1:bwd:64x32$" "KILN_PLAN=1=ID forces the backward group's 64x32 plan"
"$KILN" pack inspect "$TMP/backward.kpack" > "$OUTF" 2>&1
ok "the backward pack holds the pre-pass, main and dQ kernels" \
  bash -c "grep -q 'd128_causal_k1_prep' '$OUTF' && grep -q 'd128_causal_k1_dq' '$OUTF' && grep -q 'd128_causal_k1 ' '$OUTF'"

# the mma.sync forward and the backward's three kernels on the CPU emulator against the fp64
# reference (one case each; the matrix of graphs, plans and lengths is tests/slow/attention_emu.t)
for c in "forward d128_padding_sink 80 B=3 S=70 SK=150" "backward_emu band_softcap_sink 90a B=1 S=70 SK=150"; do
  read -r spec graph sm dims <<<"$c"
  if command -v g++ >/dev/null && [ -f /usr/include/jansson.h ] && [ -f build/obj/ref.o ]; then
    # shellcheck disable=SC2086
    out=$(tests/gemm_emu/run_plan.sh tests/specs/attention/$spec.lua "$graph" "$sm" $dims 2>&1); rc=$?
    ok "emulated $spec $graph matches the reference: $(head -1 <<<"$out" | sed 's/^# //')" test "$rc" = 0
    [ "$rc" = 0 ] || sed 's/^/#   /' <<<"$out" | tail -10
  else
    fail "the CPU emulator needs g++, jansson and ninja's objects"
  fi
done

done_testing
