#!/usr/bin/env python3
"""kiln's ops over other axes side by side with torch eager and torch.compile: softmax over a
non-last axis (engines/axissoftmax.lua), instance norm and adaptive layer norm (the row engine's
layer norm with scale and bias per channel or per sample); tests/specs/bench/axis_ops.lua, graph
replays, medians of several rounds. Usage:
    kiln build tests/specs/bench/axis_ops.lua --sm 90a -o axis_ops.kpack
    python3 bench/axis_ops.py --pack axis_ops.kpack [--rounds 5] [--out DIR]
Bandwidth counts x read once and y written once; the copy ceiling is bench.py's.
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
import torch.nn.functional as F  # noqa: E402
from bench.bench import copy_ceiling, pack_args, side_by_side, speed_row, write_csv  # noqa: E402


def softmax1(x):
    return torch.softmax(x, dim=1)


def instance_norm(x, g, b):
    return F.instance_norm(x, weight=g.reshape(-1), bias=b.reshape(-1), eps=1e-5)


def ada_layer_norm(x, g, b):
    return F.layer_norm(x, (x.shape[-1],), eps=1e-6) * g + b


# graph, values of its dynamic dim, x's shape and the parameters' (None: none) from it, torch's op
CASES = [
    ("softmax_21x65536", (4, 16), lambda n: ((n, 21, 65536), None), softmax1),
    ("softmax_512x1024", (16, 64), lambda n: ((n, 512, 1024), None), softmax1),
    ("inorm_64x3136", (64, 256), lambda n: ((n, 64, 3136), (1, 64, 1)), instance_norm),
    ("inorm_320x4096", (8, 32), lambda n: ((n, 320, 4096), (1, 320, 1)), instance_norm),
    ("adaln_256x1152", (32, 256), lambda n: ((n, 256, 1152), (n, 1, 1152)), ada_layer_norm),
    ("adaln_4096x3072", (1, 4), lambda n: ((n, 4096, 3072), (n, 1, 3072)), ada_layer_norm),
]


def main():
    args = pack_args(__doc__)
    pack = kiln.Pack(args.pack)
    ceiling = copy_ceiling()
    print("copy ceiling %.2f TB/s" % ceiling)
    rows = []
    for name, values, shapes_of, ref in CASES:
        plan = next(p for p in pack.plans() if p.graph == name)
        compiled = torch.compile(ref)
        for n in values:
            xs, ps = shapes_of(n)
            x = torch.randn(xs, device="cuda", dtype=torch.bfloat16)
            params = {}
            if ps:
                params["g"] = (1 + 0.5 * torch.randn(ps, device="cuda")).to(torch.bfloat16)
                params["b"] = torch.randn(ps, device="cuda", dtype=torch.bfloat16)
            want = ref(x.double(), *[p.double() for p in params.values()])
            y = torch.full(xs, float("nan"), device="cuda", dtype=torch.bfloat16)
            plan(x=x, y=y, **params)
            err = (y.double() - want).abs().max().item()
            assert err < 0.05 * want.abs().max().item(), "%s at %d: max error %g" % (name, n, err)
            ps_ = list(params.values())
            compiled(x, *ps_)
            mk, me, mc = side_by_side([lambda: plan(x=x, y=y, **params), lambda: ref(x, *ps_),
                                       lambda: compiled(x, *ps_)], args.rounds)
            nbytes = 2 * x.numel() * x.element_size()
            rows.append(speed_row(name, xs, mk, me, mc, nbytes, ceiling))
    if args.out:
        write_csv(args.out, "axis_ops.csv", rows)


if __name__ == "__main__":
    main()
