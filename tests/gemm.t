#!/usr/bin/env bash
# The gemm engine: every shipped GEMM spec builds for sm_80, sm_90a and sm_100a; on sm_90a the
# engine takes every group with a wgmma plan, whose SASS holds HGMMA (QGMMA for fp8) and whose
# ptxas report shows no spills (nor anywhere else); a rebuild is all cache hits, also under
# KILN_JIT=strict; and the
# generated kernels, run on the CPU emulator (tests/gemm_emu), match the reference executor
# (tests/gemm_emu.sh: the cases, and what each field means); and the opt-in ping-pong kernel
# (KILN_PLAN=gemm.schedule=pingpong): built for every spec, no spills.
. "$(dirname "$0")/lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
specs=(specs/gemm*.lua)
# the CPU emulator's cases here: one of each path and kind (tests/slow/gemm_emu.t, `ninja
# test-slow`, runs the full matrix: every layout, epilogue, dtype, tile, cluster and stream-K case)
emu=("nn sm_90a 256" "fp8 sm_90a 192 2" "nn sm_80 -" "grouped sm_90a 192")
sk=("nn_sk sm_90a 256 3 500 16")
pp=("nn sm_90a 2 300 sm_90a-pingpong")
plan $(( ${#specs[@]} * 6 + 5 + 6 + 9 + 1 + ${#emu[@]} + ${#sk[@]} + ${#pp[@]} ))

# cuobjdump (and the nvdisasm it runs) from PATH, CUDA, or the nvidia-cuda-cuobjdump/-nvdisasm wheels
sass_tools() {
  local d
  for d in "" /usr/local/cuda/bin $(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13/bin"))' 2>/dev/null); do
    if [ -z "$d" ]; then command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null && { CUOBJDUMP=cuobjdump; return 0; }
    elif [ -x "$d/cuobjdump" ] && [ -x "$d/nvdisasm" ]; then CUOBJDUMP=$d/cuobjdump; export PATH=$d:$PATH; return 0; fi
  done
  return 1
}

for s in "${specs[@]}"; do
  KILN_DUMP_DIR=$TMP/dump run_kiln build "$s" --sm 80 --sm 90a --sm 100a -o "$TMP/$(basename "$s" .lua).kpack"
  expect_rc 0 "build $s for sm_80 sm_90a sm_100a"
  run_kiln build "$s" --sm 80 --sm 90a --sm 100a
  expect_rc 0 "rebuild $s"
  expect_out ": 0 compiled, [0-9]+ cached" "rebuild of $s compiles nothing"
  KILN_JIT=strict run_kiln build "$s" --sm 80 --sm 90a --sm 100a
  expect_rc 0 "strict build of $s from a warm cache"
  run_kiln explain "$s" --sm 90a
  groups=$(grep -c '^  group' "$OUTF"); wg=$(grep -c 'plan gemm:v1:sm90:' "$OUTF")
  ok "explain $s: the gemm engine takes all $groups groups with a wgmma plan on sm_90a" \
    test "$groups" -gt 0 -a "$wg" = "$groups"
  run_kiln explain "$s" --sm 100a
  mm=$(grep -c '^  group [0-9]* (.*matmul' "$OUTF")
  ok "explain $s: the mma.sync fallback serves the $mm GEMM groups on sm_100a" test "$mm" -gt 0 -a "$(grep -c 'plan gemm:v1:mma:' "$OUTF")" = "$mm"
done

# two linear layers of one x: one dual GEMM kernel on every SM (wgmma on sm_90a, the mma
# kernel's interleaved tile on sm_80); the dual kernels' ptxas reports join the checks below
KILN_DUMP_DIR=$TMP/dump run_kiln build specs/gemm_gated_mlp.lua --sm 80 --sm 90a -o "$TMP/dual.kpack"
nk=$("$KILN" pack inspect "$TMP/dual.kpack" | grep -c '^    kiln_gemm_gated_mlp_k[0-9]*  ')
run_kiln explain specs/gemm_gated_mlp.lua --sm 90a
n90=$(grep -c 'plan gemm:v1:sm90:128x256x64:s4:dual:' "$OUTF")
run_kiln explain specs/gemm_gated_mlp.lua --sm 80
n80=$(grep -c 'plan gemm:v1:mma:128x192x64:s3:async:dual:' "$OUTF")
ok "gated MLP: one dual GEMM kernel for each of 3 instances ($nk GEMM kernels in the sm_80 + sm_90a pack; $n90 sm90 plans on sm_90a, $n80 mma plans on sm_80)" \
  test "$nk" = 3 -a "$n90" = 3 -a "$n80" = 3

# The ptxas reports of a dump folder's GEMM kernels: the block-scaled mma kernels' (the sm_80 /
# sm_100a fallback adds each k16 step's products into fp32 with their scales at the 168-register
# cap: a few words may spill, bounded and reported below) and all the others'
block_scaled_logs() { grep -l 'portable path.*, block-scaled' "$1"/*.cu 2>/dev/null | sed 's/\.cu$/.log/'; }
other_logs() {
  local bs
  bs=$(block_scaled_logs "$1")
  ls "$1"/*.log 2>/dev/null | grep -v _init_ | grep -v -x -F "${bs:-/none}"
}
bslogs=$(block_scaled_logs "$TMP"/dump)
logs=$(other_logs "$TMP"/dump)
spilling=$(grep -L "0 bytes spill stores, 0 bytes spill loads" $logs)
ok "ptxas reports no spills in any GEMM kernel ($(echo "$logs" | wc -w) kernels)" test -n "$logs" -a -z "$spilling"
for f in $spilling; do echo "#   spills: $f"; done
bsmax=$(grep -ho '[0-9]* bytes spill stores' $bslogs | awk '$1 > m { m = $1 } END { print m + 0 }')
ok "the block-scaled mma kernels ($(echo "$bslogs" | wc -w)) spill at most 16 bytes (most: $bsmax)" test -n "$bslogs" -a "$bsmax" -le 16
grep -h "Used [0-9]* registers" $(ls $TMP/dump/*sm_90a.log | grep -v _init_) | sort | uniq -c | sed 's/^/# sm_90a: /'
# a stack frame (an accumulator array indexed at run time) or wgmma serialized behind reads of
# its accumulators (ptxas C7514) costs the sm_90a kernels their speed without any spill
slow=$(grep -l -E "[1-9][0-9]* bytes stack frame|C7514" $(ls $TMP/dump/*sm_90a.log | grep -v _init_))
ok "ptxas: no stack frame and no serialized wgmma in any sm_90a GEMM kernel" test -z "$slow"
for f in $slow; do echo "#   stack or C7514: $f"; done

# the cooperative kernel stages its output through shared memory (tensor stores, plan ids
# ending :ts) for every group but the grouped GEMMs' (their tiles end at a group's last row:
# direct stores, plan ids ending :grouped); the epilogue setting direct stores from the
# registers; a misspelt setting or value is refused
run_kiln explain "${specs[@]}" --sm 90a
groups=$(grep -c '^  group' "$OUTF"); ts=$(grep -c 'plan gemm:v1:sm90:.*:ts$' "$OUTF"); grp=$(grep -c 'plan gemm:v1:sm90:.*:grouped$' "$OUTF")
ok "sm_90a: every one of the $groups GEMM groups stages its output (:ts plans: $ts) but the $grp grouped ones" \
  test "$groups" -gt 0 -a "$grp" -gt 0 -a "$((ts + grp))" = "$groups"
KILN_PLAN=gemm.epilogue=direct run_kiln explain "${specs[@]}" --sm 90a
ok "gemm.epilogue=direct: no :ts plan" test "$(grep -c 'plan gemm:v1:sm90:.*:ts$' "$OUTF")" = 0
# the epilogue warps (opt-in): every bf16/fp16 group, not fp8; one pack for every SM; no spills
KILN_PLAN=gemm.epilogue=warpgroup run_kiln explain "${specs[@]}" --sm 90a
ewg=$(grep -c 'plan gemm:v1:sm90:.*:ts:ewg$' "$OUTF"); fp8=$(grep -c '^  group.*plan gemm:v1:sm90:.*:ts$' "$OUTF")
ok "gemm.epilogue=warpgroup: $ewg groups take the epilogue warps, the $fp8 fp8 and dual ones and the $grp grouped ones do not" \
  test "$ewg" -gt 0 -a "$((ewg + fp8 + grp))" = "$groups"
KILN_PLAN=gemm.epilogue=warpgroup KILN_DUMP_DIR=$TMP/ewgdump run_kiln build "${specs[@]}" --sm 80 --sm 90a --sm 100a -o "$TMP/ewg.kpack"
expect_rc 0 "gemm.epilogue=warpgroup: every GEMM spec builds for sm_80 sm_90a sm_100a in one pack"
ewg_spill=$(grep -L "0 bytes spill stores, 0 bytes spill loads" $(other_logs "$TMP"/ewgdump))
ok "gemm.epilogue=warpgroup: ptxas reports no spills" test -z "$ewg_spill"
for f in $ewg_spill; do echo "#   spills: $f"; done
KILN_PLAN=gemm.epilogue=tmastore run_kiln explain specs/gemm.lua --sm 90a
expect_err 'E_USAGE: KILN_PLAN: gemm.epilogue=tmastore: want auto, warpgroup, tma or direct' "gemm.epilogue=tmastore is refused, naming the values"
KILN_PLAN=gemm.epilog=direct run_kiln explain specs/gemm.lua --sm 90a
expect_err "E_USAGE: KILN_PLAN: gemm.epilog=direct: no candidate of gemm has the knob 'epilog'" "a misspelt knob is refused, naming it"

# the ping-pong kernel: every GEMM spec for every SM, a :pp plan for every 16-bit group on sm_90a
# (fp8 keeps the cooperative kernel), no spills
KILN_PLAN=gemm.schedule=pingpong KILN_DUMP_DIR=$TMP/ppdump run_kiln build "${specs[@]}" --sm 80 --sm 90a --sm 100a -o "$TMP/pp.kpack"
expect_rc 0 "gemm.schedule=pingpong: build every GEMM spec for sm_80 sm_90a sm_100a"
KILN_PLAN=gemm.schedule=pingpong run_kiln explain "${specs[@]}" --sm 90a
groups=$(grep -c '^  group [0-9]* (.*matmul' "$OUTF"); ppn=$(grep -c 'plan gemm:v1:sm90:128x128x64:s7:pp$' "$OUTF")
fp8n=$(grep -c -E 'group .*\(.*matmul.*\): plan gemm:v1:sm90:128x[0-9]*x128:s[0-9]*(:sk1(p4)?)?(:ts)?$' "$OUTF")
grp=$(grep -c -E 'group .*\(.*matmul.*\): plan gemm:v1:sm90:.*:grouped$' "$OUTF")
ok "pingpong: sm_90a takes the ping-pong plan for $ppn groups, the cooperative kernel for $fp8n fp8 and $grp grouped groups (of $groups)" \
  test "$ppn" -gt 0 -a "$fp8n" -gt 0 -a "$grp" -gt 0 -a $((ppn + fp8n + grp)) = "$groups"
pplogs=$(other_logs "$TMP"/ppdump)
spilling=$(grep -L "0 bytes spill stores, 0 bytes spill loads" $pplogs)
ok "pingpong: ptxas reports no spills ($(echo "$pplogs" | wc -w) kernels)" test -n "$pplogs" -a -z "$spilling"
for f in $spilling; do echo "#   spills: $f"; done
grep -h "Used [0-9]* registers" $(grep -l "sm_90a pingpong path" "$TMP"/ppdump/*sm_90a.cu | sed 's/\.cu$/.log/') | sort | uniq -c |
  sed 's/^/# sm_90a pingpong: /'
for bad in "schedule=ping:cooperative or pingpong" "streamk=yes:auto, 0 or 1" "fill=101:a whole number, 0 to 100" \
           "group=12:16, 4, 8 or 32" "l2hint=evict:none, alast, bfirst or both"; do
  KILN_PLAN=gemm.${bad%%:*} run_kiln explain specs/gemm.lua --sm 90a
  expect_err "E_USAGE: KILN_PLAN: gemm.${bad%%:*}: want ${bad#*:}\$" "gemm.${bad%%:*} is refused, naming the values"
done

if sass_tools && command -v python3 >/dev/null; then
  mkdir -p "$TMP/cubins"
  missing="" nk=0
  # the header is "arch = sm_90a" in older cuobjdumps, "code for sm_90a" in 13.2
  for s in "${specs[@]}"; do
    n=$(basename "$s" .lua)
    rm -f "$TMP"/cubins/*
    python3 tests/gemm_emu/cubins.py "$TMP/$n.kpack" "$TMP/cubins" >/dev/null
    for c in "$TMP"/cubins/*.cubin; do
      sass=$("$CUOBJDUMP" --dump-sass "$c" 2>/dev/null)
      grep -Eq 'arch = sm_90a|code for sm_90a' <<<"$sass" || continue
      grep -q '_init' <<<"$(grep -m1 Function <<<"$sass")" && continue
      nk=$((nk + 1))
      want=HGMMA; [ "$n" = gemm_fp8 ] && want=QGMMA
      grep -q "$want\.64x" <<<"$sass" || missing="$missing $n"
      grep -q "UTMALDG" <<<"$sass" || missing="$missing $n(TMA)"
    done
  done
  ok "sm_90a SASS of every GEMM kernel ($nk) holds HGMMA (QGMMA for fp8) and TMA loads (UTMALDG)${missing:+ (missing:$missing)}" \
    test "$nk" -gt 0 -a -z "$missing"
  # the ping-pong kernels: two m64n128 HGMMA rows per k-step and the named-barrier turns
  rm -f "$TMP"/cubins/*
  python3 tests/gemm_emu/cubins.py "$TMP/pp.kpack" "$TMP/cubins" >/dev/null
  missing="" nk=0
  for c in "$TMP"/cubins/*.cubin; do
    sass=$("$CUOBJDUMP" --dump-sass "$c" 2>/dev/null)
    grep -Eq 'arch = sm_90a|code for sm_90a' <<<"$sass" && grep -q 'HGMMA' <<<"$sass" || continue
    nk=$((nk + 1))
    [ "$(grep -c 'HGMMA\.64x128x16' <<<"$sass")" = 8 ] || missing="$missing k$nk(HGMMA)"
    grep -q 'BAR\.ARV' <<<"$sass" && grep -q 'BAR\.SYNC[.A-Z_]* R' <<<"$sass" || missing="$missing k$nk(BAR)"
  done
  ok "pingpong: sm_90a SASS of $nk kernels holds 8 HGMMA.64x128x16 per k-block and BAR.ARV/BAR.SYNC${missing:+ (missing:$missing)}" \
    test "$nk" -gt 0 -a -z "$missing"
else
  pass "# SKIP no cuobjdump/nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
  pass "# SKIP no cuobjdump/nvdisasm"
fi


. tests/gemm_emu.sh
done_testing
