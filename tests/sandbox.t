#!/usr/bin/env bash
# The spec sandbox: each escape attempt under tests/specs/sandbox/ ends in a typed error
# (exit 1, quickly, no crash or hang) or has no effect outside its own spec.
. "$(dirname "$0")/lib.sh"
S=tests/specs/sandbox
typed=(
  "tensor_setmetatable E_SANDBOX" "tensor_rawset E_SANDBOX" "tensor_newindex E_SANDBOX"
  "graph_rawset E_SANDBOX" "graph_newindex E_SANDBOX" "graph_setmetatable E_SANDBOX"
  "graph_internals E_SPEC" "graph_internal_method E_UNKNOWN_OP" "graph_spec_handle E_SPEC"
  "k_dynamic_rawset E_SANDBOX" "k_dynamic_metatable E_SPEC"
  "error_tostring_loop E_SPEC" "error_tostring_raises E_SPEC" "error_index_loop E_SPEC"
  "error_forged_fields E_SHAPE" "gc_finalizer E_SANDBOX" "close_loop E_LIMIT" "close_on_error E_LIMIT"
  "rep_bomb E_LIMIT" "format_width E_SPEC" "deep_recursion E_SPEC" "cstack_recursion E_SPEC"
  "long_name E_LIMIT" "huge_attr_table E_LIMIT" "nested_attr_table E_LIMIT" "cyclic_attr_table E_LIMIT"
  "function_attr E_SANDBOX" "string_dump E_SPEC" "load E_SANDBOX" "coroutine E_SANDBOX"
  "collectgarbage E_SANDBOX" "global_table E_SANDBOX" "debug_library E_SANDBOX"
  "xpcall_handler_loop E_LIMIT" "print_tostring_loop E_LIMIT" "bad_stride E_SPEC"
  "pattern_bomb E_LIMIT" "sort_loop E_LIMIT"
)
harmless=(string_metatable string_copy string_method k_module tensor_metatable tensor_dims_copy
          error_metatable evil_attr_metatable)
plan $(( ${#typed[@]} * 3 + ${#harmless[@]} * 4 + 5 ))
for pair in "${typed[@]}"; do
  set -- $pair
  start=$(date +%s)
  run_kiln check "$S/$1.lua"
  expect_rc 1 "$1 exits 1"
  expect_err "^kiln: error: $S/$1\.lua(:[0-9]+)?: $2: " "$1 gives $2 at the spec"
  ok "$1 is stopped within 30 s" test $(( $(date +%s) - start )) -lt 30
done
# the victim's generated code, alone and after each attacking spec in the same process
"$KILN" source specs/bias_gelu.lua > "$TMP/victim" 2>/dev/null
for a in "${harmless[@]}"; do
  run_kiln source "$S/$a.lua" specs/bias_gelu.lua
  expect_rc 0 "$a: the attacking spec and the next one still compile"
  ok "$a: nothing injected into generated code" test "$(grep -c PWNED "$OUTF")" = 0
  sed -n '/^\/\/ ---- bias_gelu /,$p' "$OUTF" > "$TMP/after"
  ok "$a: the next spec's code is unchanged" cmp -s "$TMP/after" "$TMP/victim"
  run_kiln check "$S/$a.lua" tests/specs/bad/shape_mismatch.lua
  expect_err "^kiln: error: tests/specs/bad/shape_mismatch.lua:4: E_SHAPE: add 'add_1': cannot broadcast" \
    "$a: the next spec's error prints as it should"
done
ok "the victim's code is really there" grep -q "kiln_bias_gelu_k0" "$TMP/victim"
run_kiln check "$S/tensor_dims_copy.lua"
expect_out "input +1 x +fp32 +\[4\]" "dims a tensor hands out are a copy: the graph keeps x [4]"
run_kiln check "$S/string_method.lua"; expect_rc 0 "string methods on literals still work in a spec"
run_kiln check "$S/error_metatable.lua" "$S/error_tostring_raises.lua"
expect_err "E_SPEC: spec raised a table value" "a caught kiln error gives the spec a copy, not the shared metatable"
ok "... and no PWNED in its message" test "$(grep -c PWNED "$ERRF")" = 0
done_testing
