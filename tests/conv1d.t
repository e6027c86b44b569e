#!/usr/bin/env bash
# The conv1d engine (causal depthwise conv1d forward, backward and decode update): every conv1d
# spec, shipped and test, builds for sm_80, sm_90a and sm_100a with no ptxas spills (a rebuild all
# cache hits, also under KILN_JIT=strict); explain shows
# the conv1d plan of each group (the decode update's short-sequence kernel where L is static and
# at most 16, the tile kernels elsewhere, the backward's tile and reduce kernels with their
# workspace); each layout the kernels do not take is declined by name (and the build fails with
# E_NO_ENGINE naming it); KILN_PLAN forces another tile; the new candidates (pipelined forward,
# prefetching backward, vector decode) build forced and rank after the others (cold compile
# time per kernel: tests/timing/compile_times.t).
# Correctness runs on the GPU (tests/gpu/steps/conv1d.sh: every test graph against the fp64
# reference at odd sizes, compute-sanitizer).
. "$(dirname "$0")/lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
specs=(specs/causal_conv1d.lua specs/causal_conv1d_bwd.lua tests/specs/conv1d/forward.lua tests/specs/conv1d/backward.lua
       tests/specs/conv1d/decode.lua tests/specs/conv1d/bench.lua)
declined=(
  "strided_x|x's strides \{T\*128, 2, 128\} have neither the time axis nor the channel axis contiguous"
  "strided_dout|dout's strides \{T\*128, 2, 128\} have neither the time axis nor the channel axis contiguous"
)
plan $(( ${#specs[@]} * 5 + ${#declined[@]} * 2 + 13 + 13 * 2 + 2 ))

for s in "${specs[@]}"; do
  KILN_DUMP_DIR=$TMP/dump run_kiln build "$s" --sm 80 --sm 90a --sm 100a -o "$TMP/$(basename "$s" .lua).kpack" -j 2
  expect_rc 0 "build $s for sm_80 sm_90a sm_100a"
  run_kiln build "$s" --sm 80 --sm 90a --sm 100a
  expect_rc 0 "rebuild $s"
  expect_out ": 0 compiled, [0-9]+ cached" "rebuild of $s compiles nothing"
  KILN_JIT=strict run_kiln build "$s" --sm 80 --sm 90a --sm 100a
  expect_rc 0 "strict build of $s from a warm cache"
  run_kiln explain "$s" --sm 90a
  groups=$(grep -c '^  group' "$OUTF"); taken=$(grep -c "plan conv1d:v1:" "$OUTF")
  ok "explain $s: the conv1d engine takes all $groups groups" test "$groups" -gt 0 -a "$taken" = "$groups"
done

# the new candidates (pipelined forward :kK, prefetching backward :pf, vector decode :decN:vV),
# forced on every graph offered them, build (their ptxas reports join the spill check)
F=tests/specs/conv1d/forward.lua Bk=tests/specs/conv1d/backward.lua Bn=tests/specs/conv1d/bench.lua Dc=tests/specs/conv1d/decode.lua
newp=("$F|conv1d:v1:fwd:cl:w4:c64:t128:k4" "$F|conv1d:v1:fwd:cf:w3:c64:t128:k4" "$F|conv1d:v1:fwd:cf:w4:c64:t64:k8"
      "$F|conv1d:v1:fwd:cl:w2:c64:t64:k8" "$Bn|conv1d:v1:fwd:cl:w4:c64:t64:k8" "$Bn|conv1d:v1:bwd:cl:w4:c64:t64:n2:pf"
      "$Bk|conv1d:v1:bwd:cf:w4:c64:t64:n12:pf" "$Bk|conv1d:v1:bwd:cl:w2:c32:t64:n12:pf" "$Bk|conv1d:v1:bwd:cf:w3:c64:t64:n12:pf"
      "$Dc|conv1d:v1:fwd:cl:w4:dec1:v8" "$Dc|conv1d:v1:fwd:cf:w4:dec4:v8" "$Dc|conv1d:v1:fwd:cl:w4:dec3:v8"
      "$Bn|conv1d:v1:fwd:cl:w4:dec1:v8")
for e in "${newp[@]}"; do
  s=${e%%|*} p=${e#*|} sz=(--set B=2 --set T=333)
  [ "$s" = "$Bn" ] && sz=()  # the bench graphs as shipped (dynamic B, T)
  KILN_PLAN=$p KILN_DUMP_DIR=$TMP/dump-${p//:/_} run_kiln build "$s" "${sz[@]}" --sm 80 --sm 90a --sm 100a \
    -o "$TMP/new.kpack" -j 2
  expect_rc 0 "KILN_PLAN=$p: $(basename "$s") builds for sm_80 sm_90a sm_100a"
  KILN_PLAN=$p "$KILN" explain "$s" "${sz[@]}" > "$OUTF" 2>&1
  ok "KILN_PLAN=$p is taken where offered" grep -q "plan $p$" "$OUTF"
done
run_kiln explain tests/specs/conv1d/bench.lua --set B=4 --set T=4096
expect_out "conv1d     accepted: conv1d:v1:fwd:cl:w4:c64:t128, conv1d:v1:fwd:cl:w4:c64:t64, conv1d:v1:fwd:cl:w4:c32:t128, conv1d:v1:fwd:cl:w4:c64:t128:k4, conv1d:v1:fwd:cl:w4:c64:t64:k8$" \
  "the pipelined forward candidates rank after the plain tiles"
expect_out "conv1d     accepted: conv1d:v1:bwd:cl:w4:c64:t64:n3, conv1d:v1:bwd:cl:w4:c64:t64:n2, conv1d:v1:bwd:cl:w4:c64:t64:n2:pf$" \
  "the prefetching backward candidate ranks after the plain ones"
expect_out "conv1d     accepted: conv1d:v1:fwd:cl:w4:dec1, conv1d:v1:fwd:cl:w4:dec1:v8, conv1d:v1:fwd:cl:w4:c64:t128," \
  "the vector decode update ranks after the plain one"
run_kiln explain tests/specs/conv1d/decode.lua --graph cf_bf16_w4_l8_seq
expect_out "conv1d     accepted: conv1d:v1:fwd:cf:w4:dec8, conv1d:v1:fwd:cf:w4:c64:t128," "no vector decode past its registers (8 steps)"

spilled=$(grep -l 'bytes spill stores' "$TMP"/dump*/*.log 2>/dev/null | xargs -r grep -L ' 0 bytes spill stores' | xargs -r -n1 basename | sort -u)
ok "no ptxas spills in any conv1d kernel (spilled: $(echo $spilled))" test -z "$spilled"
ok "the ptxas reports were kept" test -n "$(ls "$TMP"/dump/*sm_90a*.log 2>/dev/null)"

# the plans: channel-last forward tiles of 64 channels x 128 steps, the backward's chunks, the
# decode update's short-sequence kernel (width 7: the tile kernel), the general loop past width 4
run_kiln explain specs/causal_conv1d.lua --set B=1 --set D=8192
expect_out "plan conv1d:v1:fwd:cl:w4:c64:t128$" "shipped forward: channel-last tiles of 64 x 128"
run_kiln explain specs/causal_conv1d_bwd.lua --set B=4 --set D=8192
expect_out "plan conv1d:v1:bwd:cl:w4:c64:t64:n2$" "shipped backward (dout channel-first): 128 channel tiles in 2 chunks"
run_kiln explain tests/specs/conv1d/decode.lua --sm 80
expect_out "plan conv1d:v1:fwd:cl:w4:dec1$" "decode update (L = 1): the short-sequence kernel"
expect_out "plan conv1d:v1:fwd:cl:w7:c64:t64$" "decode update at width 7: the tile kernel"
run_kiln explain tests/specs/conv1d/forward.lua --graph cf_bf16_w256_states
expect_out "plan conv1d:v1:fwd:cf:w256:c32:t64$" "width 256: 32 channels a tile (the halo's shared memory)"

for d in "${declined[@]}"; do
  graph=${d%%|*} why=${d#*|}
  run_kiln explain tests/specs/conv1d/declined.lua --graph "$graph"
  expect_out "conv1d     declined: $why" "explain: $graph declined by name"
  run_kiln build tests/specs/conv1d/declined.lua --graph "$graph" --sm 90a -o "$TMP/d.kpack"
  expect_err "E_NO_ENGINE.*$why" "build: $graph fails with E_NO_ENGINE naming the reason"
done
run_kiln explain specs/causal_conv1d.lua --sm 75 --set B=1 --set D=4096
expect_out "conv1d     declined: needs sm_80 or later" "sm_75 declined by name"

KILN_PLAN=conv1d:v1:fwd:cl:w4:c32:t128 run_kiln explain specs/causal_conv1d.lua --set B=1 --set D=4096
expect_out "plan conv1d:v1:fwd:cl:w4:c32:t128$" "KILN_PLAN forces the 32 x 128 tile"

"$KILN" pack inspect "$TMP/causal_conv1d_bwd.kpack" > "$OUTF" 2>&1
ok "the backward pack holds the tile and reduce kernels" grep -q '_reduce' "$OUTF"
ok "the backward plan has a workspace (the chunks' sums)" grep -qi 'workspace' "$OUTF"

done_testing
