#!/usr/bin/env bash
# plans.lock without a GPU: `kiln tune --list` names the distinct candidates and where their
# entries go; builds follow a matching entry (explain says "from plans.lock"), take the plan
# fastest over every shape class measured, and pass over a corrupt, truncated, foreign or stale
# entry, or a plan no longer offered, with a note and the ranked plan; tune itself needs a GPU
# (tests/gpu/run's tune step measures).
. "$(dirname "$0")/lib.sh"
plan 24
SPEC=$PWD/specs/rmsnorm.lua
LOCK=$TMP/lock
run_kiln tune --list "$SPEC" --graph rmsnorm --instance H=4096
expect_rc 0 "tune --list needs no GPU"
LIST=$(cat "$OUTF")
ok "... the router's default first, then each distinct candidate of group 0" \
  bash -c "sed -n 2p '$OUTF' | grep -q '^  default ' && [ \$(grep -c '^  group 0 ' '$OUTF') -ge 10 ]"
ok "... no two alike (a setting that changes no kernel is left out)" bash -c "! sed 1d '$OUTF' | sort | uniq -d | grep -q ."
HASH=$(sed -n '1s/.*; spec hash \([0-9a-f]*\);.*/\1/p' "$OUTF")
FILE=$(sed -n '1s/.*; lock entries plans\.lock\/\(.*\)CLASS\.json$/\1/p' "$OUTF")
ok "... with the spec hash and the lock entries' file names" bash -c "[ ${#HASH} = 32 ] && [[ '$FILE' == rmsnorm-${HASH:0:16}-sm_90a- ]]"
N4=$(grep -o 'row:[^ ]*p128n4[^ ]*' <<< "$LIST" | head -1)
N1=$(grep -o 'row:[^ ]*p512n1[^ ]*' <<< "$LIST" | head -1)
run_kiln tune "$SPEC" --set T=1024
expect_err "E_CUDA" "tune without a GPU is E_CUDA"
KILN_PLAN=row.n=4 run_kiln tune "$SPEC" --set T=1024
expect_err "E_USAGE: tune measures every candidate itself: unset KILN_PLAN" "tune under KILN_PLAN is E_USAGE"
run_kiln explain "$SPEC" --graph rmsnorm --set H=4096
DEFAULT=$(sed -n 's/.*group 0 (rmsnorm): plan \(.*\)$/\1/p' "$OUTF")
ok "the default and two other candidates are known" bash -c "[ -n '$DEFAULT' ] && [ -n '$N4' ] && [ -n '$N1' ] && [ '$N4' != '$DEFAULT' ]"

# entry CLASS ENVIRONMENT_CHANGES DEFAULT_US [ID SETTINGS US]...: a lock entry as tune writes it,
# measured in this machine's environment but for the changes given, each plan's median in µs
entry() {
  mkdir -p "$LOCK"
  "$KILN" env --json | python3 -c '
import json, sys
env = json.load(sys.stdin)
spec_hash, default, cls, over, def_us = sys.argv[1:6]
plans = [{"id": default, "engine": "row", "settings": {}, "median_us": float(def_us), "samples": 100}]
rest = sys.argv[6:]
for i in range(0, len(rest), 3):
    plans.append({"id": rest[i], "engine": "row", "settings": json.loads(rest[i + 1]), "median_us": float(rest[i + 2]), "samples": 100})
plans.sort(key=lambda p: p["median_us"])
e = {"schema": "kiln.plans.lock", "version": 1, "graph": "rmsnorm", "instance": "H=4096",
     "spec_hash": spec_hash, "shape_class": cls,
     "environment": dict({"sm": "sm_90a", "kiln": env["kiln_version"], "nvrtc": env.get("nvrtc_version")}, **json.loads(over)),
     "groups": [{"group": 0, "ops": "rmsnorm", "default": default, "plans": plans}]}
print(json.dumps(e, indent=2))' "$HASH" "$DEFAULT" "$@" > "$LOCK/$FILE$1.json"
}
explain() { run_kiln explain "$SPEC" --graph rmsnorm --set H=4096 --plans-lock "$LOCK" "$@"; }

entry T=1024 '{}' 12 "$N4" '{"n": "4"}' 10 "$N1" '{"n": "1"}' 11
explain
expect_rc 0 "a build with a lock entry"
ok "... takes its winner, and explain says it is from plans.lock" \
  grep -q "^    chosen     $N4, from plans.lock $LOCK (T=1024)$" "$OUTF"
