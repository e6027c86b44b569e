#!/usr/bin/env bash
# The Python binding without a GPU: kiln.build (JIT through the CLI and the cache), pack and
# plan introspection, typed errors.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip_all "python3 not installed"
use_shared_cache
plan 5
if with_san_runtime python3 - <<'PY' > "$OUTF" 2>&1; then pass "python binding: build, introspect, errors"; else fail "python binding"; sed 's/^/# /' "$OUTF"; fi
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
  py=$(with_san_runtime python3 -c 'import sys, ctypes; sys.path.insert(0, "python"); import kiln; print(*(ctypes.sizeof(getattr(kiln, n)) for n in ("_PackInfo", "_PlanInfo", "_TensorInfo", "_KernelInfo")))' 2>&1)
  [ "$c" = "$py" ] && pass "the ctypes info structs have kiln.h's sizes ($c)" || fail "ctypes struct sizes $py, kiln.h's $c"
else
  fail "compile the struct size probe"; sed 's/^/# /' "$ERRF"
fi
# kiln.torch_dtype: a kiln dtype name to torch's (a stand-in torch module: none is needed here)
if with_san_runtime python3 - > "$OUTF" 2>&1 <<'PY'; then pass "kiln.torch_dtype maps kiln's dtype names, and refuses one torch lacks"; else fail "kiln.torch_dtype"; sed 's/^/# /' "$OUTF"; fi
import sys, types
torch = types.ModuleType("torch")
for n in ("float32", "float16", "bfloat16", "int32", "int64", "bool", "float8_e4m3fn", "float8_e5m2"):
    setattr(torch, n, "torch." + n)
sys.modules["torch"] = torch
sys.path.insert(0, "python")
import kiln
got = {n: kiln.torch_dtype(n) for n in ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")}
assert got == {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16",
               "fp8_e4m3": "torch.float8_e4m3fn", "fp8_e5m2": "torch.float8_e5m2"}, got
try:
    kiln.torch_dtype("fp8_e8m0")
    raise SystemExit("a dtype torch lacks was mapped")
except kiln.KilnError as e:
    assert "DTYPE" in str(e), e
PY
# a plan whose virtual tensor crosses kernels: it is a scratch tensor the workspace holds,
# listed with its role, never bound, counted by workspace_size
if with_san_runtime python3 - > "$OUTF" 2>&1 <<'PY'; then pass "python binding: a scratch tensor is listed, not bound, and counted in the workspace"; else fail "python binding: scratch tensors"; sed 's/^/# /' "$OUTF"; fi
import sys
sys.path.insert(0, "python")
import kiln
p = kiln.build("tests/specs/mem/scratch.lua", sm=["90a"])
plan = p.plan("scratch_norm_gemm", "H=1024,N=384")
roles = {t.name: t.role for t in plan.tensors}
assert roles["identity_2.OUT_0"] == "scratch", roles
assert "scratch identity_2.OUT_0" in plan.workspace, plan.workspace
assert "identity_2" not in repr(plan), repr(plan)
rule = int(plan.workspace.split()[0])
want = (rule + 255) // 256 * 256 + 100 * 1024 * 2
assert plan.workspace_size(T=100) == want, (plan.workspace_size(T=100), want)
PY
# pip install ./python into a fresh virtual environment (setuptools from PyPI): the package
# finds the compiler and runtime it carries, from any folder, with no KILN* variables
venv=$TMP/venv
if ! python3 -m venv "$venv" > "$OUTF" 2>&1; then
  pass "# SKIP pip install ./python: python3 -m venv unavailable"
elif ! "$venv/bin/pip" install -q ./python > "$OUTF" 2>&1 || ! rm -rf python/build python/kiln.egg-info; then
  if grep -q -i -E "connection|could not find a version|network|temporary failure" "$OUTF"; then
    pass "# SKIP pip install ./python: PyPI unreachable for setuptools ($(tail -1 "$OUTF"))"
  else fail "pip install ./python"; sed 's/^/# /' "$OUTF"; fi
elif (cd "$TMP" && unset KILN KILN_RT_LIB && KILN_CACHE_DIR="$TMP/pipcache" with_san_runtime "$venv/bin/python" - "$OLDPWD" > "$OUTF" 2>&1 <<'PY'
import os, sys
import kiln
root = sys.argv[1]
here = os.path.dirname(kiln.__file__)
assert here.startswith(sys.prefix), (here, sys.prefix)  # the installed copy, not the tree's
assert kiln._kiln_executable() == os.path.join(here, "_native", "bin", "kiln"), kiln._kiln_executable()
assert kiln.load_library()._name == os.path.join(here, "_native", "lib", "libkilnrt.so"), kiln.load_library()._name
p = kiln.build(os.path.join(root, "specs/rmsnorm.lua"), sm="90a", set={"H": 4096})
assert ("rmsnorm", "H=4096") in {(x.graph, x.instance) for x in p.plans()}
print("ok")
PY
) && "$venv/bin/kiln" --version >> "$OUTF" 2>&1; then
  pass "pip install ./python: import kiln elsewhere finds its own compiler and runtime; the kiln command runs"
else fail "pip install ./python: the installed package"; sed 's/^/# /' "$OUTF"; fi
done_testing
