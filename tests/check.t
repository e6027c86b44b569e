#!/usr/bin/env bash
# kiln check: every shipped spec validates; graph JSON round-trips; bad specs and bad graph
# JSON give the typed error they should, exit 1, and never crash or hang.
. "$(dirname "$0")/lib.sh"
specs=(specs/*.lua)
bad=(
  "syntax E_SYNTAX" "unknown_op E_UNKNOWN_OP" "shape_mismatch E_SHAPE" "dtype_mismatch E_DTYPE"
  "os_execute E_SANDBOX" "io_open E_SANDBOX" "require_other E_SANDBOX" "infinite_loop E_LIMIT"
  "loop_in_body E_LIMIT" "memory_bomb E_LIMIT" "bad_attr E_ATTR" "missing_input E_PORT"
  "undeclared_dim E_SPEC" "no_outputs E_SPEC" "matmul_k E_SHAPE" "compare_to_float E_DTYPE"
  "leaky_without_slope E_ATTR"
)
json=("bad_version E_JSON_VERSION" "duplicate_uid E_UID" "dangling E_DANGLING" "malformed E_JSON"
      "bad_shape E_SHAPE" "unknown_op E_UNKNOWN_OP")
plan $(( ${#specs[@]} * 3 + ${#bad[@]} * 3 + ${#json[@]} * 2 + 7 ))
for s in "${specs[@]}"; do
  run_kiln check "$s"; expect_rc 0 "check $s"
  run_kiln check "$s" --json; cp "$OUTF" "$TMP/a.json"
  # the JSON of every instance, re-read as graph JSON, prints the same JSON again
  python3 - "$TMP/a.json" "$TMP" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for i, g in enumerate(d if isinstance(d, list) else [d]):
    json.dump(g, open(f"{sys.argv[2]}/inst{i}.json", "w"))
PY
  same=1
  for f in "$TMP"/inst*.json; do
    "$KILN" check "$f" --json > "$TMP/b.json" 2>"$ERRF" || same=0
    python3 -c "import json,sys; sys.exit(json.load(open('$f')) != json.load(open('$TMP/b.json')))" || same=0
  done
  rm -f "$TMP"/inst*.json
  ok "graph JSON of $s round-trips" test $same = 1
  run_kiln explain "$s"; expect_out "accepted" "explain $s names an accepting engine"
done
for pair in "${bad[@]}"; do
  set -- $pair
  start=$(date +%s)
  run_kiln check "tests/specs/bad/$1.lua"
  expect_rc 1 "bad spec $1 exits 1"
  expect_err "kiln: error: .*$2" "bad spec $1 gives $2"
  ok "bad spec $1 is stopped within 60 s" test $(( $(date +%s) - start )) -lt 60
done
for pair in "${json[@]}"; do
  set -- $pair
  run_kiln check "tests/specs/json/$1.json"
  expect_rc 1 "graph JSON $1 exits 1"; expect_err "$2" "graph JSON $1 gives $2"
done
ok "the sandbox kept os.execute from running" test ! -e /tmp/kiln-sandbox-escaped
run_kiln check tests/specs/json/good.json; expect_rc 0 "good graph JSON validates"
run_kiln explain tests/specs/fusion/siblings.lua
expect_out "group 0 \(mul add cmp_gt mul identity pow neg\)" "independent pointwise chains over one space fuse into one kernel"
ok "... and only one" test "$(grep -c '^  group' "$OUTF")" = 1
run_kiln explain tests/specs/bad/matmul_k.lua; expect_rc 1 "explain of an invalid spec fails"
# a value graph JSON cannot hold: a typed error (the sanitizer build also sees nothing leak)
run_kiln check --json tests/specs/bad/inf_constant.lua
expect_rc 1 "check --json of an infinite constant exits 1"
expect_err "E_JSON: cannot encode inf in JSON" "... with E_JSON naming the value"
done_testing
