#!/usr/bin/env python3
"""Cold compile of every kernel of some specs, with how each compiles (kiln's compile-time audit).

Each round builds each spec once with an empty cache and one thread (`kiln build -v -j 1`, as
bench/compile_ab.py does); `kiln explain` names each kernel's form: a PTX module (ptxas alone)
or CUDA through NVRTC and why. Prints the kernels by their least time, slowest first, and how
many exceed the budget. Runs on any machine (no GPU). Usage:
    python3 bench/compile_times.py [--rounds 2] [--over 60] [SPEC ...]
(default: the shipped specs and the memory-bound test specs, GEMM specs left out).
"""
import argparse
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, ROOT)

from bench.compile_ab import build  # noqa: E402

GRAPH = re.compile(r"^graph (\S+)(?: \[([^\]]*)\])? for (\S+)$")
KERNEL = re.compile(r"^\s+kernel (\S+): (.*)$")


def default_specs():
    dirs = ["specs"] + [os.path.join("tests", "specs", d) for d in ("mem", "bench", "gpu", "fusion")]
    specs = []
    for d in dirs:
        specs += sorted(glob.glob(os.path.join(ROOT, d, "*.lua")))
    return [s for s in specs if "gemm" not in os.path.basename(s)]


def forms(kiln, spec, arch):
    """{built kernel name: how it compiles}, from kiln explain (names as kiln build -v prints them)."""
    p = subprocess.run([kiln, "explain", spec, "--sm", arch], capture_output=True, text=True)
    out, key, sm = {}, "", "sm_" + arch
    for line in p.stdout.splitlines():
        m = GRAPH.match(line)
        if m:
            key = (m.group(2) or "").replace("=", "_").replace(",", "_")
            sm = m.group(3)
            continue
        m = KERNEL.match(line)
        if m:
            out["_".join(filter(None, [m.group(1), key, sm]))] = m.group(2)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--sm", default="90a")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--over", type=float, default=60.0, help="the per-kernel budget, ms")
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    args = ap.parse_args()
    specs = args.specs or default_specs()
    rows = []
    for spec in specs:
        times = {}
        for _ in range(args.rounds):
            kernels, _ = build(args.kiln, [spec], [], args.sm, "")
            for k, ms in kernels.items():
                times.setdefault(k, []).append(ms)
        how = forms(args.kiln, spec, args.sm)
        for k, v in times.items():
            rows.append((min(v), k, os.path.relpath(spec, ROOT), how.get(k, "?")))
    rows.sort(reverse=True)
    print(f"cold compile, ms (least of {args.rounds}), sm_{args.sm}, one thread, empty cache")
    for ms, k, spec, how in rows:
        print(f"{ms:7.1f}  {k[:60]:60s} {spec:36s} {how}")
    over = [r for r in rows if r[0] > args.over]
    print(f"{len(rows)} kernels; {len(over)} over {args.over:g} ms "
          f"({sum(1 for r in over if r[3].startswith('CUDA'))} of them CUDA through NVRTC)")


if __name__ == "__main__":
    main()
