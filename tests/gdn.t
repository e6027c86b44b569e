#!/usr/bin/env bash
# The GDN engine (gdn forward): every gdn spec, shipped and test, builds for sm_80, sm_90a and
# sm_100a with no ptxas spills (a rebuild all cache hits, also under KILN_JIT=strict); explain names the plan (the recurrent kernel's decode plans for
# one token a sequence, its long-sequence plans otherwise); each option the kernels do not take
# is declined by name (and the build fails with E_NO_ENGINE naming it); KILN_PLAN forces a
# candidate (cold compile time per kernel: tests/timing/compile_times.t). Correctness runs on the GPU (tests/gpu/steps/gdn.sh:
# every graph of tests/specs/gdn/{forward,decode}.lua against the fp64 reference).
. "$(dirname "$0")/lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
specs=(specs/gdn_layer.lua specs/gdn_decode.lua tests/specs/gdn/forward.lua tests/specs/gdn/decode.lua tests/specs/gdn/bench.lua)
declined=(
  "checkpoints|state_checkpoints \(checkpoint_every_n_tokens = 64\) are not emitted"
  "backward|gdn_bwd has no kiln kernel yet"
  "head_dim_96|head dims K 96, V 96 are not built"
  "strided_q|q \('q'\) is not contiguous"
)
plan $(( ${#specs[@]} * 5 + ${#declined[@]} * 2 + 8 ))

# the test specs build with the recurrent kernel (the chunked kernel's own test builds them with it)
for s in "${specs[@]}"; do
  force=
  case $s in tests/*/forward.lua | tests/*/bench.lua) force=gdn:v1:recurrent:bv8:r1:c32 ;; esac
  KILN_PLAN=$force KILN_DUMP_DIR=$TMP/dump run_kiln build "$s" --sm 80 --sm 90a --sm 100a -o "$TMP/$(basename "$s" .lua).kpack" -j 2
  expect_rc 0 "build $s for sm_80 sm_90a sm_100a${force:+ ($force)}"
  KILN_PLAN=$force run_kiln build "$s" --sm 80 --sm 90a --sm 100a
  expect_rc 0 "rebuild $s"
  expect_out ": 0 compiled, [0-9]+ cached" "rebuild of $s compiles nothing"
  KILN_PLAN=$force KILN_JIT=strict run_kiln build "$s" --sm 80 --sm 90a --sm 100a
  expect_rc 0 "strict build of $s from a warm cache"
  # one token a sequence (T <= 16 N static, or T the dim that names the pool's sequences) takes
  # the recurrent kernel's decode plans; longer ones the chunked kernel where it takes them,
  # else the recurrent kernel's long form
  kind="(chunk:.*|recurrent:bv8:r1:c32)"
  case $s in *decode*) kind="recurrent:bv32:r2:c4" ;; esac
  run_kiln explain "$s" --sm 90a
  groups=$(grep -c '^  group.*(gdn)' "$OUTF"); n=$(grep -E -c "plan gdn:v1:$kind$" "$OUTF")
  ok "explain $s: every gdn group ($groups) takes gdn:v1:$kind" test "$groups" -gt 0 -a "$n" = "$groups"
done
run_kiln explain tests/specs/gdn/forward.lua --sm 90a
groups=$(grep -c '^  group.*(gdn)' "$OUTF"); n=$(grep -E -c "gdn        accepted: .*gdn:v1:recurrent:bv8:r1:c32" "$OUTF")
ok "explain: the recurrent plan is a candidate of every gdn group ($groups) of tests/specs/gdn/forward.lua" test "$n" = "$groups"
KILN_PLAN=gdn:v1:recurrent:bv8:r1:c32 run_kiln explain specs/gdn_layer.lua --sm 90a
expect_out "plan gdn:v1:recurrent:bv8:r1:c32$" "KILN_PLAN forces the recurrent plan over the chunked one"

# spills: none in the recurrent kernels (their sources say "recurrent form")
recurrent=$(grep -l 'kiln GDN engine, recurrent form' "$TMP"/dump/*.cu 2>/dev/null | sed 's/\.cu$/.log/')
spilled=$(echo "$recurrent" | xargs -r grep -L ' 0 bytes spill stores' | xargs -r -n1 basename | sort -u)
ok "no ptxas spills in any recurrent gdn kernel ($(echo "$recurrent" | wc -l) checked; spilled: $(echo $spilled))" \
  test -n "$recurrent" -a -z "$spilled"
ok "the ptxas reports were kept" test -n "$(ls "$TMP"/dump/*gdn*sm_90a*.log 2>/dev/null)"

for d in "${declined[@]}"; do
  graph=${d%%|*} why=${d#*|}
  run_kiln explain tests/specs/gdn/declined.lua --graph "$graph"
  expect_out "gdn        declined: $why" "explain: $graph declined by name"
  run_kiln build tests/specs/gdn/declined.lua --graph "$graph" --sm 90a -o "$TMP/d.kpack"
  expect_err "E_NO_ENGINE.*$why" "build: $graph fails with E_NO_ENGINE naming the reason"
done

# every candidate builds: KILN_PLAN forces the others (decode's 16- and 64-row tiles, the
# long form's 16 and 32)
for p in recurrent:bv16:r1:c4 recurrent:bv64:r4:c4; do
  KILN_PLAN=gdn:v1:$p run_kiln build specs/gdn_decode.lua --sm 90a -o "$TMP/p.kpack"
  expect_rc 0 "KILN_PLAN=gdn:v1:$p builds specs/gdn_decode.lua"
done
for p in recurrent:bv16:r1:c32 recurrent:bv32:r2:c16; do
  KILN_PLAN=gdn:v1:$p run_kiln build specs/gdn_layer.lua --sm 80 -o "$TMP/p.kpack"
  expect_rc 0 "KILN_PLAN=gdn:v1:$p builds specs/gdn_layer.lua"
done

done_testing
