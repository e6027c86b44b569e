# conv1d engine steps of tests/gpu/run (sourced; step group "linear"): conv1d_check (pstep calls,
# in parallel with the other checks) and conv1d_bench (timed alone).
#   conv1d_check  every graph of tests/specs/conv1d/{forward,backward}.lua (widths 2..256, both
#                 layouts, seq_idx, states, three dtypes) against the fp64 reference at one step,
#                 75 and 1000 steps (within a tile, across tiles, tails), 130 (one past two tiles
#                 of 64), 40000 in one sequence (many time tiles, the backward's chunks); the other
#                 forward tiles forced by KILN_PLAN; the benchmarked graphs (D = 8192) and the
#                 backward's 2-CTA candidate; the decode update (tests/specs/conv1d/decode.lua)
#                 at 1, 5 and 300 sequences; the shipped specs at B = 1 x T = 32768 (the split of
#                 a long single sequence) beside the T = 4097 of the "check" step; compute-sanitizer
#                 memcheck of all three test specs and racecheck of the backward; the new candidates
#                 (the pipelined forward :kK, the prefetching backward :pf, the decode update in
#                 vectors :decN:vV) forced by KILN_PLAN on each graph offered them, each run first
#                 checking (explain) that the forced plan was taken, at 333, 1000 and 40000 steps,
#                 the decode graphs at 1, 5, 300 sequences and the forward graphs at 1 and 3 steps
#                 (1000 / 700 sequences), on the bench graphs and the shipped specs at
#                 B = 1 x T = 32768; memcheck and racecheck of them.
#   conv1d_bench  bench/bench_conv1d.py beside the copy rate and FLA (installed from .whl when
#                 missing) -> $OUT/conv1d.csv; also the packs built with each new candidate forced
#                 (rows carry their plan ids).
CONV1D_FWD=tests/specs/conv1d/forward.lua
CONV1D_BWD=tests/specs/conv1d/backward.lua
CONV1D_DEC=tests/specs/conv1d/decode.lua

conv1d_check() {
  local sz s p
  for sz in "B=1 T=1" "B=2 T=75" "B=3 T=1000" "B=2 T=130" "B=1 T=40000"; do
    for s in $CONV1D_FWD $CONV1D_BWD; do
      pstep "conv1d $(basename "$s" .lua) $sz" "$KILN" run "$s" --check $(printf -- '--set %s ' $sz)
    done
  done
  for p in conv1d:v1:fwd:cl:w4:c64:t64 conv1d:v1:fwd:cl:w4:c32:t128 conv1d:v1:fwd:cf:w4:c64:t64; do
    pstep "conv1d forward ${p#conv1d:v1:} B=2 T=333" env KILN_PLAN=$p "$KILN" run $CONV1D_FWD --check --set B=2 --set T=333
  done
  # the benchmarked graphs (D = 8192) on their plans, and the backward's 2-CTA candidate
  pstep "conv1d bench graphs B=2 T=333" "$KILN" run tests/specs/conv1d/bench.lua --check --set B=2 --set T=333
  pstep "conv1d bench backward, n2" env KILN_PLAN=conv1d:v1:bwd:cl:w4:c64:t64:n2 \
    "$KILN" run tests/specs/conv1d/bench.lua --graph conv1d_bwd --check --set B=2 --set T=333
  for sz in "B=1" "B=5" "B=300"; do
    pstep "conv1d decode $sz" "$KILN" run $CONV1D_DEC --check --set $sz
  done
  for s in specs/causal_conv1d.lua specs/causal_conv1d_bwd.lua; do
    pstep "conv1d $(basename "$s" .lua) B=1 T=32768" "$KILN" run "$s" --check --set B=1 --set D=4096 --set T=32768
  done
  for s in $CONV1D_FWD $CONV1D_BWD $CONV1D_DEC; do
    pstep "conv1d memcheck $(basename "$s" .lua)" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$KILN" run "$s" --check --set B=2 --set T=75
  done
  pstep "conv1d racecheck backward" compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$KILN" run $CONV1D_BWD --check --set B=2 --set T=75
  conv1d_check_new
}

# "GRAPH PLAN" for each new candidate (pipelined forward :kK, prefetching backward :pf, the
# decode update in vectors :decN:vV) that explain offers a graph of SPEC (args: SPEC --set ...).
conv1d_new_plans() {
  "$KILN" explain "$@" 2>/dev/null | awk '/^graph / { g = $2 }
    /conv1d     accepted:/ { n = split($0, a, /[ ,]+/); for (i = 1; i <= n; i++) if (a[i] ~ /^conv1d:v1:.*:(k[0-9]+|pf|dec[0-9]+:v[0-9]+)$/) print g, a[i] }'
}

