#!/usr/bin/env bash
# The Python binding without a GPU: kiln.build (JIT through the CLI and the cache), pack and
# plan introspection, typed errors.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip_all "python3 not installed"
plan 2
if python3 - <<'PY' > "$OUTF" 2>&1; then pass "python binding: build, introspect, errors"; else fail "python binding"; sed 's/^/# /' "$OUTF"; fi
import sys
sys.path.insert(0, "python")
import kiln
p = kiln.build("specs/swiglu.lua", "specs/rmsnorm.lua", sm=["80", "90a"], set={"H": 4096})
plans = {(x.graph, x.instance) for x in p.plans()}
assert plans == {("swiglu", "H=4096"), ("rmsnorm", "H=4096"), ("rmsnorm_train", "H=4096")}, plans
plan = p.plan("swiglu", "H=4096")
names = [(t.name, t.role, t.dtype, t.dims) for t in plan.tensors if t.role != "virtual"]
assert ("gate", "input", "bf16", ("T", 4096)) in names, names
assert ("y", "output", "bf16", ("T", 4096)) in names, names
assert plan.dims == ["T"], plan.dims
assert {a for a, _ in plan.kernels[0].archs} == {"sm_80", "sm_90a"}, plan.kernels[0].archs
try:
    p.plan("swiglu", "H=123")
    raise SystemExit("missing plan accepted")
except kiln.KilnError as e:
    assert "NOT_FOUND" in str(e), e
try:
    kiln.build("tests/specs/bad/shape_mismatch.lua")
    raise SystemExit("bad spec accepted")
except kiln.KilnError as e:
    assert "E_SHAPE" in str(e), e
print("ok")
PY
# the ctypes mirrors of kiln.h's info structs: the library writes sizeof(the C struct) bytes
if printf '#include "kiln.h"\n#include <stdio.h>\nint main(void) { printf("%%zu %%zu %%zu %%zu\\n", sizeof(kiln_pack_info), sizeof(kiln_plan_info), sizeof(kiln_tensor_info), sizeof(kiln_kernel_info)); return 0; }\n' |
   cc -std=c11 -I runtime -x c - -o "$TMP/sizes" 2>"$ERRF"; then
  c=$("$TMP/sizes")
  py=$(python3 -c 'import sys, ctypes; sys.path.insert(0, "python"); import kiln; print(*(ctypes.sizeof(getattr(kiln, n)) for n in ("_PackInfo", "_PlanInfo", "_TensorInfo", "_KernelInfo")))' 2>&1)
  [ "$c" = "$py" ] && pass "the ctypes info structs have kiln.h's sizes ($c)" || fail "ctypes struct sizes $py, kiln.h's $c"
else
  fail "compile the struct size probe"; sed 's/^/# /' "$ERRF"
fi
done_testing
