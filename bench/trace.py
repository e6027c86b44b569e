#!/usr/bin/env python3
"""Where a plan's time goes: each kernel's duration and the gaps between kernels inside CUDA-graph
replays, read by torch.profiler (CUPTI sees kiln's driver-API launches too). Usage:

    python3 bench/trace.py --pack PACK --case layernorm_bwd,rmsnorm_bwd --shape 4096x4096

Cases and shapes are bench.py's norms. A gap is negative when the next kernel starts before
the previous ends (launched early: programmatic dependent launch).
"""
import argparse
import collections
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
from bench.bench import capture, graph_ms, norm_cases  # noqa: E402


def trace(fn, launches=20, replays=5):
    """The CUDA kernels of `replays` replays of a graph of `launches` calls of fn, in order."""
    g = capture(fn, launches)
    g.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(ev, key=lambda e: e.time_range.start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", required=True)
    ap.add_argument("--case", required=True, help="case names, comma-separated")
    ap.add_argument("--shape", default=None, help="shapes, comma-separated (default: all)")
    args = ap.parse_args()
    names, shapes = args.case.split(","), args.shape.split(",") if args.shape else None
    for c in norm_cases(kiln.Pack(args.pack)):
        if c["name"] not in names or (shapes and c["shape"] not in shapes):
            continue
        fn = lambda c=c: c["plan"](**c["kiln"])  # noqa: E731
        ms = graph_ms(fn)
        ev = trace(fn)
        print("%s %s: %.4f ms a launch (graph), %.2f TB/s" % (c["name"], c["shape"], ms, c["bytes"] / ms / 1e9))
        dur, gaps = collections.defaultdict(list), collections.defaultdict(list)
        for e in ev:
            dur[e.name].append(e.time_range.end - e.time_range.start)
        for a, b in zip(ev, ev[1:]):
            gaps[(a.name, b.name)].append(b.time_range.start - a.time_range.end)
        for k, v in dur.items():
            print("  kernel %-36s n=%-4d median %7.2f us  min %7.2f" % (k, len(v), statistics.median(v), min(v)))
        for (a, b), v in gaps.items():
            print("  gap %s -> %s: median %.2f us" % (a, b, statistics.median(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
