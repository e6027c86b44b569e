#!/usr/bin/env python3
"""The clock a case runs at: one benchmark case (bench_gemm's or bench.py's) from a pack and its
torch peer, each launched back to back for a few seconds while nvidia-smi samples the SM
clock and the board power. Compute-bound kernels on the H200 run at the power limit, so the
clock they hold there (not the boost clock a profiler sees) sets their speed. Usage:

    python3 bench/clocks.py --pack PACK --case gemm_bias_gelu [--shape 8192x8192x8192] [--seconds 4]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

import kiln  # noqa: E402
from bench.ab import find  # noqa: E402

QUERY = "clocks.sm,power.draw,power.limit,temperature.gpu"


def sample_while(fn, seconds):
    """Runs fn back to back for `seconds` while nvidia-smi samples every 100 ms; returns the
    milliseconds per call and the samples of the second half (after the clock settled)."""
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=" + QUERY, "--format=csv,noheader,nounits", "-lms", "100"],
                           stdout=subprocess.PIPE, text=True)
    calls, t0 = 0, time.time()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    half = None
    while time.time() - t0 < seconds:
        if half is None and time.time() - t0 > seconds / 2:
            torch.cuda.synchronize()
            start.record()
            half = calls
        for _ in range(10):
            fn()
        calls += 10
        torch.cuda.synchronize()
    end.record()
    end.synchronize()
    smi.terminate()
    rows = [line.split(",") for line in smi.communicate()[0].splitlines() if line.count(",") == 3]
    rows = rows[len(rows) // 2:]
    return start.elapsed_time(end) / (calls - half), rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", required=True)
    ap.add_argument("--case", required=True, help="case names, comma-separated")
    ap.add_argument("--shape", default=None)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    pack = kiln.Pack(args.pack)
    found = 0
    for c in find(pack, args.case.split(","), args.shape.split(",") if args.shape else None):
        found += 1
        runs = [("kiln", lambda c=c: c["plan"](**c["kiln"])), (c.get("peer_name", "torch eager"), c.get("peer") or c["eager"])]
        for name, fn in runs:
            ms, rows = sample_while(fn, args.seconds)
            col = lambda i: statistics.median(float(r[i]) for r in rows) if rows else float("nan")  # noqa: E731
            print("%-16s %-18s %-26s %.4f ms per call | SM clock %4.0f MHz | power %5.1f W of %5.1f | %2.0f C"
                  % (c["name"], c["shape"], name, ms, col(0), col(1), col(2), col(3)))
            sys.stdout.flush()
    if not found:
        print("clocks: no case %s" % args.case, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
