#!/usr/bin/env bash
# Specs as a new user writes them (issue 44): norms over cuDNN's [N, C, 1, 1] and [N, 1, 1, C]
# layouts, check and explain selecting engines, a partial build, --graph repeated, optional
# outputs not generated, comparisons and g:where, and graph JSON round trips of every spec.
. "$(dirname "$0")/lib.sh"
shopt -s globstar
N=tests/specs/newuser
# specs that fail on purpose: bad/ and sandbox/, and those whose error a test here or in
# usability.t names
fail_on_purpose="^tests/specs/(bad|sandbox)/|^tests/specs/usability/(absent_input|absent_output|compare_eq|compare_gt|compare_le|where)\.lua$|^$N/(absent_inv|absent_stats|relu_gt|where)\.lua$"
mapfile -t specs < <(printf '%s\n' specs/*.lua tests/specs/**/*.lua | grep -v -E "$fail_on_purpose")
has_nvrtc=0
{ [ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc; } && has_nvrtc=1
plan $(( ${#specs[@]} + 48 ))

# explain's groups, plans and kernels, without the engines' reasons
plans_of() { grep -E '^graph |^  group |^    kernel ' "$OUTF"; }

# 1. a norm over the trailing axis of [N, C, 1, 1] channels-last or [N, 1, 1, C] builds as [N, C]
for sm in 80 90a 100a; do
  run_kiln explain $N/norm_unit_axes.lua --sm $sm; expect_rc 0 "norms over [N, C, 1, 1] and [N, 1, 1, C]: an engine on sm_$sm"
  plans_of > "$TMP/unit.plans"
  run_kiln explain $N/norm_flat.lua --sm $sm; plans_of > "$TMP/flat.plans"
  ok "... the same groups, plans and kernels as over [N, C] (sm_$sm)" cmp -s "$TMP/unit.plans" "$TMP/flat.plans"
done
ok "... the row engine's plans" grep -q "group 0 (rmsnorm): plan row:" "$TMP/unit.plans"
"$KILN" source $N/norm_unit_axes.lua --ptx > "$TMP/unit.src" 2>&1
"$KILN" source $N/norm_flat.lua --ptx > "$TMP/flat.src" 2>&1
ok "... and the same source, byte for byte" cmp -s "$TMP/unit.src" "$TMP/flat.src"
if [ $has_nvrtc = 1 ]; then
  run_kiln build $N/norm_unit_axes.lua --sm 80 --sm 90a --sm 100a -o "$TMP/unit.kpack"
  expect_rc 0 "... and build for sm_80, sm_90a and sm_100a"
else
  pass "# SKIP NVRTC not installed"
fi

# 2. check selects engines for the SMs asked; explain exits 1 on a group without one
run_kiln check $N/two_graphs.lua; expect_rc 1 "check fails a graph no engine takes"
expect_err "kiln: error: E_NO_ENGINE: graph 'strided_scale' \[H=1024\]: no engine for kernel group 0 \(rmsnorm\) on sm_90a: row: scale 'w' \[1024\] is not one contiguous row of \[T, 1024\] \(the other 8 engines build other kinds of group\)$" \
  "... naming the graph, the group, the SM and the row engine's reason alone"
run_kiln check $N/two_graphs.lua --graph fine --sm 80 --sm 100a; expect_rc 0 "check of the graph that builds, on sm_80 and sm_100a"
run_kiln check $N/two_graphs.lua --graph fine --sm 80 --sm 75; expect_rc 1 "check fails where one SM asked (sm_75) has no engine"
expect_err "E_NO_ENGINE: graph 'fine' \[H=1024\]: no engine for kernel group 0 \(rmsnorm\) on sm_75: row: needs sm_80 or later" "... naming that SM"
run_kiln check $N/two_graphs.lua --no-engines; expect_rc 0 "check --no-engines validates the graphs alone"
expect_out "^ok: 2 graph instances valid" "... both of them"
run_kiln explain $N/two_graphs.lua; expect_rc 1 "explain exits 1 when a group has no engine"
expect_out "^graph fine \[H=1024\] for sm_90a" "... explaining every graph"
expect_out "^  group 0 \(rmsnorm\): NO ENGINE" "... and saying NO ENGINE for the group"
expect_out "^    pointwise  declined: group is a norm op \(rmsnorm\), not pointwise" "... with every engine's reason"
run_kiln explain $N/two_graphs.lua --graph fine; expect_rc 0 "explain of the graph that builds exits 0"

# 3. build packs the graphs that build and names those it lacks
if [ $has_nvrtc = 1 ]; then
  run_kiln build $N/two_graphs.lua --sm 90a -o "$TMP/part.kpack"; expect_rc 1 "a build with a declined graph exits 1"
  expect_err "kiln: error: E_NO_ENGINE: graph 'strided_scale'" "... printing its typed error"
  expect_err "part.kpack lacks graph 'strided_scale' \[H=1024\]$" "... and what the pack lacks"
  run_kiln pack inspect "$TMP/part.kpack"; expect_out "^plan fine \[H=1024\]" "the pack holds the graph that built"
  ok "... and only that one" test "$(grep -c '^plan ' "$OUTF")" = 1
  run_kiln pack verify "$TMP/part.kpack"; expect_rc 0 "... and verifies"
  run_kiln build $N/two_graphs.lua --graph strided_scale --sm 90a -o "$TMP/none.kpack"
  expect_rc 1 "a build with nothing buildable exits 1"; ok "... and writes no pack" test ! -e "$TMP/none.kpack"
else
  for i in 1 2 3 4 5 6 7 8; do pass "# SKIP NVRTC not installed"; done
fi

# 4. --graph repeats: each one names a graph
run_kiln explain $N/norm_unit_axes.lua --graph rms_nc11 --graph ln_n11c; expect_rc 0 "explain --graph twice"
ok "... explains both graphs and no other" test "$(grep '^graph ' "$OUTF" | cut -d' ' -f2 | paste -sd' ')" = "rms_nc11 ln_n11c"
run_kiln check $N/norm_unit_axes.lua $N/two_graphs.lua --graph fine --graph rms_nc11_rowmajor --graph fine
expect_out "^ok: 2 graph instances valid" "check --graph over two files, a name given twice: each graph once"
run_kiln source $N/norm_flat.lua --graph ln_n11c --graph rms_nc11
ok "source --graph twice writes both graphs' kernels" test "$(grep -c '^// ---- ' "$OUTF")" = 2
run_kiln check $N/two_graphs.lua --graph fine --graph nope; expect_rc 1 "a --graph no file has fails"
expect_err "E_SPEC: no graph named 'nope'" "... naming it"

# 5. an optional output the op did not generate, returned as a graph output, is an error
run_kiln check $N/absent_inv.lua; expect_rc 1 "returning rmsnorm's INV_VARIANCE without phase = training fails"
expect_err "absent_inv.lua:7: E_SPEC: output 'inv' is the value 2 of rmsnorm 'rmsnorm_1', which returned only Y: its optional output INV_VARIANCE is not generated \(the attribute phase = \"training\" generates it" \
  "... at the op's line, naming the output, the op and the attribute that generates it"
run_kiln check $N/absent_stats.lua; expect_rc 1 "returning softmax's Stats without generate_stats fails"
expect_err "absent_stats.lua:7: E_SPEC: output 'stats' .* Stats is not generated \(the attribute generate_stats = true generates it" \
  "... naming generate_stats"
run_kiln check $N/norm_unit_axes.lua --graph rms_nc11; expect_rc 0 "with phase = training the same output is a graph output"

# 6. comparisons on tensors and g:where point to kiln's ops
run_kiln check $N/relu_gt.lua; expect_rc 1 "x > 0 on a tensor fails"
expect_err "relu_gt.lua:4: E_SPEC: .*on tensors: Lua makes a boolean of it, not a tensor; use .*g:cmp_gt\(x, 0\)" "... with E_SPEC at its line, pointing to g:cmp_gt(x, 0)"
run_kiln check $N/where.lua; expect_rc 1 "g:where fails"
expect_err "where.lua:4: E_UNKNOWN_OP: unknown op 'where' \(kiln calls it g:binary_select\(a, b, mask\)" "... with E_UNKNOWN_OP pointing to g:binary_select"

# 7. graph JSON: check --json of every spec reads back as the same JSON; arrays of instances
for s in "${specs[@]}"; do
  same=1
  "$KILN" check --no-engines "$s" --json > "$TMP/a.json" 2>"$ERRF" &&
    "$KILN" check --no-engines "$TMP/a.json" --json > "$TMP/b.json" 2>>"$ERRF" && cmp -s "$TMP/a.json" "$TMP/b.json" && same=0
  ok "graph JSON of $s round-trips" test $same = 0 || sed 's/^/#   /' "$ERRF" | head -5
done
run_kiln check $N/norm_unit_axes.lua --json; cp "$OUTF" "$TMP/multi.json"
ok "a spec of several instances prints a JSON array" grep -q '^\[' "$TMP/multi.json"
run_kiln check "$TMP/multi.json"; expect_rc 0 "check reads the array back, selecting engines"
expect_out "^ok: 3 graph instances valid" "... one graph per element"
run_kiln explain "$TMP/multi.json"; plans_of > "$TMP/json.plans"
run_kiln explain $N/norm_unit_axes.lua; plans_of > "$TMP/lua.plans"
ok "explain of the array gives the spec's plans" cmp -s "$TMP/json.plans" "$TMP/lua.plans"
done_testing