# KILN_PLAN=PLAN: explain shows GRAPH taking it, then run --check (args: KILN PLAN SPEC GRAPH --set ...)
CONV1D_FORCED='KILN=$0 p=$1 s=$2 g=$3; shift 3
KILN_PLAN=$p "$KILN" explain "$s" --graph "$g" "$@" | grep -q "plan $p\$" || { echo "$g: plan $p not taken"; exit 3; }
KILN_PLAN=$p "$KILN" run "$s" --graph "$g" --check "$@"'

conv1d_check_new() {
  local sz s g p
  for s in $CONV1D_FWD $CONV1D_BWD tests/specs/conv1d/bench.lua; do
    for sz in "B=2 T=333" "B=3 T=1000" "B=1 T=40000"; do
      while read -r g p; do
        pstep "conv1d new $(basename "$s" .lua) $g ${p#conv1d:v1:} $sz" bash -c "$CONV1D_FORCED" "$KILN" "$p" "$s" "$g" \
          $(printf -- '--set %s ' $sz)
      done < <(conv1d_new_plans "$s" $(printf -- '--set %s ' $sz))
    done
  done
  # the vector decode update: the decode graphs, and the forward graphs at one and three steps
  # (D = 36, 20, 100: not a multiple of the vector; 1000 sequences: threads go round again)
  for sz in "B=1" "B=5" "B=300"; do
    while read -r g p; do
      pstep "conv1d new decode $g ${p#conv1d:v1:} $sz" bash -c "$CONV1D_FORCED" "$KILN" "$p" $CONV1D_DEC "$g" --set $sz
    done < <(conv1d_new_plans $CONV1D_DEC --set $sz)
  done
  for sz in "B=1000 T=1" "B=700 T=3"; do
    while read -r g p; do
      pstep "conv1d new forward $g ${p#conv1d:v1:} $sz" bash -c "$CONV1D_FORCED" "$KILN" "$p" $CONV1D_FWD "$g" \
        $(printf -- '--set %s ' $sz)
    done < <(conv1d_new_plans $CONV1D_FWD $(printf -- '--set %s ' $sz) | grep ':dec')
  done
  for s in specs/causal_conv1d.lua specs/causal_conv1d_bwd.lua; do
    while read -r g p; do
      pstep "conv1d new $g ${p#conv1d:v1:} B=1 T=32768" bash -c "$CONV1D_FORCED" "$KILN" "$p" "$s" "$g" \
        --set B=1 --set D=4096 --set T=32768
    done < <(conv1d_new_plans "$s" --set B=1 --set D=4096 --set T=32768)
  done
  while read -r g p; do
    pstep "conv1d new memcheck $g ${p#conv1d:v1:}" compute-sanitizer --tool memcheck --error-exitcode 9 \
      bash -c "$CONV1D_FORCED" "$KILN" "$p" $CONV1D_FWD "$g" --set B=2 --set T=300
  done < <(conv1d_new_plans $CONV1D_FWD --set B=2 --set T=300)
  while read -r g p; do
    pstep "conv1d new memcheck $g ${p#conv1d:v1:} B=300" compute-sanitizer --tool memcheck --error-exitcode 9 \
      bash -c "$CONV1D_FORCED" "$KILN" "$p" $CONV1D_DEC "$g" --set B=300
  done < <(conv1d_new_plans $CONV1D_DEC --set B=300)
  while read -r g p; do
    pstep "conv1d new racecheck $g ${p#conv1d:v1:}" compute-sanitizer --tool racecheck --error-exitcode 9 \
      bash -c "$CONV1D_FORCED" "$KILN" "$p" $CONV1D_BWD "$g" --set B=1 --set T=5000
  done < <(conv1d_new_plans $CONV1D_BWD --set B=1 --set T=5000 | head -3)
}

conv1d_bench() {
  local p packs=()
  "$KILN" build tests/specs/conv1d/bench.lua --sm 90a -o "$WORK/conv1d.kpack" >/dev/null
  packs+=(--pack "$WORK/conv1d.kpack")
  # a pack per new candidate the bench graphs are offered (the others keep their first plan)
  for p in $(conv1d_new_plans tests/specs/conv1d/bench.lua --set B=4 --set T=4096 | awk '{ print $2 }' | sort -u); do
    KILN_PLAN=$p "$KILN" build tests/specs/conv1d/bench.lua --sm 90a -o "$WORK/conv1d-${p//:/_}.kpack" >/dev/null &&
      packs+=(--cand "$WORK/conv1d-${p//:/_}.kpack")
  done
  step "bench-conv1d" timeout 600 python3 bench/bench_conv1d.py "${packs[@]}" --out "$OUT"
}
