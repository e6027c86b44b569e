#!/usr/bin/env python3
"""The backward norms launched back to back on one workspace: the row kernel writes a partial
row per CTA there and the finalize adds them, launched early (PDL) and waiting for the row
kernel in-kernel; the next launch's row kernel overwrites the same rows. Two input sets
alternate over many launches, each into its own dw/db, on the stream and replayed from a CUDA
graph; the kernels are deterministic, so every launch must give the first launch's bits for
its set, and that one must match an fp32 torch reference. TAP on stdout. Usage:
bwd_repeat.py PACK..."""
import sys

import torch
from tap import finish, ok  # this folder: TAP lines; puts the kiln package on the path
import kiln  # after tap

LAUNCHES = 40


def inputs(graph, T, H, gen):
    """One input set and the fp32 reference of its column sums."""
    bf = torch.bfloat16
    dy = torch.randn(T, H, generator=gen, device="cuda").to(bf)
    x = (torch.randn(T, H, generator=gen, device="cuda") * 2 + 0.5).to(bf)
    w = (torch.rand(H, generator=gen, device="cuda") + 0.5).to(bf)
    xf, dyf = x.float(), dy.float()
    if graph == "layernorm_bwd":
        mean = xf.mean(-1, keepdim=True)
        inv = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + 1e-5)
        xh = (xf - mean) * inv
        return dict(dy=dy, x=x, w=w, mean=mean, inv_std=inv), [(dyf * xh).sum(0), dyf.sum(0)]
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return dict(dy=dy, x=x, w=w, inv_rms=inv), [(dyf * xf * inv).sum(0)]


def outs(graph, T, H):
    """Fresh outputs, poisoned: dx and the column sums."""
    nan = float("nan")
    o = dict(dx=torch.full((T, H), nan, device="cuda", dtype=torch.bfloat16),
             dw=torch.full((H,), nan, device="cuda", dtype=torch.bfloat16))
    if graph == "layernorm_bwd":
        o["db"] = torch.full((H,), nan, device="cuda", dtype=torch.bfloat16)
    return o


def sums(o):
    return [o["dw"]] + ([o["db"]] if "db" in o else [])


def check(pack, graph, H, T, gen):
    plan = pack.plan(graph, "H=%d" % H)
    sets = [inputs(graph, T, H, gen) for _ in range(2)]
    what = "%s H=%d T=%d" % (graph, H, T)
    # the first launch of each set against fp32 torch
    first = []
    for ins, ref in sets:
        o = outs(graph, T, H)
        plan(**ins, **o)
        torch.cuda.synchronize()
        first.append(sums(o))
        good = all(bool(torch.isfinite(s.float()).all()) and (s.float() - r).abs().max().item() <= 2e-2 * max(1.0, r.abs().max().item())
                   for s, r in zip(sums(o), ref))
        ok(good, "%s: the column sums match fp32 torch" % what)
    # back to back on the stream, sets alternating, each launch into its own column sums
    launches = []
    for i in range(LAUNCHES):
        o = outs(graph, T, H)
        plan(**sets[i % 2][0], **o)
        launches.append((i % 2, o))
    torch.cuda.synchronize()
    bad = sum(1 for k, o in launches if not all(torch.equal(a, b) for a, b in zip(sums(o), first[k])))
    ok(bad == 0, "%s: %d launches back to back give the first launch's bits (%d differ)" % (what, LAUNCHES, bad))
    # the same from a CUDA graph, replayed
    graph_outs = [outs(graph, T, H) for _ in range(4)]
    side = torch.cuda.Stream()  # warm-up on a side stream first, as torch's capture wants
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        plan(**sets[0][0], **graph_outs[0])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i, o in enumerate(graph_outs):
            plan(**sets[i % 2][0], **o)
    bad = 0
    for _ in range(LAUNCHES // 4):
        for o in graph_outs:
            for s in sums(o):
                s.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        bad += sum(1 for i, o in enumerate(graph_outs) if not all(torch.equal(a, b) for a, b in zip(sums(o), first[i % 2])))
    ok(bad == 0, "%s: %d graph replays of 4 launches give the first launch's bits (%d differ)" % (what, LAUNCHES // 4, bad))


def no_rows(pack, graph, H):
    """T = 0: no dx, and column sums of zero (the finalize adds no partial rows)."""
    plan = pack.plan(graph, "H=%d" % H)
    ins, _ = inputs(graph, 0, H, None)
    o = outs(graph, 0, H)
    plan(**ins, **o)
    torch.cuda.synchronize()
    ok(all(bool((s == 0).all()) for s in sums(o)), "%s H=%d T=0: the column sums are zeros" % (graph, H))


def main():
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321)
    for path in sys.argv[1:]:
        pack = kiln.Pack(path)
        have = {p.instance for p in pack.plans()}
        for graph in ("layernorm_bwd", "rmsnorm_bwd"):
            # (65536: rmsnorm's staged kernel over a cluster, layernorm's split backward)
            for H, T in ((4096, 4096), (2048, 1031), (8192, 5), (65536, 257)):
                if "H=%d" % H in have:
                    check(pack, graph, H, T, gen)
            if "H=4096" in have:
                no_rows(pack, graph, 4096)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
