#!/usr/bin/env python3
"""Two builds of kiln's GEMMs side by side: the same bench_gemm case from two packs (e.g. a
change and its parent), timed in turn on the same tensors in one process, several rounds, so
that a difference of a few percent shows above the run-to-run drift. Usage:

    python3 bench/ab_gemm.py --packs NEW.kpack OLD.kpack --case gemm_residual [--rounds 5]
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
from bench.bench import time_ms  # noqa: E402
from bench.bench_gemm import cases  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packs", nargs=2, required=True)
    ap.add_argument("--case", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    packs = [kiln.Pack(p) for p in args.packs]
    # the case's tensors from the first pack's generator; the second pack's plan of the same graph
    c = next(c for c in cases(packs[0]) if c["name"] == args.case)
    plans = [c["plan"], packs[1].plan(c["plan"].graph, c["plan"].instance)]
    times = [[], []]
    for _ in range(args.rounds):
        for i, plan in enumerate(plans):
            times[i].append(time_ms(lambda plan=plan: plan(**c["kiln"])))
    med = [statistics.median(t) for t in times]
    for i, p in enumerate(args.packs):
        print("%-14s %-28s median %.4f ms  rounds %s" % (args.case, os.path.basename(p), med[i], " ".join("%.4f" % t for t in times[i])))
    print("%-14s first / second: x%.3f faster" % (args.case, med[1] / med[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
