#!/usr/bin/env python3
"""kiln's reductions (axisreduce, colreduce, the row engine) side by side with torch eager and
torch.compile: per-channel sums of [N, C, HW], the sum over the middle axis of [B, S, H], and
colreduce's column sums of [T, H] and amax of everything, and the row engine's sum and amax of
each row (tests/specs/bench/axes.lua), graph replays, medians of several rounds. Usage:
    kiln build tests/specs/bench/axes.lua --sm 90a -o axes.kpack
    python3 bench/axes.py --pack axes.kpack [--rounds 5] [--out DIR]
Bandwidth counts the input once and the output once; the copy ceiling is bench.py's.
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

# graph, dynamic dim, its values, input shape from it, torch's reduction, kiln's output shape
# from the input's
def kept(*axes):
    return lambda s: [s[i] if i in axes else 1 for i in range(len(s))]


CASES = [
    ("chan_fp32_64", "N", (64, 256), lambda n: (n, 64, 3136), torch.float32, lambda x: x.sum((0, 2), dtype=torch.float32), kept(1)),
    ("chan_bf16_256", "N", (64, 256), lambda n: (n, 256, 784), torch.bfloat16, lambda x: x.sum((0, 2), dtype=torch.float32), kept(1)),
    ("mid_bf16", "B", (16, 64, 256), lambda n: (n, 512, 1024), torch.bfloat16, lambda x: x.sum(1, dtype=torch.float32), kept(0, 2)),
    ("col_bf16_4096", "T", (4096, 32768), lambda n: (n, 4096), torch.bfloat16, lambda x: x.sum(0, dtype=torch.float32), kept(1)),
    ("col_bf16_64", "T", (65536, 1048576), lambda n: (n, 64), torch.bfloat16, lambda x: x.sum(0, dtype=torch.float32), kept(1)),
    ("all_amax_bf16", "T", (4096, 32768), lambda n: (n, 4096), torch.bfloat16, lambda x: x.abs().amax().float(), kept()),
    ("row_sum_bf16", "T", (4096, 32768), lambda n: (n, 4096), torch.bfloat16, lambda x: x.sum(-1, keepdim=True, dtype=torch.float32), kept(0)),
    ("row_amax_bf16", "T", (4096, 32768), lambda n: (n, 4096), torch.bfloat16, lambda x: x.abs().amax(-1, keepdim=True).float(), kept(0)),
]


def main():
    args = pack_args(__doc__)
    pack = kiln.Pack(args.pack)
    ceiling = copy_ceiling()
    print("copy ceiling %.2f TB/s" % ceiling)
    rows = []
    for name, dim, values, shape_of, dtype, ref, out_of in CASES:
        plan = next(p for p in pack.plans() if p.graph == name)
        compiled = torch.compile(ref)
        for n in values:
            x = torch.randn(shape_of(n), device="cuda", dtype=dtype)
            want = ref(x)
            y = torch.full(out_of(x.shape), float("nan"), device="cuda")
            plan(x=x, y=y)
            err = ((y.reshape(want.shape) - want).abs().max() / want.abs().max()).item()
            assert err < 1e-4, "%s at %s=%d: relative error %g" % (name, dim, n, err)
            compiled(x)
            mk, me, mc = side_by_side([lambda: plan(x=x, y=y), lambda: ref(x), lambda: compiled(x)], args.rounds)
            nbytes = x.numel() * x.element_size() + want.numel() * 4
            rows.append(speed_row(name, x.shape, mk, me, mc, nbytes, ceiling, 14))
    if args.out:
        write_csv(args.out, "axes.csv", rows)


if __name__ == "__main__":
    main()
