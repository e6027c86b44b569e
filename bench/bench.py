#!/usr/bin/env python3
"""kiln benchmarks, side by side with the peers in one process on the same tensors.

Each case runs a kiln plan (through the ctypes binding) and the same math in torch eager
and torch.compile; times are medians of per-launch averages (CUDA events around batches
of launches, after warm-up, inputs random, never zeros); bandwidth counts the minimal
bytes (every input read once, every output written once). Usage:

    python3 bench/bench.py --pack build/bench.kpack --out DIR [--only NAME]
"""
import argparse
import csv
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402


def time_ms(fn, reps=30, batch=10, warmup=10):
    """Median over `reps` of the mean time of `batch` back-to-back launches (ms)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(reps):
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / batch)
    return statistics.median(samples)


def capture(fn, batch=20):
    """A CUDA graph of `batch` calls of fn (after warm-up calls on a side stream)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(batch):
            fn()
    return g


def graph_ms(fn, batch=20, reps=20):
    """Kernel time without host overhead: `batch` launches captured in a CUDA graph, the
    median over `reps` replays of the mean time per launch (ms)."""
    return time_ms(capture(fn, batch).replay, reps=reps, batch=1, warmup=3) / batch


def side_by_side(fns, rounds):
    """Medians over `rounds` interleaved rounds of graph_ms for each of fns (kiln and its
    peers timed in turn, so a drift of the device's clocks hits them alike)."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for t, fn in zip(times, fns):
            t.append(graph_ms(fn))
    return [statistics.median(t) for t in times]


def pack_args(doc, out=None, extra=()):
    """Parsed arguments of a side-by-side script: --pack, --rounds, --out (default `out`), and
    the script's own (`extra`: (flag, add_argument keywords) pairs); the description is the
    first line of `doc`."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--pack", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=out)
    for flag, kw in extra:
        ap.add_argument(flag, **kw)
    return ap.parse_args()


def speed_row(name, shape, mk, me, mc, nbytes, ceiling, width=16):
    """The CSV row of one case beside torch eager and torch.compile (median ms each; nbytes
    moved; the copy ceiling in TB/s), printed as a line whose case name is `width` wide."""
    tbs = nbytes / mk / 1e9
    row = {"case": name, "shape": "x".join(map(str, shape)), "kiln_ms": "%.4f" % mk,
           "kiln_TBs": "%.2f" % tbs, "pct_copy": "%.0f" % (100 * tbs / ceiling),
           "x_eager": "%.2f" % (me / mk), "x_compile": "%.2f" % (mc / mk)}
    print("%-*s %-16s kiln %.4f ms %.2f TB/s (%3.0f%% of copy)  %.2fx eager  %.2fx torch.compile" % (
        width, name, row["shape"], mk, tbs, 100 * tbs / ceiling, me / mk, mc / mk), flush=True)
    return row


