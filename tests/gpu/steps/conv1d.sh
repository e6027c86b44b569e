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
#                 memcheck of all three test specs and racecheck of the backward.
#   conv1d_bench  bench/bench_conv1d.py beside the copy rate and FLA (installed from .whl when
#                 missing) -> $OUT/conv1d.csv.
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
}

conv1d_bench() {
  "$KILN" build tests/specs/conv1d/bench.lua --sm 90a -o "$WORK/conv1d.kpack" >/dev/null
  step "bench-conv1d" timeout 300 python3 bench/bench_conv1d.py --pack "$WORK/conv1d.kpack" --out "$OUT"
}
