#!/usr/bin/env python3
"""The backwards of batch norm, instance norm and adaptive layer norm side by side with torch:
kiln's kernels from their decompositions (ops/norm.lua; batch norm's four per-channel sums in
one kernel) against torch eager's own backward kernels and torch.compile of the backward's
math; tests/specs/bench/norm_bwd.lua, graph replays, medians of several rounds. Usage:
    kiln build tests/specs/bench/norm_bwd.lua --sm 90a -o norm_bwd.kpack
    python3 bench/norm_bwd.py --pack norm_bwd.kpack [--rounds 5] [--out DIR]
Bandwidth counts dy and x read once and dx written once; the copy ceiling is bench.py's.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "python"))

import kiln  # noqa: E402
import torch  # noqa: E402
from bench.bench import copy_ceiling, pack_args, side_by_side, speed_row, write_csv  # noqa: E402

EPS = 1e-5


def math_bwd(dy, x, g, mean, rstd, stat_dims, param_dims):
    """The backward's math (OPS.md 4.2): what torch.compile gets, and the fp64 reference."""
    f = torch.float32 if dy.dtype != torch.float64 else torch.float64
    dy, x = dy.to(f), x.to(f)
    xhat = (x - mean) * rstd
    gg = dy * g
    mg = gg.mean(stat_dims, keepdim=True)
    mgx = (gg * xhat).mean(stat_dims, keepdim=True)
    dx = (gg - mg - xhat * mgx) * rstd
    return dx, (dy * xhat).sum(param_dims, keepdim=True), dy.sum(param_dims, keepdim=True)


def bn_math(dy, x, g, mean, rstd):
    return math_bwd(dy, x, g, mean, rstd, (0, 2), (0, 2))


def in_math(dy, x, g, mean, rstd):
    return math_bwd(dy, x, g, mean, rstd, (2,), (0, 2))


def ada_math(dy, x, g, mean, rstd):
    return math_bwd(dy, x, g, mean, rstd, (2,), (1,))


def bn_eager(dy, x, g, mean, rstd):
    """torch's batch norm backward kernel (what autograd runs for F.batch_norm in training)."""
    return torch.ops.aten.native_batch_norm_backward(dy, x, g.reshape(-1), None, None, mean.reshape(-1),
                                                     rstd.reshape(-1), True, EPS, [True, True, True])


def in_eager(dy, x, g, mean, rstd):
    """torch's instance norm backward: batch norm's over [1, N * C, HW], the weight's gradient
    summed over the batch (as autograd runs it for F.instance_norm)."""
    n, c, hw = x.shape
    dx, dw, db = torch.ops.aten.native_batch_norm_backward(
        dy.reshape(1, n * c, hw), x.reshape(1, n * c, hw), g.reshape(-1).repeat(n), None, None,
        mean.reshape(-1), rstd.reshape(-1), True, EPS, [True, True, True])
    return dx.reshape(n, c, hw), dw.reshape(n, c).sum(0), db.reshape(n, c).sum(0)


def ada_eager(dy, x, g, mean, rstd):
    """autograd's backward of F.layer_norm(x) * g + b: layer norm's backward kernel of dy * g,
    the per-sample sums of dy * x_hat and dy."""
    d = x.shape[-1]
    dx = torch.ops.aten.native_layer_norm_backward((dy * g).to(x.dtype), x, [d], mean, rstd, None, None,
                                                   [True, False, False])[0]
    xhat = (x.float() - mean) * rstd
    return dx, (dy * xhat).sum(1, keepdim=True), dy.float().sum(1, keepdim=True)


# graph, values of its dynamic dim, x's and the statistics' shapes from it, the parameters',
# torch's backward, its math
CASES = [
    ("bn_bwd_64x3136", (32, 128), lambda n: ((n, 64, 3136), (1, 64, 1), (1, 64, 1)), bn_eager, bn_math),
    ("bn_bwd_256x784", (32, 128), lambda n: ((n, 256, 784), (1, 256, 1), (1, 256, 1)), bn_eager, bn_math),
    ("in_bwd_64x3136", (32, 128), lambda n: ((n, 64, 3136), (n, 64, 1), (1, 64, 1)), in_eager, in_math),
    ("adaln_bwd_256x1152", (32, 256), lambda n: ((n, 256, 1152), (n, 256, 1), (n, 1, 1152)), ada_eager, ada_math),
    ("adaln_bwd_4096x3072", (1, 4), lambda n: ((n, 4096, 3072), (n, 4096, 1), (n, 1, 3072)), ada_eager, ada_math),
]


def main():
    args = pack_args(__doc__)
    pack = kiln.Pack(args.pack)
    ceiling = copy_ceiling()
    print("copy ceiling %.2f TB/s" % ceiling)
    rows = []
    for name, values, shapes_of, eager, math in CASES:
        plan = next(p for p in pack.plans() if p.graph == name)
        compiled = torch.compile(math)
        for n in values:
            xs, ss, ps = shapes_of(n)
            dev = "cuda"
            x = torch.randn(xs, device=dev, dtype=torch.bfloat16)
            dy = torch.randn(xs, device=dev, dtype=torch.bfloat16)
            g = 1 + 0.5 * torch.randn(ps, device=dev)
            red = tuple(i for i, d in enumerate(ss) if d == 1)
            mean = x.float().mean(red, keepdim=True)
            rstd = torch.rsqrt(x.float().var(red, unbiased=False, keepdim=True) + EPS)
            ins = dict(dy=dy, x=x, g=g, mean=mean, rstd=rstd)
            outs = dict(dx=torch.full(xs, float("nan"), device=dev, dtype=torch.bfloat16),
                        dg=torch.full(ps, float("nan"), device=dev), db=torch.full(ps, float("nan"), device=dev))
            plan(**ins, **outs)
            want = math(dy.double(), x.double(), g.double(), mean.double(), rstd.double())
            for k_, w in zip(("dx", "dg", "db"), want):
                err = (outs[k_].double() - w).abs().max().item()
                assert err <= 0.02 * w.abs().max().item() + 1e-3, "%s at %d: %s max error %g" % (name, n, k_, err)
            args_ = (dy, x, g, mean, rstd)
            compiled(*args_)
            mk, me, mc = side_by_side([lambda: plan(**ins, **outs), lambda: eager(*args_), lambda: compiled(*args_)],
                                      args.rounds)
            nbytes = 3 * x.numel() * x.element_size()
            rows.append(speed_row(name, xs, mk, me, mc, nbytes, ceiling, 20))
    if args.out:
        write_csv(args.out, "norm_bwd.csv", rows)


if __name__ == "__main__":
    main()