def write_csv(out_dir, name, rows):
    """rows (dicts with the same keys) as out_dir/name."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def copy_ceiling():
    """Device-to-device copy rate (read + write), the bandwidth ceiling (TB/s)."""
    n = 1 << 29  # 1 GiB of bf16
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x))
    return 2 * x.numel() * 2 / (ms * 1e-3) / 1e12


_same_copy = {}


def same_copy_tbs(nbytes):
    """A copy moving the same bytes (half read, half written), timed like the cases' graphs:
    what the memory system gives at this size, launch ramp and tail included (TB/s)."""
    if nbytes not in _same_copy:
        # a multiple of 1024 elements: torch's vectorized copy, as for the cases' large tensors
        x = torch.randn(max(1024, nbytes // 4 // 1024 * 1024), device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        _same_copy[nbytes] = 2 * x.numel() * 2 / (graph_ms(lambda: y.copy_(x)) * 1e-3) / 1e12
    return _same_copy[nbytes]


def nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def bf16(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def pointwise_cases(pack):
    T = 16384
    x, b = bf16(T, 8192), bf16(8192)
    y = torch.empty_like(x)
    yield dict(name="bias_gelu", shape="%dx8192" % T, plan=pack.plan("bias_gelu", "H=8192"),
               kiln=dict(x=x, b=b, y=y), eager=lambda: F.gelu(x + b), out=y, bytes=nbytes(x, b, y))
    gate, up = bf16(T, 11008), bf16(T, 11008)
    y2 = torch.empty_like(gate)
    yield dict(name="swiglu", shape="%dx11008" % T, plan=pack.plan("swiglu", "H=11008"),
               kiln=dict(gate=gate, up=up, y=y2), eager=lambda: F.silu(gate) * up, out=y2,
               bytes=nbytes(gate, up, y2))
    xf, r = torch.randn(T, 4096, device="cuda"), bf16(T, 4096)
    y3 = torch.empty(T, 4096, device="cuda", dtype=torch.bfloat16)
    yield dict(name="scale_residual_cast", shape="%dx4096 fp32+bf16" % T,
               plan=pack.plan("scale_residual_cast", "H=4096"), kiln=dict(x=xf, residual=r, scale=0.7, y=y3),
               eager=lambda: (xf * 0.7 + r).to(torch.bfloat16), out=y3, bytes=nbytes(xf, r, y3))


SHAPES = [(16384, 8192), (4096, 4096), (32768, 2048)]


def rms_train(x, w, eps=1e-6):
    r = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (x.float() * r * w.float()).to(x.dtype), r


def bwd_cases(pack, T, H, x, w, b, dy):
    """layernorm_bwd and rmsnorm_bwd (when the pack has it) of x [T, H] with weight w, bias b."""
    shape, inst = "%dx%d" % (T, H), "H=%d" % H
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    inv_std = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + 1e-5)
    dxl, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)

    def ln_bwd(dy=dy, x=x, w=w, mean=mean, inv_std=inv_std, H=H):
        return torch.ops.aten.native_layer_norm_backward(dy, x, (H,), mean, inv_std, w, b,
                                                          [True, True, True])[0]
    yield dict(name="layernorm_bwd", shape=shape, plan=pack.plan("layernorm_bwd", inst),
               kiln=dict(dy=dy, x=x, w=w, mean=mean, inv_std=inv_std, dx=dxl, dw=dw, db=db),
               eager=ln_bwd, out=dxl, bytes=nbytes(dy, x, w, mean, inv_std, dxl, dw, db))
    if "rmsnorm_bwd" in {p.graph for p in pack.plans()}:
        inv_rms = rms_train(x, w)[1]
        dxr, dwr = torch.empty_like(x), torch.empty_like(w)

        def rms_bwd(dy=dy, x=x, w=w, H=H):
            xx = x.detach().requires_grad_(True)
            ww = w.detach().requires_grad_(True)
            yy = F.rms_norm(xx, (H,), ww, 1e-6)
            return torch.autograd.grad(yy, (xx,), dy)[0]
        yield dict(name="rmsnorm_bwd", shape=shape, plan=pack.plan("rmsnorm_bwd", inst),
                   kiln=dict(dy=dy, x=x, w=w, inv_rms=inv_rms, dx=dxr, dw=dwr), eager=rms_bwd, out=dxr,
                   bytes=nbytes(dy, x, w, inv_rms, dxr, dwr))


# TxH shapes of group wide (KILN_BENCH_WIDE, comma-separated); a pack holds the H it was built for
WIDE = [tuple(int(v) for v in s.split("x")) for s in os.environ.get("KILN_BENCH_WIDE", "4096x65536").split(",")]


def wide_cases(pack):
    """Rows past one CTA's registers at the WIDE shapes the pack has: the forwards (a cluster's
    CTAs hold the row) and the backward norms (the staged kernel over a cluster)."""
    have = {p.instance for p in pack.plans()}
    graphs = {p.graph for p in pack.plans()}
    for T, H in WIDE:
        if "H=%d" % H not in have:
            continue
        x, w, b, dy = bf16(T, H), bf16(H), bf16(H), bf16(T, H)
        yield from fwd_cases(pack, T, H, x, w, b)
        if "layernorm_bwd" in graphs:
            yield from bwd_cases(pack, T, H, x, w, b, dy)


def fwd_cases(pack, T, H, x, w, b):
    """rmsnorm (inference, training), layernorm, softmax and softmax_bwd of x [T, H], those the
    pack has at this H."""
    shape, inst = "%dx%d" % (T, H), "H=%d" % H
    have = {(p.graph, p.instance) for p in pack.plans()}
    y = torch.empty_like(x)
    if ("rmsnorm", inst) in have:
        yield dict(name="rmsnorm", shape=shape, plan=pack.plan("rmsnorm", inst), kiln=dict(x=x, w=w, y=y),
                   eager=lambda x=x, w=w, H=H: F.rms_norm(x, (H,), w, 1e-6), out=y, bytes=nbytes(x, w, y))
    if ("rmsnorm_train", inst) in have:
        inv = torch.empty(T, 1, device="cuda")
        yield dict(name="rmsnorm_train", shape=shape, plan=pack.plan("rmsnorm_train", inst),
                   kiln=dict(x=x, w=w, y=y, inv_rms=inv), eager=lambda x=x, w=w: rms_train(x, w)[0], out=y,
                   bytes=nbytes(x, w, y, inv))
    if ("layernorm", inst) in have:
        yield dict(name="layernorm", shape=shape, plan=pack.plan("layernorm", inst), kiln=dict(x=x, w=w, b=b, y=y),
                   eager=lambda x=x, w=w, b=b, H=H: F.layer_norm(x, (H,), w, b, 1e-5), out=y,
                   bytes=nbytes(x, w, b, y))
    if ("softmax", inst) in have:
        s = torch.empty_like(x)
        lse = torch.empty(T, 1, device="cuda")
        yield dict(name="softmax", shape=shape, plan=pack.plan("softmax", inst), kiln=dict(x=x, y=s, lse=lse),
                   eager=lambda x=x: torch.softmax(x, -1), out=s, bytes=nbytes(x, s, lse))
    if ("softmax_bwd", inst) in have:
        p = torch.softmax(bf16(T, H).float(), -1).to(torch.bfloat16)
        dy, dx = bf16(T, H), torch.empty_like(x)
        yield dict(name="softmax_bwd", shape=shape, plan=pack.plan("softmax_bwd", inst),
                   kiln=dict(dy=dy, y=p, dx=dx),
                   eager=lambda dy=dy, p=p: torch._softmax_backward_data(dy, p, -1, torch.bfloat16), out=dx,
                   bytes=nbytes(dy, p, dx))


def norm_cases(pack):
    """The memory-bound family of issue 4, at the three benchmark shapes."""
    for T, H in SHAPES:
        x, w, b = bf16(T, H), bf16(H), bf16(H)
        yield from fwd_cases(pack, T, H, x, w, b)
        dy = bf16(T, H)
        yield from bwd_cases(pack, T, H, x, w, b, dy)
    T, H = 16384, 8192
    x, r, w = bf16(T, H), bf16(T, H), bf16(H)
    scale = torch.full((1,), 0.5, device="cuda")
    y8 = torch.empty(T, H, device="cuda", dtype=torch.float8_e4m3fn)
    h, amax = torch.empty_like(x), torch.empty(1, 1, device="cuda")

    def fp8_unfused(x=x, r=r, w=w, scale=scale, H=H):
        hh = x + r
        t = F.rms_norm(hh, (H,), w, 1e-6)
        a = t.abs().max().float()
        return (t.float() * scale).to(torch.float8_e4m3fn), hh, a
    yield dict(name="rmsnorm_residual_fp8", shape="%dx%d" % (T, H), plan=pack.plan("rmsnorm_residual_fp8", "H=%d" % H),
               kiln=dict(x=x, r=r, w=w, scale=scale, y=y8, h=h, amax=amax), eager=fp8_unfused,
               out=h, ref=lambda: x + r, bytes=nbytes(x, r, w, y8, h, amax))
    if "rmsnorm_residual_fp8_rowwise" in {p.graph for p in pack.plans()}:
        s8, y8r, hr = torch.empty(T, 1, device="cuda"), torch.empty_like(y8), torch.empty_like(x)

        def fp8_rowwise_unfused(x=x, r=r, w=w, H=H):
            hh = x + r
            t = F.rms_norm(hh, (H,), w, 1e-6)
            s = t.abs().amax(-1, keepdim=True).float().clamp(min=1e-12) / 448.0
            return (t.float() / s).to(torch.float8_e4m3fn), hh, s

        def rowwise_scales(x=x, r=r, w=w, H=H):  # fp32 from the bf16 h, as kiln computes them
            t = F.rms_norm((x + r).float(), (H,), w.float(), 1e-6)
            return t.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448.0
        yield dict(name="rmsnorm_residual_fp8_rowwise", shape="%dx%d" % (T, H),
                   plan=pack.plan("rmsnorm_residual_fp8_rowwise", "H=%d" % H),
                   kiln=dict(x=x, r=r, w=w, y=y8r, h=hr, scale=s8), eager=fp8_rowwise_unfused,
                   out=s8, ref=rowwise_scales, bytes=nbytes(x, r, w, y8r, hr, s8))
    if "rmsnorm_fp8_block" in {p.graph for p in pack.plans()}:
        nb = H // 128
        sb, y8b = torch.empty(T, nb, device="cuda"), torch.empty_like(y8)

        def fp8_block_unfused(x=x, w=w, T=T, H=H, nb=nb):
            t = F.rms_norm(x, (H,), w, 1e-6).view(T, nb, 128)
            s = t.abs().amax(-1, keepdim=True).float() / 448.0
            return (t.float() / s).to(torch.float8_e4m3fn).view(T, H), s.view(T, nb)

        def block_scales(x=x, w=w, T=T, H=H, nb=nb):  # fp32 from the bf16 x, as kiln computes them
            t = F.rms_norm(x.float(), (H,), w.float(), 1e-6).view(T, nb, 128)
            return t.abs().amax(-1) / 448.0
        yield dict(name="rmsnorm_fp8_block", shape="%dx%d" % (T, H), plan=pack.plan("rmsnorm_fp8_block", "H=%d" % H),
                   kiln=dict(x=x, w=w, y=y8b, scale=sb), eager=fp8_block_unfused,
                   out=sb, ref=block_scales, bytes=nbytes(x, w, y8b, sb))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", default=None, help="case names, comma-separated (default: all)")
    ap.add_argument("--group", default=None, help="pointwise,norms,wide (default: all there are packs for)")
    ap.add_argument("--wide-pack", default=None, help="a pack of the norms, softmax and their backward at the H of KILN_BENCH_WIDE (group wide)")
    args = ap.parse_args()
    torch.manual_seed(int(time.time()))
    pack = kiln.Pack(args.pack)
    ceiling = copy_ceiling()
    dev = torch.cuda.get_device_name()
    print("device %s, copy ceiling %.2f TB/s" % (dev, ceiling))
    rows = []
    groups = {"pointwise": pointwise_cases, "norms": norm_cases}
    if args.wide_pack:
        wide = kiln.Pack(args.wide_pack)
        groups["wide"] = lambda _pack: wide_cases(wide)
    for group in (args.group.split(",") if args.group else groups):
        for c in groups[group](pack):
            if args.only and c["name"] not in args.only.split(","):
                continue
            plan, kw = c["plan"], c["kiln"]
            run_kiln = lambda plan=plan, kw=kw: plan(**kw)  # noqa: E731
            run_kiln()
            torch.cuda.synchronize()
            ref = (c["ref"] if "ref" in c else c["eager"])()
            ref = (ref[0] if isinstance(ref, tuple) else ref).float()
            err = (c["out"].float() - ref).abs().max().item()
            ok = err <= 3e-2 * max(1.0, ref.abs().max().item())
            compiled = torch.compile(c["eager"])
            t_kiln = time_ms(run_kiln)
            t_eager = time_ms(c["eager"])
            t_comp = time_ms(compiled)
            try:  # the same three, replayed from CUDA graphs: kernel time, no host overhead
                g_kiln, g_eager, g_comp = graph_ms(run_kiln), graph_ms(c["eager"]), graph_ms(compiled)
            except Exception as e:  # noqa: BLE001 - a peer that cannot be captured
                print("  (graph timing skipped: %s)" % e)
                g_kiln = g_eager = g_comp = float("nan")
            tbs = lambda ms: c["bytes"] / (ms * 1e-3) / 1e12  # noqa: E731
            row = dict(case=c["name"], shape=c["shape"], kiln_ms=t_kiln, eager_ms=t_eager, compile_ms=t_comp,
                       kiln_tbs=tbs(t_kiln), eager_tbs=tbs(t_eager), compile_tbs=tbs(t_comp),
                       pct_of_copy=100 * tbs(t_kiln) / ceiling, vs_eager=t_eager / t_kiln,
                       vs_compile=t_comp / t_kiln, graph_kiln_tbs=tbs(g_kiln), graph_vs_eager=g_eager / g_kiln,
                       graph_vs_compile=g_comp / g_kiln, same_copy_graph_tbs=same_copy_tbs(c["bytes"]),
                       max_err_vs_torch=err, agrees=ok)
            rows.append(row)
            print("%-22s %-18s kiln %.4f ms %.2f TB/s (%3.0f%% of copy) | eager %.4f ms x%.2f | compile %.4f ms x%.2f | %s"
                  % (row["case"], row["shape"], t_kiln, row["kiln_tbs"], row["pct_of_copy"], t_eager, row["vs_eager"],
                     t_comp, row["vs_compile"], "agrees with torch" if ok else "DISAGREES (max err %.3g)" % err),
                  flush=True)
            print("%-22s %-18s   graphs: kiln %.2f TB/s (%3.0f%% of copy) | x%.2f eager | x%.2f compile"
                  " | a copy of the same bytes %.2f TB/s (kiln %3.0f%% of it)"
                  % ("", "", row["graph_kiln_tbs"], 100 * row["graph_kiln_tbs"] / ceiling, row["graph_vs_eager"],
                     row["graph_vs_compile"], row["same_copy_graph_tbs"],
                     100 * row["graph_kiln_tbs"] / row["same_copy_graph_tbs"]), flush=True)
            del compiled
    os.makedirs(args.out, exist_ok=True)
    if not rows:
        return 1
    with open(os.path.join(args.out, "bench.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) + ["device", "copy_tbs"])
        w.writeheader()
        for r in rows:
            w.writerow(dict(r, device=dev, copy_tbs=ceiling))
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
