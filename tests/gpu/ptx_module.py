#!/usr/bin/env python3
"""Every plan of packs of the same specs, built with every kernel it can as a PTX module
(kiln.ptxmodule: by the ptxas executable, or through nvJitLink) and one with KILN_PLAN=*.module=off
(the CUDA forms through NVRTC, the last pack), run on the same random inputs at an odd row
count: every output must have the same bits as the last pack's (outputs poisoned with NaN
first). TAP on stdout. Usage: ptx_module.py MODULES.kpack [MODULES.kpack ...] CUDA.kpack"""
import sys

import torch
from tap import finish, ok  # this folder: TAP lines; puts the kiln package on the path
import kiln  # after tap

T = 4097


def shape(t):
    return [T if d == "T" else d for d in t.dims]


def compare(a, b, label, gen):
    for pa in a.plans():
        pb = b.plan(pa.graph, pa.instance)
        ins, outs_a, outs_b = {}, {}, {}
        for t in pa.tensors:
            if t.role == "input":
                v = torch.randn(shape(t), generator=gen, device="cuda")
                ins[t.name] = (v.abs() + 0.5 if t.name in ("inv_std", "inv_rms", "scale") else v).to(kiln.torch_dtype(t.dtype))
            elif t.role == "scalar":
                ins[t.name] = 0.7
            elif t.role == "output":
                for outs in (outs_a, outs_b):
                    outs[t.name] = torch.full(shape(t), float("nan"), device="cuda").to(kiln.torch_dtype(t.dtype))
        pa(**ins, **outs_a)
        pb(**ins, **outs_b)
        torch.cuda.synchronize()
        same = [n for n in outs_a if torch.equal(outs_a[n].view(torch.uint8), outs_b[n].view(torch.uint8))]
        ok(len(same) == len(outs_a), "%s: %s [%s] at T = %d, %d kernel%s: %s the same bits as the CUDA forms%s" % (
            label, pa.graph, pa.instance, T, len(pa.kernels), "s" if len(pa.kernels) > 1 else "",
            ", ".join(sorted(outs_a)),
            "" if len(same) == len(outs_a) else " (differ: %s)" % ", ".join(n for n in outs_a if n not in same)))


def main():
    cuda = kiln.Pack(sys.argv[-1])
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321)
    for path in sys.argv[1:-1]:
        compare(kiln.Pack(path), cuda, path.rsplit("/", 1)[-1], gen)
    finish()


if __name__ == "__main__":
    main()
