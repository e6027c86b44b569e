#!/usr/bin/env python3
"""Two builds of kiln side by side: the same benchmark case (bench_gemm's or bench.py's) from
two packs (e.g. a change and its parent), timed in turn on the same tensors in one process,
several rounds, so that a difference of a few percent shows above the run-to-run drift. Usage:

    python3 bench/ab.py --packs NEW.kpack OLD.kpack --case gemm_residual[,...] [--shape 4096x4096,...]
                        [--rounds 5] [--peer] [--compiled] [--graph]

--shape picks among a case's shapes (bench.py's norms come in three, e.g. 4096x4096; GEMMs are
MxNxK); --peer times the case's torch peer (eager for bench.py's cases) in the same rounds, --compiled
torch.compile of that peer;
--graph times CUDA-graph replays (kernel time without launch overhead, as bench.py's graph
columns). A pack must hold every graph of the generator its cases come from (bench_gemm's, or
bench.py's norms or pointwise ops).
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "python"))

import kiln  # noqa: E402
import torch  # noqa: E402
from bench.bench import graph_ms, norm_cases, pointwise_cases, time_ms, wide_cases  # noqa: E402
from bench.bench_gemm import cases as gemm_cases  # noqa: E402


def find(pack, names, shapes):
    """The cases named in `names` (of the shapes in `shapes`, or all) from every generator."""
    for gen in (gemm_cases, norm_cases, pointwise_cases, wide_cases):
        try:
            for c in gen(pack):
                c.setdefault("shape", "%dx%dx%d" % (c["M"], c["N"], c["K"]) if "M" in c else "")
                if c["name"] in names and (not shapes or c["shape"] in shapes):
                    yield c
        except kiln.KilnError:  # a pack without this generator's graphs
            continue


def compare(c, packs, args):
    plans = [c["plan"], packs[1].plan(c["plan"].graph, c["plan"].instance)]
    runs = [lambda plan=plan: plan(**c["kiln"]) for plan in plans]
    names = [os.path.basename(p) for p in args.packs]
    if args.peer:
        runs.append(c.get("peer") or c["eager"])
        names.append(c.get("peer_name", "torch eager"))
    if args.compiled:
        runs.append(torch.compile(c["eager"]))
        names.append("torch.compile")
    timer = graph_ms if args.graph else time_ms
    times = [[] for _ in runs]
    for _ in range(args.rounds):
        for i, run in enumerate(runs):
            times[i].append(timer(run))
    med = [statistics.median(t) for t in times]
    label = "%s %s" % (c["name"], c["shape"])
    for i, name in enumerate(names):
        print("%-26s %-24s median %.4f ms  rounds %s" % (label, name, med[i], " ".join("%.4f" % t for t in times[i])))
    print("%-26s first / second: x%.3f faster" % (label, med[1] / med[0]))
    for i in range(2, len(runs)):
        print("%-26s %s / first: x%.3f   / second: x%.3f" % (label, names[i], med[i] / med[0], med[i] / med[1]))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packs", nargs=2, required=True)
    ap.add_argument("--case", required=True, help="case names, comma-separated")
    ap.add_argument("--shape", default=None, help="shapes, comma-separated (default: every shape of the case)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--peer", action="store_true")
    ap.add_argument("--compiled", action="store_true", help="also time torch.compile of the case's eager peer")
    ap.add_argument("--graph", action="store_true")
    args = ap.parse_args()
    packs = [kiln.Pack(p) for p in args.packs]
    # each case's tensors from the first pack's generator; the second pack's plan of the same graph
    found = 0
    for c in find(packs[0], args.case.split(","), args.shape.split(",") if args.shape else None):
        compare(c, packs, args)
        found += 1
    if not found:
        print("ab: no case %s%s" % (args.case, " of shape " + args.shape if args.shape else ""), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
