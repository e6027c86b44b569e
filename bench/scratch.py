#!/usr/bin/env python3
"""kiln's plans whose virtual tensors cross kernels (scratch tensors in the workspace) side by
side with torch eager and torch.compile: rmsnorm -> GEMM, one residual sum read by rmsnorm and
softmax, batch norm in training written from primitives; tests/specs/bench/scratch.lua, graph
replays, medians of several rounds. Usage:
    kiln build tests/specs/bench/scratch.lua --sm 90a -o scratch.kpack
    python3 bench/scratch.py --pack scratch.kpack [--rounds 5] [--out DIR]
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
from bench.bench import pack_args, side_by_side, write_csv  # noqa: E402


def norm_gemm(x, w, W):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6) @ W


def two_anchors(x, r, w):
    h = x + r
    return F.rms_norm(h, (h.shape[-1],), w, 1e-6), torch.softmax(h, -1)


def bn_train(x, gamma, beta):
    return F.batch_norm(x, None, None, gamma.reshape(-1), beta.reshape(-1), training=True, eps=1e-5)


def bf16(shape, scale=1.0):
    return (scale * torch.randn(shape, device="cuda")).to(torch.bfloat16)


# graph, values of its dynamic dim, inputs from it, outputs' shapes from it, torch's function
CASES = [
    ("norm_gemm", (4096, 16384),
     lambda n: {"x": bf16((n, 4096)), "w": bf16(4096), "W": bf16((4096, 4096), 4096 ** -0.5)},
     lambda n: {"z": (n, 4096)}, norm_gemm),
    ("two_anchors", (4096, 16384),
     lambda n: {"x": bf16((n, 4096)), "r": bf16((n, 4096)), "w": bf16(4096)},
     lambda n: {"y": (n, 4096), "s": (n, 4096)}, two_anchors),
    ("bn_train", (32, 128),
     lambda n: {"x": bf16((n, 64, 3136)), "gamma": 1 + 0.5 * torch.randn(1, 64, 1, device="cuda"),
                "beta": torch.randn(1, 64, 1, device="cuda")},
     lambda n: {"y": (n, 64, 3136)}, bn_train),
]


def main():
    args = pack_args(__doc__)
    pack = kiln.Pack(args.pack)
    rows = []
    for name, values, inputs_of, outputs_of, ref in CASES:
        plan = next(p for p in pack.plans() if p.graph == name)
        compiled = torch.compile(ref)
        for n in values:
            ins = inputs_of(n)
            outs = {k: torch.full(s, float("nan"), device="cuda", dtype=torch.bfloat16)
                    for k, s in outputs_of(n).items()}
            plan(**ins, **outs)
            want = ref(*[t.double() for t in ins.values()])
            want = want if isinstance(want, tuple) else (want,)
            for (k, got), w in zip(outs.items(), want):
                err = (got.double() - w).abs().max().item()
                assert err < 0.05 * w.abs().max().item(), "%s at %d: %s max error %g" % (name, n, k, err)
            args_ = list(ins.values())
            compiled(*args_)
            mk, me, mc = side_by_side([lambda: plan(**ins, **outs), lambda: ref(*args_),
                                       lambda: compiled(*args_)], args.rounds)
            rows.append({"case": name, "n": n, "kiln_ms": "%.4f" % mk, "eager_ms": "%.4f" % me,
                         "compile_ms": "%.4f" % mc, "x_eager": "%.2f" % (me / mk), "x_compile": "%.2f" % (mc / mk),
                         "workspace_MB": "%.1f" % (plan.workspace_size(**{plan.dims[0]: n}) / 1e6)})
            print("%-12s %6d  kiln %.4f ms  eager %.4f  compile %.4f  %.2fx eager  %.2fx torch.compile  workspace %s MB" % (
                name, n, mk, me, mc, me / mk, mc / mk, rows[-1]["workspace_MB"]), flush=True)
    if args.out:
        write_csv(args.out, "scratch.csv", rows)


if __name__ == "__main__":
    main()
