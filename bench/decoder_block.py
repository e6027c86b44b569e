#!/usr/bin/env python3
"""A LLaMA-style decoder block (RMSNorm, causal attention, SwiGLU MLP, two residual adds) in
plain PyTorch, one training step (forward + backward) timed four ways on the same weights and
inputs: torch eager, torch.compile of the block, the block with kiln.torch.nn's modules swapped
in (RMSNorm and FusedAddRMSNorm for the norms and their residual adds), and torch.compile of
that block (kiln's ops are custom ops: no graph break). Checks the kiln block's output and
gradients against eager torch. Writes decoder.csv (case, torch_ms, compile_ms, kiln_ms,
kiln_compile_ms, ratios: peer time over kiln's). Usage: decoder_block.py [--out DIR]"""
import argparse
import sys

import torch
import torch.nn.functional as F

import bench  # noqa: E402  (this folder's bench.py: timing and CSV; puts the kiln package on the path)
from kiln.torch import nn as knn  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, hidden, heads, ffn, kiln_norms):
        super().__init__()
        self.heads, self.kiln = heads, kiln_norms
        dt = torch.bfloat16
        if kiln_norms:
            self.norm1, self.norm2 = knn.RMSNorm(hidden), knn.FusedAddRMSNorm(hidden)
        else:
            self.norm1 = torch.nn.RMSNorm(hidden, eps=1e-6, device="cuda", dtype=dt)
            self.norm2 = torch.nn.RMSNorm(hidden, eps=1e-6, device="cuda", dtype=dt)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False, device="cuda", dtype=dt)
        self.proj = torch.nn.Linear(hidden, hidden, bias=False, device="cuda", dtype=dt)
        self.gate_up = torch.nn.Linear(hidden, 2 * ffn, bias=False, device="cuda", dtype=dt)
        self.down = torch.nn.Linear(ffn, hidden, bias=False, device="cuda", dtype=dt)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        a = self.proj(a)
        if self.kiln:
            n, x = self.norm2(a, x)
        else:
            x = x + a
            n = self.norm2(x)
        g, u = self.gate_up(n).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


def step(model, x, gy):
    for p in model.parameters():
        p.grad = None
    y = model(x)
    y.backward(gy)
    return y


def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default="4x2048x4096x32x11008,1x4096x4096x32x14336")
    args = ap.parse_args()
    rows, failed = [], False
    for shape in args.shapes.split(","):
        B, S, Hd, nh, ffn = (int(v) for v in shape.split("x"))
        torch.manual_seed(2026)
        ref = Block(Hd, nh, ffn, False)
        kb = Block(Hd, nh, ffn, True)
        with torch.no_grad():
            for name in ("qkv", "proj", "gate_up", "down"):
                getattr(ref, name).weight.normal_(0, 0.02)
                getattr(kb, name).weight.copy_(getattr(ref, name).weight)
            for n1, n2 in (("norm1", "norm1"), ("norm2", "norm2")):
                getattr(ref, n1).weight.normal_(1, 0.1)
                getattr(kb, n2).weight.copy_(getattr(ref, n1).weight)
        x = torch.randn(B, S, Hd, device="cuda", dtype=torch.bfloat16).requires_grad_()
        gy = torch.randn(B, S, Hd, device="cuda", dtype=torch.bfloat16)
        y_ref = step(ref, x, gy)
        g_ref = [x.grad.clone()] + [p.grad.clone() for p in ref.parameters()]
        x.grad = None
        y_k = step(kb, x, gy)
        g_k = [x.grad.clone()] + [p.grad.clone() for p in kb.parameters()]
        errs = [rel(y_k, y_ref)] + [rel(a, b) for a, b in zip(g_k, g_ref)]
        good = max(errs) <= 5e-2
        failed |= not good
        print("%s: kiln block vs eager: output and %d gradients, worst max|diff|/max|ref| %.3g %s"
              % (shape, len(g_k), max(errs), "ok" if good else "MISMATCH"), flush=True)
        cref, ckb = torch.compile(ref), torch.compile(kb, fullgraph=True)
        t = {
            "torch": bench.time_ms(lambda: step(ref, x, gy), reps=20, batch=1, warmup=3),
            "compile": bench.time_ms(lambda: step(cref, x, gy), reps=20, batch=1, warmup=3),
            "kiln": bench.time_ms(lambda: step(kb, x, gy), reps=20, batch=1, warmup=3),
            "kiln_compile": bench.time_ms(lambda: step(ckb, x, gy), reps=20, batch=1, warmup=3),
        }
        best = min(t["kiln"], t["kiln_compile"])
        row = {"case": "decoder %dx%d h%d heads%d ffn%d" % (B, S, Hd, nh, ffn), "torch_ms": "%.3f" % t["torch"],
               "compile_ms": "%.3f" % t["compile"], "kiln_ms": "%.3f" % t["kiln"],
               "kiln_compile_ms": "%.3f" % t["kiln_compile"], "vs_torch": "%.3f" % (t["torch"] / best),
               "vs_compile": "%.3f" % (t["compile"] / best), "max_rel_err": "%.3g" % max(errs)}
        rows.append(row)
        print("  fwd+bwd ms: torch %(torch_ms)s, torch.compile %(compile_ms)s, kiln %(kiln_ms)s, "
              "kiln+compile %(kiln_compile_ms)s; vs torch %(vs_torch)sx, vs torch.compile %(vs_compile)sx" % row,
              flush=True)
    bench.write_csv(args.out, "decoder.csv", rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
