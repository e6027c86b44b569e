#!/usr/bin/env python3
"""Runs a few kiln kernels and their peers a handful of times, for a profiler (ncu) to read.

Cases (--case, repeatable): gemm (bf16 8192^3, kiln and torch.matmul), ln_bwd and rms_bwd
(bf16 backward norms at 4096x4096 and 32768x2048), rms_fwd (bf16 RMSNorm at 16384x8192, kiln
and torch.compile's kernel). Each call runs 3 times; the third inside
the NVTX range "prof", which the profiler is told to read. Usage:

    ncu --clock-control none --nvtx --nvtx-include prof/ python3 bench/ncu_cases.py --pack PACK
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402


def bf16(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def gemm(pack):
    a, b = bf16(8192, 8192), bf16(8192, 8192)
    c = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    plan = pack.plan("gemm", "K=8192,N=8192")
    yield lambda: plan(a=a, b=b, c=c)
    yield lambda: torch.matmul(a, b)


def norm_bwd(pack, graph):
    for T, H in ((4096, 4096), (32768, 2048)):
        x, dy, w = bf16(T, H), bf16(T, H), bf16(H)
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        inv = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + 1e-5)
        dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
        plan = pack.plan(graph, "H=%d" % H)
        if graph == "layernorm_bwd":
            yield lambda plan=plan, kw=dict(dy=dy, x=x, w=w, mean=mean, inv_std=inv, dx=dx, dw=dw, db=db): plan(**kw)
        else:
            yield lambda plan=plan, kw=dict(dy=dy, x=x, w=w, inv_rms=inv, dx=dx, dw=dw): plan(**kw)


def rms_fwd(pack):
    x, w = bf16(16384, 8192), bf16(8192)
    y = torch.empty_like(x)
    plan = pack.plan("rmsnorm", "H=8192")
    yield lambda: plan(x=x, w=w, y=y)
    compiled = torch.compile(lambda x, w: F.rms_norm(x, (8192,), w, 1e-6))  # bench.py's peer
    compiled(x, w)
    yield lambda: compiled(x, w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", required=True)
    ap.add_argument("--case", action="append", default=[])
    args = ap.parse_args()
    pack = kiln.Pack(args.pack)
    for case in args.case or ["gemm", "ln_bwd", "rms_bwd"]:
        fns = {"gemm": lambda: gemm(pack), "ln_bwd": lambda: norm_bwd(pack, "layernorm_bwd"),
               "rms_bwd": lambda: norm_bwd(pack, "rmsnorm_bwd"), "rms_fwd": lambda: rms_fwd(pack)}[case]()
        for fn in fns:
            fn(), fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("prof")
            fn()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
