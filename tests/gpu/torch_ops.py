#!/usr/bin/env python3
"""kiln.torch: plans as torch custom ops (specs/rmsnorm.lua, specs/rmsnorm_bwd.lua at H=4096).
The op allocates its outputs and matches an fp32 reference; torch.compile(fullgraph=True)
traces a function around it with no graph break and matches eager; a CUDA graph captures and
replays it; kiln.torch.function differentiates it through rmsnorm_bwd (eager and compiled)
within tolerance of torch autograd in fp32; kiln.torch.nn's RMSNorm, LayerNorm and
FusedAddRMSNorm forward and backward; a wrong dtype raises KilnError. Fresh random inputs.
TAP on stdout. Usage: torch_ops.py PACK"""
import sys

import torch
from tap import finish, ok  # this folder: TAP lines; puts the kiln package on the path
import kiln  # after tap
import kiln.torch

H, EPS = 4096, 1e-6


def ref(x, w):
    xf = x.float()
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    return xf * inv * w.float(), inv


def close(a, b, tol):
    """max |a - b| over max |b|: the bf16 outputs' error relative to the tensor's scale."""
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)) <= tol


def grads_match(got, want, what):
    ok(all(close(g, w_, 2e-2) for g, w_ in zip(got, want)), what)


def modules(gen):
    """kiln.torch.nn's modules against the same formulas in fp32 torch, forward and backward."""
    from kiln.torch import nn as knn
    x = torch.randn(2, 300, H, device="cuda", generator=gen).bfloat16()
    r = torch.randn(2, 300, H, device="cuda", generator=gen).bfloat16()
    gy = torch.randn(2, 300, H, device="cuda", generator=gen)
    gh = torch.randn(2, 300, H, device="cuda", generator=gen)
    w0 = (1 + 0.5 * torch.randn(H, device="cuda", generator=gen)).bfloat16()
    b0 = (0.1 * torch.randn(H, device="cuda", generator=gen)).bfloat16()

    m = knn.RMSNorm(H, eps=1e-5)
    with torch.no_grad():
        m.weight.copy_(w0)
    xk = x.clone().requires_grad_()
    y = m(xk)
    (y.float() * gy).sum().backward()
    xr, wr = x.float().requires_grad_(), w0.float().requires_grad_()
    yr = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-5) * wr
    (yr * gy).sum().backward()
    ok(y.shape == x.shape and close(y, yr, 2 ** -7), "nn.RMSNorm(eps=1e-5): y matches")
    grads_match((xk.grad, m.weight.grad), (xr.grad, wr.grad), "nn.RMSNorm: dx and dweight match")

    m = knn.LayerNorm(H)
    with torch.no_grad():
        m.weight.copy_(w0)
        m.bias.copy_(b0)
    xk = x.clone().requires_grad_()
    y = m(xk)
    (y.float() * gy).sum().backward()
    xr, wr, br = x.float().requires_grad_(), w0.float().requires_grad_(), b0.float().requires_grad_()
    yr = torch.nn.functional.layer_norm(xr, (H,), wr, br, 1e-5)
    (yr * gy).sum().backward()
    ok(close(y, yr, 2 ** -7), "nn.LayerNorm: y matches torch's layer_norm")
    grads_match((xk.grad, m.weight.grad, m.bias.grad), (xr.grad, wr.grad, br.grad),
                "nn.LayerNorm: dx, dweight and dbias match")

    m = knn.FusedAddRMSNorm(H)
    with torch.no_grad():
        m.weight.copy_(w0)
    xk, rk = x.clone().requires_grad_(), r.clone().requires_grad_()
    y, h = m(xk, rk)
    ((y.float() * gy).sum() + (h.float() * gh).sum()).backward()
    xr, rr, wr = x.float().requires_grad_(), r.float().requires_grad_(), w0.float().requires_grad_()
    hr = xr + rr
    yr = hr * torch.rsqrt(hr.pow(2).mean(-1, keepdim=True) + 1e-6) * wr
    ((yr * gy).sum() + (hr * gh).sum()).backward()
    ok(close(y, yr, 2 ** -7) and close(h, hr, 2 ** -7), "nn.FusedAddRMSNorm: y and h match")
    grads_match((xk.grad, rk.grad, m.weight.grad), (xr.grad, rr.grad, wr.grad),
                "nn.FusedAddRMSNorm: dx, dresidual and dweight match")


