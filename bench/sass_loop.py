#!/usr/bin/env python3
"""Where ptxas put a kernel's loads: the SASS of a spec's kernels, on the CPU machine. Builds
SPEC with a fresh cache (so that every kernel compiles and KILN_DUMP_DIR gets its source),
compiles each source (CUDA or PTX module) again with `nvcc -cubin -Xptxas -v` (registers, spills) and disassembles
it with nvdisasm; per loop (a branch back to an earlier label) it prints the instruction count
and the position of every memory access, barrier and shuffle. Usage:

    python3 bench/sass_loop.py specs/layernorm_bwd.lua [--sm 90a] [--set H=4096] [--kernel k0]
                               [--full]

The build sees this process's environment (e.g. KILN_PLAN=row.bwd=reread). nvdisasm comes with the
CUDA toolkit or the PyPI wheel nvidia-cuda-nvdisasm (`pip install nvidia-cuda-nvdisasm`); set
NVDISASM to pick one. Why it exists: docs/MEMORY_BOUND.md, "Where ptxas puts the loads".
"""
import argparse
import glob
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
# what a loop's summary lists: memory accesses, barriers, shuffles
SHOWN = re.compile(r"^(LDG|LDGSTS|STG|LDS|STS|LD|ST|ATOM|RED|BAR|DEPBAR|LDGDEPBAR|SHFL|MEMBAR)\b")
INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
LABEL = re.compile(r"^(\.L_x_\d+):")
BRANCH = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")


def tool(name, env=None, extra=()):
    """The path of a CUDA tool: $env, PATH, the toolkit, or the given extra globs."""
    found = env and os.environ.get(env)
    for cand in [found, shutil.which(name), os.path.join(CUDA, "bin", name)]:
        if cand and os.access(cand, os.X_OK):
            return cand
    for pattern in extra:
        for cand in sorted(glob.glob(pattern)):
            if os.access(cand, os.X_OK):
                return cand
    return None


def nvdisasm():
    sites = site.getsitepackages() + [site.getusersitepackages()]
    path = tool("nvdisasm", "NVDISASM", [os.path.join(s, "nvidia", "cu*", "bin", "nvdisasm") for s in sites])
    if not path:
        sys.exit("sass_loop: nvdisasm not found: pip install nvidia-cuda-nvdisasm, or set NVDISASM")
    return path


def loops(lines):
    """(label, first, last) of every loop in the disassembly: a label and a branch back to it."""
    seen, out = {}, []
    for i, line in enumerate(lines):
        m = LABEL.match(line.strip())
        if m:
            seen[m.group(1)] = i
        m = BRANCH.search(line)
        if m and m.group(1) in seen:
            out.append((m.group(1), seen[m.group(1)], i))
    return out


def report(name, cu, sm, args, nvd):
    cubin = os.path.splitext(cu)[0] + ".cubin"
    r = subprocess.run([tool("nvcc", "NVCC"), "-cubin", "-arch=sm_" + sm, "-Xptxas", "-v", "-o", cubin, cu],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("%s: nvcc failed\n%s" % (name, r.stderr))
        return False
    usage = re.findall(r"(\d+ bytes stack frame, \d+ bytes spill stores, \d+ bytes spill loads|Used \d+ registers)", r.stderr)
    print("%s: %s" % (name, "; ".join(usage)))
    lines = subprocess.run([nvd, "-c", cubin], capture_output=True, text=True, check=True).stdout.splitlines()
    for label, first, last in loops(lines):
        # (instructions predicated on !PT never run: ptxas's padding)
        insns = [m.group(1) for m in (INSN.search(x) for x in lines[first:last + 1]) if m and not m.group(1).startswith("@!PT")]
        if len(insns) < 2:
            continue  # the branch-to-self after EXIT
        if args.full:
            print("  loop %s:" % label)
            for i, text in enumerate(insns, 1):
                print("    %4d  %s" % (i, text))
            continue
        marks = []
        for i, text in enumerate(insns, 1):
            op = re.sub(r"^@!?U?P\w+\s+", "", text)
            if SHOWN.match(op):
                marks.append("%d %s" % (i, op.split()[0]))
        print("  loop %s: %d instructions; %s" % (label, len(insns), ", ".join(marks)))
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("--sm", default="90a")
    ap.add_argument("--set", action="append", default=[], help="DIM=N, as kiln build takes it")
    ap.add_argument("--kernel", default="", help="only kernels whose name holds this")
    ap.add_argument("--full", action="store_true", help="print each loop's instructions")
    args = ap.parse_args()
    nvd = nvdisasm()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, KILN_CACHE_DIR=os.path.join(tmp, "cache"), KILN_DUMP_DIR=os.path.join(tmp, "dump"))
        cmd = [os.path.join(ROOT, "build", "kiln"), "build", args.spec, "--sm", args.sm]
        for s in args.set:
            cmd += ["--set", s]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("sass_loop: %s failed:\n%s" % (" ".join(cmd), r.stderr))
        # CUDA sources and PTX modules (kiln.ptxmodule): nvcc compiles either
        sources = sorted(glob.glob(os.path.join(tmp, "dump", "*.cu")) + glob.glob(os.path.join(tmp, "dump", "*.ptx")))
        ok = True
        for cu in sources:
            name = os.path.splitext(os.path.basename(cu))[0]
            if args.kernel in name:
                ok = report(name, cu, args.sm, args, nvd) and ok
        if not sources:
            sys.exit("sass_loop: the build compiled nothing")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
