#!/usr/bin/env python3
"""Cold compile per kernel under two build-time settings, interleaved (kiln's compile-time A/B).

Each round builds the specs once under each setting, with an empty cache, one thread
(`kiln build -v -j 1`), and reads the per-kernel "compiled in" times and the whole build's.
Prints, per kernel, the min and median of each setting. Runs on any machine (no GPU). Usage:
    python3 bench/compile_ab.py --a KILN_PTXAS= --b KILN_PTXAS=exe --set H=4096 --rounds 5 \\
        specs/layernorm_bwd.lua specs/softmax.lua
A setting is NAME=VALUE (several joined by commas); an empty VALUE unsets NAME.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = re.compile(r"^\s*\S+\s+(\S+)\s+compiled in ([0-9.]+) ms")
BUILT = re.compile(r"^built .* ([0-9.]+) ms ->")


def environment(setting):
    env = dict(os.environ)
    for item in filter(None, setting.split(",")):
        name, _, value = item.partition("=")
        if value:
            env[name] = value
        else:
            env.pop(name, None)
    return env


def build(kiln, specs, sets, arch, setting):
    """One cold build: {kernel: ms}, whole build ms."""
    cache = tempfile.mkdtemp(prefix="kiln-compile-ab-")
    try:
        env = environment(setting)
        env["KILN_CACHE_DIR"] = cache
        out = os.path.join(cache, "out.kpack")
        cmd = [kiln, "build", *specs, "--sm", arch, "-v", "-j", "1", "-o", out]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"compile_ab: {' '.join(cmd)} ({setting}) failed:\n{p.stderr[-2000:]}")
        kernels, total = {}, None
        for line in (p.stdout + p.stderr).splitlines():
            m = KERNEL.match(line)
            if m:
                kernels[m.group(1)] = float(m.group(2))
            m = BUILT.match(line)
            if m:
                total = float(m.group(1))
        return kernels, total
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--a", required=True, help="setting A: NAME=VALUE[,NAME=VALUE...]")
    ap.add_argument("--b", required=True, help="setting B")
    ap.add_argument("--set", action="append", default=[], help="a dim value, as kiln build --set")
    ap.add_argument("--sm", default="90a")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    args = ap.parse_args()
    times = {"A": {}, "B": {}}
    totals = {"A": [], "B": []}
    for _ in range(args.rounds):
        for key, setting in (("A", args.a), ("B", args.b)):
            kernels, total = build(args.kiln, args.specs, args.set, args.sm, setting)
            for k, ms in kernels.items():
                times[key].setdefault(k, []).append(ms)
            if total is not None:
                totals[key].append(total)
    print(f"cold compile, ms (min / median of {args.rounds}): A = {args.a!r}, B = {args.b!r}")
    for k in sorted(set(times["A"]) | set(times["B"])):
        cells = []
        for key in ("A", "B"):
            v = times[key].get(k)
            cells.append(f"{min(v):7.1f} / {statistics.median(v):7.1f}" if v else "      -")
        print(f"{k[:64]:64s} A {cells[0]}  B {cells[1]}")
    for key in ("A", "B"):
        if totals[key]:
            print(f"whole build {key}: {' '.join(f'{t:.0f}' for t in totals[key])} ms")


if __name__ == "__main__":
    main()
