# The CPU emulator's GEMM cases (sourced by tests/gemm.t and tests/slow/gemm_emu.t, after lib.sh,
# with the arrays emu, sk and pp set): the generated source of each run on the CPU emulator
# (tests/gemm_emu) against the reference executor.
# emu: graph, SM, tile, cluster (sm90 clusters of 2 share B tiles by TMA multicast), at M = 300
#   (two m tiles, a tail);
# sk: stream-K, the last partial wave split along K over the CTAs: graph, SM, tile, grid, M, the
#   flags the run must set (- for no workspace), more KILN_PLAN items; the init kernel clears a
#   poisoned workspace;
# pp: the ping-pong kernel: graph, SM, grid, M, the kernel the plan must use.
# the CPU emulator: generated source vs the reference executor (M = 300: two m tiles, a tail)
if command -v g++ >/dev/null && command -v python3 >/dev/null && [ -f /usr/include/jansson.h ] && [ -f build/obj/ref.o ]; then
  export KILN_EMU_HARNESS=$TMP/emu_harness.o   # (compiled by the first case, linked by every one)
  for c in "${emu[@]}"; do
    read -r graph arch tile cluster <<<"$c"
    rows=M; [[ $graph == grouped* ]] && rows=T  # (a grouped GEMM's rows are its tokens)
    out=$(KILN_PLAN=gemm.tile=${tile/-/auto},gemm.cluster=${cluster:-1} tests/gemm_emu/run.sh tests/specs/gemm/emu.lua "$graph" "$arch" 2 $rows=300 2>&1); rc=$?
    ok "emulated $graph on $arch matches the reference: $(head -1 <<<"$out" | sed 's/^# //')" test "$rc" = 0
    [ "$rc" = 0 ] || sed 's/^/#   /' <<<"$out" | tail -8
  done
  for c in "${sk[@]}"; do
    read -r graph arch tile grid m flags items <<<"$c"
    # (a plan id alone: the tile filter would match the best-ranked candidate first)
    if [[ $items == gemm:* ]]; then forced=$items; else forced=gemm.tile=${tile/-/auto}${items:+,$items}; fi
    out=$(KILN_PLAN=$forced tests/gemm_emu/run.sh tests/specs/gemm/emu.lua "$graph" "$arch" "$grid" M=$m 2>&1); rc=$?
    got=$(sed -n 's/^  stream-K: \([0-9]*\) flags set$/\1/p' <<<"$out"); got=${got:--}
    ok "stream-K: emulated $graph on $arch, tile $tile, $grid CTAs, M=$m${items:+, $items}: $got flags set (want $flags), matches the reference" \
      test "$rc" = 0 -a "$got" = "$flags"
    [ "$rc" = 0 ] || sed 's/^/#   /' <<<"$out" | tail -8
  done
  for c in "${pp[@]}"; do
    read -r graph arch grid m path <<<"$c"
    out=$(KILN_PLAN=gemm.schedule=pingpong tests/gemm_emu/run.sh tests/specs/gemm/emu.lua "$graph" "$arch" "$grid" M=$m 2>&1); rc=$?
    used=$(grep -q "(kiln gemm engine, ${path/-/ } path," <<<"$out" && echo yes || echo no)
    ok "pingpong: emulated $graph on $arch, $grid CTAs, M=$m: the ${path/-/ } kernel ($used), matches the reference" \
      test "$rc" = 0 -a "$used" = yes
    [ "$rc" = 0 ] || sed 's/^/#   /' <<<"$out" | tail -8
  done
else
  for c in "${emu[@]}" "${sk[@]}" "${pp[@]}"; do pass "# SKIP emulator needs g++, python3, jansson and the objects ninja builds"; done
fi