ok "... as the group's plan" grep -q "group 0 (rmsnorm): plan $N4$" "$OUTF"
run_kiln source "$SPEC" --graph rmsnorm --set H=4096 --plans-lock "$LOCK"
ok "... and its kernels" grep -q "plan $N4," "$OUTF"
mkdir -p "$TMP/cwd" && cp -r "$LOCK" "$TMP/cwd/plans.lock"
(cd "$TMP/cwd" && "$KILN" explain "$SPEC" --graph rmsnorm --set H=4096) > "$OUTF" 2>&1
ok "./plans.lock is read without --plans-lock" grep -q "group 0 (rmsnorm): plan $N4$" "$OUTF"

entry T=65536 '{}' 52 "$N4" '{"n": "4"}' 52 "$N1" '{"n": "1"}' 50
explain
ok "over two shape classes, the plan fastest over both (geometric mean against the default)" \
  grep -q "group 0 (rmsnorm): plan $N4$" "$OUTF"
entry T=65536 '{}' 52 "$N4" '{"n": "4"}' 52 "$N1" '{"n": "1"}' 20
explain
ok "... which follows the timings" grep -q "^    chosen     $N1, from plans.lock $LOCK (T=1024; T=65536)$" "$OUTF"

rm -rf "$LOCK"; entry T=1024 '{"kiln": "0.0.1"}' 12 "$N4" '{"n": "4"}' 10
explain
expect_rc 0 "a stale entry (another kiln) is no error"
ok "... it is passed over with a note naming why, and the ranked plan is taken" \
  bash -c "grep -q 'kiln: note: .*$FILE.*ignored: measured with kiln 0.0.1, this is kiln' '$ERRF' && grep -q 'plan $DEFAULT\$' '$OUTF'"
rm -rf "$LOCK"; entry T=1024 '{"sm": "sm_80"}' 12 "$N4" '{"n": "4"}' 10
explain
ok "a foreign entry (another SM) likewise" bash -c "grep -q 'ignored: measured on sm_80, the build is for sm_90a' '$ERRF' && grep -q 'plan $DEFAULT\$' '$OUTF'"
rm -rf "$LOCK"; entry T=1024 '{}' 12 "$N4" '{"n": "4"}' 10
head -c 200 "$LOCK/${FILE}T=1024.json" > "$LOCK/${FILE}T=2048.json"
printf 'not json at all' > "$LOCK/${FILE}T=4096.json"
explain
ok "truncated and corrupt entries are passed over with notes" \
  bash -c "grep -q 'T=2048.json ignored: not valid JSON' '$ERRF' && grep -q 'T=4096.json ignored: not valid JSON' '$ERRF'"
ok "... and the good one is still taken" grep -q "group 0 (rmsnorm): plan $N4$" "$OUTF"
rm -rf "$LOCK"; entry T=1024 '{}' 12 "row:v0:gone" '{}' 10
explain
ok "a plan no longer offered: a note, and the ranked plan" \
  bash -c "grep -q 'group 0: row:v0:gone not taken (engine row no longer offers it); the ranked plan is used' '$ERRF' && grep -q 'plan $DEFAULT\$' '$OUTF'"
rm -rf "$LOCK"; entry T=1024 '{}' 12 "$N4" '{"n": "5"}' 10
explain
ok "a setting value the engine lacks: a note, and the ranked plan" \
  bash -c "grep -q 'row.n=5 is not a value of the setting' '$ERRF' && grep -q 'plan $DEFAULT\$' '$OUTF'"
explain --plans-lock "$TMP/none"
ok "a lock folder that does not exist: a note" grep -q "plans.lock $TMP/none cannot be read" "$ERRF"
rm -rf "$LOCK"; entry T=1024 '{}' 12 "$N4" '{"n": "4"}' 10
(cd "$TMP" && KILN_PLANS_LOCK=$LOCK "$KILN" explain "$SPEC" --graph rmsnorm --set H=4096) > "$OUTF" 2>&1
ok "KILN_PLANS_LOCK names the lock too" grep -q "group 0 (rmsnorm): plan $N4$" "$OUTF"
KILN_PLAN=row.n=1 run_kiln explain "$SPEC" --graph rmsnorm --set H=4096 --plans-lock "$LOCK"
ok "KILN_PLAN outranks the lock" grep -q "group 0 (rmsnorm): plan $N1$" "$OUTF"
done_testing
