# GDN engine steps of tests/gpu/run (sourced; step group "linear"): gdn_check (pstep calls, in
# parallel with the other checks) and gdn_bench (timed alone).
#   gdn_check  every graph of tests/specs/gdn/forward.lua on the recurrent kernel (forced by
#              KILN_PLAN: the chunked kernel ranks first there) against the fp64 reference at
#              T = 75, 1000 and 2049 tokens in 4 sequences (kiln run draws cu_seqlens as sorted
#              boundaries 0 .. T, state_indices as distinct pool rows), the other long-form
#              candidates at T = 1000; tests/specs/gdn/decode.lua (one token a sequence, pool
#              rows) on each decode candidate; the shipped specs/gdn_layer.lua on the recurrent
#              kernel at T = 2049; compute-sanitizer memcheck of both forms, racecheck of one;
#              gdn_chunk_check and gdn_split_check (the chunked plans, fused and split).
#   gdn_bench  bench/bench_gdn.py beside FLA (installed from .whl when missing) -> $OUT/gdn.csv,
#              the forward rows on the fused chunked plan and the split bv32 plan too (--forward-pack).
GDN_FWD=tests/specs/gdn/forward.lua
GDN_DEC=tests/specs/gdn/decode.lua
GDN_LONG=gdn:v1:recurrent:bv8:r1:c32
GDN_SPLIT=gdn:v1:chunk:split:c64:bv32

gdn_check() {
  local t p
  gdn_chunk_check
  gdn_split_check
  for t in 75 1000 2049; do
    pstep "gdn recurrent T=$t" env KILN_PLAN=$GDN_LONG "$KILN" run $GDN_FWD --check --set T=$t --set P=9
  done
  for p in gdn:v1:recurrent:bv16:r1:c32 gdn:v1:recurrent:bv32:r2:c16; do
    pstep "gdn ${p#gdn:v1:} T=1000" env KILN_PLAN=$p "$KILN" run $GDN_FWD --check --set T=1000 --set P=9
  done
  for p in gdn:v1:recurrent:bv32:r2:c4 gdn:v1:recurrent:bv16:r1:c4 gdn:v1:recurrent:bv64:r4:c4; do
    pstep "gdn decode ${p#gdn:v1:}" env KILN_PLAN=$p "$KILN" run $GDN_DEC --check --set P=11
  done
  pstep "gdn layer, recurrent T=2049" env KILN_PLAN=$GDN_LONG "$KILN" run specs/gdn_layer.lua --check --set T=2049
  pstep "gdn recurrent memcheck" env KILN_PLAN=$GDN_LONG compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$KILN" run $GDN_FWD --check --set T=75 --set P=9
  pstep "gdn decode memcheck" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$KILN" run $GDN_DEC --check --set P=11
  # the stages, per-token scalars and outputs pass between threads through shared memory
  pstep "gdn recurrent racecheck" env KILN_PLAN=$GDN_LONG compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$KILN" run $GDN_FWD --graph gdn_pool --graph gdn_gva4_d64 --check --set T=75 --set P=9
}

# the chunked kernel (tests/specs/gdn/chunk.lua, and every option of forward.lua on it) at odd
# lengths in 5 sequences, both V tiles, the shipped layer, memcheck
gdn_chunk_check() {
  local t
  for t in 75 1000 2049; do
    pstep "gdn chunk bv64 T=$t" env KILN_PLAN=gdn:v1:chunk:c64:bv64 "$KILN" run tests/specs/gdn/chunk.lua --check --set T=$t --set N1=5
  done
  pstep "gdn chunk bv128 T=1000" env KILN_PLAN=gdn:v1:chunk:c64:bv128 "$KILN" run tests/specs/gdn/chunk.lua --check --set T=1000 --set N1=5
  pstep "gdn chunk forward.lua T=1000" env KILN_PLAN=gdn:v1:chunk:c64:bv64 "$KILN" run $GDN_FWD --check --set T=1000 --set P=9
  pstep "gdn layer, chunk T=2049" env KILN_PLAN=gdn:v1:chunk:c64:bv64 "$KILN" run specs/gdn_layer.lua --check --set T=2049
  pstep "gdn chunk memcheck" env KILN_PLAN=gdn:v1:chunk:c64:bv64 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$KILN" run tests/specs/gdn/chunk.lua --check --set T=200 --set N1=5
}

# the split chunked plans (pre-pass, state pass, output; workspace) on the graphs of
# tests/specs/gdn/chunk.lua and forward.lua at odd lengths in 5 sequences, each tile of the
# state pass (16, 32, 64 rows), the shipped layer, memcheck and racecheck. A graph whose T and
# cu_seqlens length are both dynamic (chunk.lua's d64_fp16_linear) gets no split plan:
# KILN_PLAN leaves it on the fused one.
gdn_split_check() {
  local t p
  for t in 75 1000 2049; do
    pstep "gdn split bv32 T=$t" env KILN_PLAN=$GDN_SPLIT "$KILN" run tests/specs/gdn/chunk.lua --check --set T=$t --set N1=5
  done
  for p in bv16 bv64; do
    pstep "gdn split $p T=1000" env KILN_PLAN=gdn:v1:chunk:split:c64:$p "$KILN" run tests/specs/gdn/chunk.lua --check --set T=1000 --set N1=5
  done
  pstep "gdn split forward.lua T=1000" env KILN_PLAN=$GDN_SPLIT "$KILN" run $GDN_FWD --check --set T=1000 --set P=9
  pstep "gdn layer, split T=2049" env KILN_PLAN=$GDN_SPLIT "$KILN" run specs/gdn_layer.lua --check --set T=2049
  pstep "gdn split memcheck" env KILN_PLAN=$GDN_SPLIT compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$KILN" run tests/specs/gdn/chunk.lua --check --set T=200 --set N1=5
  pstep "gdn split racecheck" env KILN_PLAN=$GDN_SPLIT compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$KILN" run tests/specs/gdn/chunk.lua --graph gva_d128_safe --check --set T=200
}

gdn_bench() {
  "$KILN" build specs/gdn_decode.lua tests/specs/gdn/bench.lua --sm 90a -o "$WORK/gdn.kpack" >/dev/null
  # the other decode candidates, for the ranking
  local p alt=()
  for p in bv16:r1:c4 bv64:r4:c4; do
    KILN_PLAN=gdn:v1:recurrent:$p "$KILN" build specs/gdn_decode.lua --sm 90a -o "$WORK/gdn_${p//:/_}.kpack" >/dev/null &&
      alt+=(--decode-pack "$WORK/gdn_${p//:/_}.kpack")
  done
  # the forward graphs on the fused chunked plan and the split plan of 32 state rows too (one
  # more row a case and plan; the ranking leads with a split plan, its tile by the CTA count)
  for p in chunk:c64:bv64 chunk:split:c64:bv32; do
    KILN_PLAN=gdn:v1:$p "$KILN" build tests/specs/gdn/bench.lua --sm 90a -o "$WORK/gdn_${p//:/_}.kpack" >/dev/null &&
      alt+=(--forward-pack "$WORK/gdn_${p//:/_}.kpack")
  done
  step "bench-gdn" env FLA_FLASH_QLA=0 timeout 400 python3 bench/bench_gdn.py --pack "$WORK/gdn.kpack" ${alt[@]+"${alt[@]}"} --out "$OUT"
}
