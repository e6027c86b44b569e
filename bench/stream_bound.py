#!/usr/bin/env python3
"""The backward norms beside what their tensors alone cost: at each shape, a copy of the same
bytes, torch's add and kiln's own stream (two rows in, one out: tests/specs/bench/stream.lua), and
kiln's layernorm_bwd and rmsnorm_bwd, timed in turn (CUDA-graph replays, interleaved rounds,
medians), each as a share of the 1 GiB copy rate. Usage:

    kiln build specs/layernorm_bwd.lua specs/rmsnorm_bwd.lua tests/specs/bench/stream.lua --sm 90a -o S.kpack
    python3 bench/stream_bound.py --pack S.kpack [--out DIR] [--rounds 5]

Bytes: dy, x and dx (the backward's minimal bytes less its per-row and per-column tensors).
"""
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
from bench.bench import bf16, bwd_cases, copy_ceiling, graph_ms, pack_args, write_csv  # noqa: E402

SHAPES = [(4096, 4096), (16384, 8192), (32768, 2048), (8192, 4096), (4096, 8192)]


def cases(pack, T, H):
    x, dy, w, b = bf16(T, H), bf16(T, H), bf16(H), bf16(H)
    y = torch.empty_like(x)
    stream = pack.plan("stream", "H=%d" % H)
    src = bf16(3 * T * H // 2)  # half the bytes read, half written
    dst = torch.empty_like(src)
    fns = {
        "copy, same bytes": lambda: dst.copy_(src),
        "torch add (2 in, 1 out)": lambda: torch.add(dy, x, out=y),
        "kiln stream (2 in, 1 out)": lambda: stream(a=dy, b=x, y=y),
    }
    # the backward norms as bench.py runs them
    for c in bwd_cases(pack, T, H, x, w, b, dy):
        fns["kiln " + c["name"]] = lambda c=c: c["plan"](**c["kiln"])
    return fns


def main():
    args = pack_args(__doc__, out=".")
    pack = kiln.Pack(args.pack)
    ceiling = copy_ceiling()
    print("copy ceiling (1 GiB) %.3f TB/s" % ceiling, flush=True)
    rows = []
    for T, H in SHAPES:
        fns = cases(pack, T, H)
        times = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times[name].append(graph_ms(fn))
        nbytes = 3 * T * H * 2
        for name in fns:
            ms = statistics.median(times[name])
            tbs = nbytes / ms / 1e9
            rows.append(dict(shape="%dx%d" % (T, H), case=name, ms="%.4f" % ms, tbs="%.3f" % tbs,
                             pct_copy="%.1f" % (100 * tbs / ceiling)))
            print("%-11s %-26s %.4f ms %.3f TB/s %5.1f%% of the copy rate" % (
                "%dx%d" % (T, H), name, ms, tbs, 100 * tbs / ceiling), flush=True)
    write_csv(args.out, "stream_bound.csv", rows)


if __name__ == "__main__":
    main()
