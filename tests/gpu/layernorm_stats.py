#!/usr/bin/env python3
"""LayerNorm's forward on rows far from zero, every form of its row (tests/specs/gpu/
layernorm_offset.lua): y, the mean and inv_std against an fp64 torch reference. A variance
taken as the mean square less the squared mean would lose its digits to the offset; kiln's
one reduction of (sum, M2) pairs (Chan's combine) and its two-reduction form must not. Also a
constant row (inv_std = 1 / sqrt(eps), y = b). Outputs poisoned with NaN before each launch.
TAP on stdout. Usage: layernorm_stats.py LABEL=PACK ..."""
import sys

import torch
from tap import finish, ok  # this folder: TAP lines; puts the kiln package on the path
import kiln  # after tap

T = 37
EPS = 1e-5
# (offset, spread) of x per dtype: bf16 keeps 8 bits, so its rows sit nearer zero. At these
# offsets the mean square less the squared mean is off by about 1e-2 of the variance in fp32
# (far outside the tolerances below), while the mean's own rounding (a few ulps of the offset)
# moves a constant row's variance by under 1e-4 of epsilon.
DIST = {"bf16": (64.0, 2.0), "fp32": (100.0, 1.0)}
# y's tolerance (relative, absolute) per output dtype; x - mean adds a few ulps of x, scaled
# by inv_std and |w| (the per-element term in check)
YTOL = {"bf16": (2.0 ** -7, 2.0 ** -7), "fp32": (1e-4, 1e-4)}


def check(pk, graph, H, dtype, gen, label):
    plan = pk.plan(graph, "H=%d" % H)
    td = kiln.torch_dtype(dtype)
    off, spread = DIST[dtype]
    x = (off + spread * torch.randn(T, H, generator=gen, device="cuda", dtype=torch.float64)).to(td)
    x[2] = x[2, 0]  # a constant row
    w = (1 + 0.5 * torch.randn(H, generator=gen, device="cuda", dtype=torch.float64)).to(td)
    b = (0.1 * torch.randn(H, generator=gen, device="cuda", dtype=torch.float64)).to(td)
    args = {"x": x, "w": w, "b": b}
    v = x.double()
    if any(t.name == "r" for t in plan.tensors):
        r = torch.randn(T, H, generator=gen, device="cuda", dtype=torch.float64).to(td)
        args["r"] = r
        v = v + r.double()
    shapes = {t.name: [T if d == "T" else (H if d == "H" else d) for d in t.dims] for t in plan.tensors}
    for name in ("y", "mean", "inv_std"):
        t = next(t for t in plan.tensors if t.name == name)
        args[name] = torch.full(shapes[name], float("nan"), device="cuda", dtype=kiln.torch_dtype(t.dtype))
    plan(**args)
    torch.cuda.synchronize()
    mean = v.mean(dim=1, keepdim=True)
    var = ((v - mean) ** 2).mean(dim=1, keepdim=True)
    inv = 1 / torch.sqrt(var + EPS)
    y = (v - mean) * inv * w.double() + b.double()
    what = "%s%s H=%d" % (label, graph, H)
    dm = (args["mean"].double().reshape(T, 1) - mean).abs().max().item()
    ok(dm <= 1e-6 * off + 1e-6, "%s: mean within %.1e (max diff %.3g)" % (what, 1e-6 * off, dm))
    di = ((args["inv_std"].double().reshape(T, 1) - inv).abs() / inv).max().item()
    ok(di <= 1e-4, "%s: inv_std within 1e-4 relative (max %.3g; constant row %.6g, want %.6g)"
       % (what, di, args["inv_std"].reshape(T)[2].item(), inv[2, 0].item()))
    rel, ab = YTOL["fp32" if args["y"].dtype == torch.float32 else "bf16"]
    dy = (args["y"].double() - y).abs()
    # x - mean: a few ulps of x and the kernel's own mean error (checked above), times inv_std
    # and |w| (a constant row's inv_std is 1 / sqrt(eps): there the mean's error shows most)
    ulps = (4 * 2.0 ** -24 * v.abs() + (args["mean"].double().reshape(T, 1) - mean).abs()) * inv * w.double().abs()
    bad = int((dy > rel * y.abs() + ab + ulps).sum().item()) + int(torch.isnan(args["y"]).sum().item())
    ok(bad == 0, "%s: y within %.0e relative + %.0e (%d outside, max diff %.3g)" % (what, rel, ab, bad, dy.max().item()))


def main():
    gen = torch.Generator(device="cuda")
    gen.manual_seed(2026)
    for arg in sys.argv[1:]:
        label, _, path = arg.partition("=")
        pk = kiln.Pack(path)
        for dtype in ("bf16", "fp32"):
            for H in (1000, 4096, 24576, 32768, 65536):
                check(pk, "layernorm_" + dtype, H, dtype, gen, label + ": ")
        for H in (4096, 32768):
            check(pk, "layernorm_residual", H, "bf16", gen, label + ": ")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