def main():
    pk = kiln.Pack(sys.argv[1])
    fwd, bwd = pk.plan("rmsnorm_train", "H=%d" % H), pk.plan("rmsnorm_bwd", "H=%d" % H)
    rms = kiln.torch.op(fwd)
    gen = torch.Generator(device="cuda").manual_seed(2026)
    x = torch.randn(1000, H, device="cuda", generator=gen).bfloat16()
    w = (1 + 0.5 * torch.randn(H, device="cuda", generator=gen)).bfloat16()

    y, inv = rms(x, w)
    yr, invr = ref(x, w)
    ok(y.shape == (1000, H) and y.dtype == torch.bfloat16 and inv.shape == (1000, 1) and inv.dtype == torch.float32,
       "op: outputs allocated with the plan's shapes and dtypes (%s %s, %s %s)" % (tuple(y.shape), y.dtype,
                                                                                    tuple(inv.shape), inv.dtype))
    ok(close(y, yr, 2 ** -7) and close(inv, invr, 1e-5), "op: y and inv_rms match the fp32 reference")

    def block(x, w):
        h, _ = rms(x * 2, w)
        return h + 1
    eager = block(x, w)
    compiled = torch.compile(block, fullgraph=True)
    try:
        got = compiled(x, w)
        ok(close(got, eager, 2 ** -7), "torch.compile(fullgraph=True) of a block around the op matches eager")
    except Exception as e:  # a graph break raises under fullgraph
        ok(False, "torch.compile(fullgraph=True): %s" % str(e).splitlines()[0])
    breaks = torch._dynamo.explain(block)(x, w).graph_break_count
    ok(breaks == 0, "torch._dynamo.explain: %d graph breaks" % breaks)

    xs = torch.randn(512, H, device="cuda", generator=gen).bfloat16()
    rms(xs, w)  # load and warm outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, _ = rms(xs, w)
    xs.copy_(torch.randn(512, H, device="cuda", generator=gen).bfloat16())
    g.replay()
    torch.cuda.synchronize()
    ok(close(out, ref(xs, w)[0], 2 ** -7), "a CUDA graph captures the op; its replay on new inputs matches")

    f = kiln.torch.function(fwd, bwd)
    gy = torch.randn(1000, H, device="cuda", generator=gen)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    y, _ = f(xg, wg)
    (y.float() * gy).sum().backward()
    xr, wr = x.float().requires_grad_(), w.float().requires_grad_()
    (ref(xr, wr)[0] * gy).sum().backward()
    ok(close(xg.grad, xr.grad, 2e-2) and close(wg.grad, wr.grad, 2e-2),
       "function: dx and dw through rmsnorm_bwd match torch autograd in fp32")

    def loss(x, w):
        y, _ = f(x, w)
        return (y.float() * gy).sum()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    try:
        lc = torch.compile(loss, fullgraph=True)(xc, wc)
        lc.backward()
        missing = [n for n, t in (("x", xc), ("w", wc)) if t.grad is None]
        ok(not missing and close(xc.grad, xg.grad, 1e-3) and close(wc.grad, wg.grad, 1e-3),
           "function under torch.compile(fullgraph=True): the same gradients as eager (missing: %s)" % missing)
    except Exception as e:
        import traceback
        traceback.print_exc()
        ok(False, "function under torch.compile: %s" % str(e).splitlines()[0])

    modules(gen)

    try:
        rms(x.float(), w)
        ok(False, "a float32 x was accepted")
    except kiln.KilnError as e:
        ok("DTYPE" in str(e), "a float32 x raises KilnError: %s" % str(e).splitlines()[0])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
