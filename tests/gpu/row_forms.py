#!/usr/bin/env python3
"""The PTX and CUDA forms of the softmax family on the same inputs, special values included
(rows of -inf, a +inf, a NaN, values near the bf16 limit): the same NaN and infinity pattern,
finite values within 2 bf16 ulps. Also the all -inf row's convention (y = 0, log y = -inf,
lse = -inf). TAP on stdout. Usage: row_forms.py PTX.kpack CUDA.kpack"""
import sys

import torch
from tap import finish, ok  # this folder: TAP lines; puts the kiln package on the path
import kiln  # after tap

T = 37


def rows(H, gen):
    x = torch.randn(T, H, generator=gen, device="cuda").to(torch.bfloat16) * 4
    x[1] = float("-inf")                         # all -inf
    x[2] = float("-inf"); x[2, H // 3] = 1.5     # one finite
    x[3, H // 2] = float("inf")                  # +inf
    x[4, 7] = float("nan")                       # NaN
    x[5] = 3.0e38; x[5, ::2] = -3.0e38           # near the limit
    x[6] = 0.0                                   # constant
    return x


def same(a, b, what):
    a, b = a.float(), b.float()
    na, nb = torch.isnan(a), torch.isnan(b)
    ia, ib = torch.isinf(a), torch.isinf(b)
    pattern = bool(torch.equal(na, nb) and torch.equal(ia, ib) and torch.equal(a[ia], b[ib]))
    fin = ~(na | ia)
    d = (a[fin] - b[fin]).abs()
    tol = 2 * 2.0 ** -7 * b[fin].abs() + 1e-6
    close = bool((d <= tol).all()) if d.numel() else True
    ok(pattern and close, "%s: NaN/inf pattern %s, finite max diff %.3g" % (what, "same" if pattern else "DIFFERS",
                                                                          d.max().item() if d.numel() else 0))


def main():
    ptx, cuda = kiln.Pack(sys.argv[1]), kiln.Pack(sys.argv[2])
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    for H in (1000, 2048, 65536):
        inst = "H=%d" % H
        x = rows(H, gen)
        outs = {}
        for name, pk in (("ptx", ptx), ("cuda", cuda)):
            y = torch.full_like(x, float("nan"))
            lse, mx, se = (torch.full((T, 1), float("nan"), device="cuda") for _ in range(3))
            pk.plan("softmax", inst)(x=x, y=y, lse=lse, mx=mx, se=se)
            ly = torch.full_like(x, float("nan"))
            llse = torch.full((T, 1), float("nan"), device="cuda")
            pk.plan("log_softmax", inst)(x=x, y=ly, lse=llse)
            dy = torch.randn(T, H, generator=gen, device="cuda").to(torch.bfloat16)
            outs[name] = (y, lse, mx, se, ly, llse)
        for i, what in enumerate(("softmax y", "lse", "max", "sum_exp", "log_softmax y", "log_softmax lse")):
            same(outs["ptx"][i], outs["cuda"][i], "%s %s" % (inst, what))
        y, lse, _, _, ly, llse = outs["ptx"]
        ok(bool((y[1].float() == 0).all() and torch.isneginf(ly[1].float()).all() and torch.isneginf(lse[1]).all()
                and torch.isneginf(llse[1]).all()),
           "%s: a row of -inf gives y = 0, log y = -inf, lse = -inf" % inst)
        ok(bool(torch.isnan(y[4].float()).all()), "%s: a NaN makes its row NaN" % inst)
        # backward from the forward's finite rows
        yb = torch.softmax(torch.randn(T, H, generator=gen, device="cuda"), -1).to(torch.bfloat16)
        lyb = torch.log_softmax(torch.randn(T, H, generator=gen, device="cuda"), -1).to(torch.bfloat16)
        dy = torch.randn(T, H, generator=gen, device="cuda").to(torch.bfloat16)
        dy[3, 5] = float("inf")
        for graph, yy in (("softmax_bwd", yb), ("log_softmax_bwd", lyb)):
            res = []
            for pk in (ptx, cuda):
                dx = torch.full_like(dy, float("nan"))
                pk.plan(graph, inst)(dy=dy, y=yy, dx=dx)
                res.append(dx)
            same(res[0], res[1], "%s %s" % (inst, graph))
    torch.cuda.synchronize()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
