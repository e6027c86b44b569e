#!/usr/bin/env python3
"""The launches of one plan for the CPU emulator's harness, from `kiln pack inspect`: every
kernel in the plan's order with its block, grid (the rules evaluated at the dims given, SMS =
132) and dynamic shared memory, as launches.cc (emu_plan_launches over the entries emu_k0,
emu_k1, ... that transform.py makes of each kernel's source), and the workspace's bytes.

    plan.py INSPECT.txt GRAPH OUT.cc DIM=V...   (prints: SYMBOL... then ws=BYTES or nothing)
"""
import math
import re
import sys

inspect_path, graph, out_path = sys.argv[1:4]
dims = dict(a.split("=") for a in sys.argv[4:])
env = {k: int(v) for k, v in dims.items()}
env.update(SMS=132, ceil=lambda x: math.ceil(x), min=min, max=max)


def value(expr):
    """A rule as pack inspect prints it (B*S*4, ceil(SK/128), min(..., SMS), A + B)."""
    return int(eval(re.sub(r"(?<![\w.])(\d+)/(\d+)", r"\1/\2", expr.replace("/", " / ")), {"__builtins__": {}}, env))


text = open(inspect_path).read()
block = re.search(r"^plan %s\n(.*?)(?=^plan |\Z)" % re.escape(graph), text, re.S | re.M).group(1)
def axes(grid):
    """A grid's axes, split at the commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in grid:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


kernels = [(sym, threads) + tuple(axes(grid)[:2]) + (smem,) for sym, threads, grid, smem in re.findall(
    r"^    (\w+)  engine \w+  plan \S+\n      block \[(\d+), 1, 1\]  grid \[(.*?)\]  cluster \[1, 1, 1\]  smem (\d+)",
    block, re.M)]
ws = re.search(r"^  workspace: (.*?) \(bytes", block, re.M)
lines = ['#include <vector>', 'struct emu_launch { void (*entry)(); unsigned threads; int gx, gy; unsigned smem; const char *name; };']
for i, _ in enumerate(kernels):
    lines.append("void emu_k%d();" % i)
lines.append("void emu_plan_launches(std::vector<emu_launch> &out) {")
for i, (sym, threads, gx, gy, smem) in enumerate(kernels):
    lines.append('  out.push_back({emu_k%d, %s, %d, %d, %s, "%s"});' % (i, threads, value(gx), value(gy), smem, sym))
lines.append("}")
open(out_path, "w").write("\n".join(lines) + "\n")
print(" ".join(k[0] for k in kernels))
if ws:
    parts = [p for p in ws.group(1).split(" + ") if not p.startswith("scratch")]
    total = sum((value(p) + 255) // 256 * 256 for p in parts)
    print("ws=%d" % total)
