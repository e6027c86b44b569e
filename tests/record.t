#!/usr/bin/env bash
# Record and replay: KILN_RECORD=FILE makes `kiln build` and the JIT library append what they
# built (spec, dims, graphs, SMs); `kiln build --from FILE` builds that set into one pack, from
# which a KILN_JIT=strict run of the same builds needs no compiler; appends from processes at
# once never interleave; bad records are typed errors.
. "$(dirname "$0")/lib.sh"
{ [ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc; } || skip_all "NVRTC not installed"
plan 13
R=$TMP/rec.jsonl
KILN_RECORD=$R run_kiln build specs/bias_gelu.lua --sm 80 --set H=4096 -o "$TMP/a.kpack"
expect_rc 0 "a recorded build"
KILN_RECORD=$R run_kiln build specs/rmsnorm.lua --graph rmsnorm --sm 90a --sm 80 -o "$TMP/b.kpack"
expect_rc 0 "another, of one graph for two SMs"
ok "two lines recorded" test "$(wc -l < "$R")" = 2
ok "... naming the spec by its absolute path, the dims, the graph and the SMs" \
  grep -q "\"set\":\[\"H=4096\"\],\"sm\":\[\"sm_80\"\],\"spec\":\"$PWD/specs/bias_gelu.lua\"" "$R"
# the JIT library (kiln_jit_build) records too
KILN_RECORD=$TMP/jit.jsonl build/tests/test_jit >/dev/null 2>&1
ok "kiln_jit_build records its builds" test -s "$TMP/jit.jsonl"
# replay into an empty cache: one pack with every recorded graph instance
KILN_CACHE_DIR=$TMP/fresh run_kiln build --from "$R" -o "$TMP/app.kpack"
expect_rc 0 "build --from the record"
"$KILN" pack inspect "$TMP/app.kpack" > "$OUTF" 2>&1
ok "the pack holds bias_gelu [H=4096] and rmsnorm's instances" \
  bash -c "grep -q '^plan bias_gelu \[H=4096\]' '$OUTF' && [ \$(grep -c '^plan rmsnorm ' '$OUTF') -ge 1 ] && ! grep -q '^plan rmsnorm_train' '$OUTF'"
KILN_JIT=strict KILN_CACHE_DIR=$TMP/fresh run_kiln build specs/bias_gelu.lua --sm 80 --set H=4096 -o "$TMP/x.kpack"
expect_rc 0 "the recorded builds then need no compiler (KILN_JIT=strict)"
KILN_JIT=strict KILN_CACHE_DIR=$TMP/fresh run_kiln build specs/rmsnorm.lua --graph rmsnorm --sm 90a --sm 80 -o "$TMP/y.kpack"
expect_rc 0 "... for every SM recorded"
# eight processes recording at once: eight whole lines
for i in 1 2 3 4 5 6 7 8; do
  KILN_RECORD=$TMP/par.jsonl "$KILN" build specs/bias_gelu.lua --sm 80 --set H=$((1024 * i)) -o "$TMP/p$i.kpack" >/dev/null 2>&1 &
done
wait
ok "eight builds at once record eight whole lines" \
  bash -c "[ \$(grep -c '^{\"graph\":\[\],\"schema\":\"kiln.record\",.*}$' '$TMP/par.jsonl') = 8 ]"
# bad input
run_kiln build specs/bias_gelu.lua --from "$R" -o "$TMP/z.kpack"
expect_err "E_USAGE: build takes SPECs or --from FILE, not both" "SPECs and --from together are a usage error"
printf '{"schema":"kiln.record","spec":"x.lua"}\nnot json\n' > "$TMP/bad.jsonl"
run_kiln build --from "$TMP/bad.jsonl" -o "$TMP/z.kpack"
expect_err "bad.jsonl:2: E_JSON: not a kiln build record" "a line that is not a record is E_JSON at its line"
run_kiln build --from "$TMP/none.jsonl"
expect_err "E_IO: cannot read the record" "a missing record file is E_IO"
done_testing
