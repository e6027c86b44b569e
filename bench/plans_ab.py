#!/usr/bin/env python3
"""Two builds of kiln side by side on every plan they share: each plan of pack A against the
same graph and instance of pack B, timed in turn on the same tensors (CUDA-graph replays,
several rounds, medians). The tensors come from the plans' own tensor lists: random inputs
(single values 1.0), empty outputs, runtime scalars 0.5; so any spec's plans can be compared,
e.g. a build with a setting against one without. Usage:

    python3 bench/plans_ab.py --packs A.kpack B.kpack --rows 4096,16384 [--graph NAME,...]
                              [--rounds 5]

--rows gives the dynamic dims (T, or any other; every other dim of a plan is specialized). Bandwidth counts each
input and output tensor once.
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
from bench.bench import graph_ms  # noqa: E402


def arguments(plan, T):
    """The plan's keyword arguments at T rows, and the bytes its tensors hold."""
    dims = dict(plan.specialized)
    for t in plan.tensors:  # every dynamic dim (T, or B, N, ...) at T
        for d in t.dims:
            if isinstance(d, str) and d not in dims:
                dims[d] = T
    args, nbytes = {}, 0
    for t in plan.tensors:
        if t.role == "scalar":
            args[t.name] = 0.5
        elif t.role in ("input", "output"):
            shape = [dims[d] if isinstance(d, str) else d for d in t.dims]
            x = torch.empty(shape, device="cuda", dtype=kiln.torch_dtype(t.dtype))
            if t.role == "input":
                # never zeros: one-value inputs (scales) 1.0, the rest random
                x.copy_(torch.ones(shape, device="cuda") if x.numel() == 1 else torch.randn(shape, device="cuda"))
            args[t.name] = x
            nbytes += x.numel() * x.element_size()
    return args, nbytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packs", nargs=2, required=True)
    ap.add_argument("--rows", required=True, help="values of T, comma-separated")
    ap.add_argument("--graph", default=None, help="graph names, comma-separated (default: all)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    a, b = kiln.Pack(args.packs[0]), kiln.Pack(args.packs[1])
    only = set(args.graph.split(",")) if args.graph else None
    for T in (int(v) for v in args.rows.split(",")):
        for pa in a.plans():
            if only and pa.graph not in only:
                continue
            pb = b.plan(pa.graph, pa.instance)
            kw, nbytes = arguments(pa, T)
            ta, tb = [], []
            for r in range(args.rounds):
                # each round in the other order: neither build always runs after the other
                order = ((ta, pa), (tb, pb)) if r % 2 == 0 else ((tb, pb), (ta, pa))
                for times, plan in order:
                    times.append(graph_ms(lambda plan=plan: plan(**kw)))
            ma, mb = statistics.median(ta), statistics.median(tb)
            print("%-28s %-10s T=%-6d A %.4f ms %.2f TB/s  B %.4f ms %.2f TB/s  A faster x%.3f" % (
                pa.graph, pa.instance, T, ma, nbytes / ma / 1e9, mb, nbytes / mb / 1e9, mb / ma), flush=True)


if __name__ == "__main__":
    main()
