#!/usr/bin/env python3
"""Two builds of kiln side by side over many sizes: the row kernels of pack A against pack B
(e.g. the default against `KILN_PLAN=*.hint=none`), timed in turn on the same tensors (CUDA-graph
replays, 5 rounds, medians). Usage:

    python3 bench/sizes.py --packs A.kpack B.kpack --shapes 4096x4096,16384x8192,...
                           --case rmsnorm,layernorm,softmax,softmax_bwd,layernorm_bwd,rmsnorm_bwd

Each pack must hold the cases' graphs at every H of --shapes (bf16 rows).
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
from bench.bench import bf16, graph_ms  # noqa: E402


def tensors(name, T, H, x, w, b, y, dy):
    """The plan's tensors for case `name` on rows x (and dy) of T x H."""
    if name == "rmsnorm":
        return dict(x=x, w=w, y=y)
    if name == "layernorm":
        return dict(x=x, w=w, b=b, y=y)
    if name == "softmax":
        return dict(x=x, y=y, lse=torch.empty(T, 1, device="cuda"))
    if name == "softmax_bwd":
        return dict(dy=dy, y=torch.softmax(x.float(), -1).to(torch.bfloat16), dx=y)
    xf = x.float()
    inv = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + 1e-5)
    if name == "rmsnorm_bwd":
        return dict(dy=dy, x=x, w=w, inv_rms=inv, dx=y, dw=torch.empty_like(w))
    if name == "layernorm_bwd":
        return dict(dy=dy, x=x, w=w, mean=xf.mean(-1, keepdim=True), inv_std=inv, dx=y,
                    dw=torch.empty_like(w), db=torch.empty_like(b))
    raise SystemExit("sizes: no case %s" % name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packs", nargs=2, required=True)
    ap.add_argument("--shapes", required=True, help="TxH, comma-separated")
    ap.add_argument("--case", required=True, help="case names, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    packs = [kiln.Pack(p) for p in args.packs]
    for shape in args.shapes.split(","):
        T, H = (int(v) for v in shape.split("x"))
        x, w, b, dy = bf16(T, H), bf16(H), bf16(H), bf16(T, H)
        y = torch.empty_like(x)
        for name in args.case.split(","):
            kw = tensors(name, T, H, x, w, b, y, dy)
            plans = [p.plan(name, "H=%d" % H) for p in packs]
            times = [[], []]
            for _ in range(args.rounds):
                for i, plan in enumerate(plans):
                    times[i].append(graph_ms(lambda plan=plan: plan(**kw)))
            med = [statistics.median(t) for t in times]
            nbytes = sum(t.numel() * t.element_size() for t in kw.values())
            print("%-14s %7dx%-6d %5.0f MB  A %.4f ms %.2f TB/s  B %.4f ms %.2f TB/s  A faster x%.3f"
                  % (name, T, H, x.numel() * 2 / 1e6, med[0], nbytes / med[0] / 1e9, med[1], nbytes / med[1] / 1e9,
                     med[1] / med[0]), flush=True)
        del x, y, dy
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
