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


def copy_ceiling():
    """Device-to-device copy rate (read + write), the bandwidth ceiling (TB/s)."""
    n = 1 << 29  # 1 GiB of bf16
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x))
    return 2 * x.numel() * 2 / (ms * 1e-3) / 1e12


def nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def case_bias_gelu(pack, T=16384, H=8192):
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(H, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    plan = pack.plan("bias_gelu", "H=%d" % H)
    eager = lambda: F.gelu(x + b)  # noqa: E731
    return dict(name="bias_gelu", shape="%dx%d bf16" % (T, H), kiln=lambda: plan(x=x, b=b, y=y),
                eager=eager, out=y, bytes=nbytes(x, b, y), tol=2e-2)


def case_swiglu(pack, T=16384, H=11008):
    gate = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    up = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(gate)
    plan = pack.plan("swiglu", "H=%d" % H)
    eager = lambda: F.silu(gate) * up  # noqa: E731
    return dict(name="swiglu", shape="%dx%d bf16" % (T, H), kiln=lambda: plan(gate=gate, up=up, y=y),
                eager=eager, out=y, bytes=nbytes(gate, up, y), tol=2e-2)


def case_scale_residual_cast(pack, T=16384, H=4096):
    x = torch.randn(T, H, device="cuda", dtype=torch.float32)
    r = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(T, H, device="cuda", dtype=torch.bfloat16)
    s = 0.7
    plan = pack.plan("scale_residual_cast", "H=%d" % H)
    eager = lambda: (x * s + r).to(torch.bfloat16)  # noqa: E731
    return dict(name="scale_residual_cast", shape="%dx%d fp32+bf16" % (T, H),
                kiln=lambda: plan(x=x, residual=r, scale=s, y=y), eager=eager, out=y,
                bytes=nbytes(x, r, y), tol=2e-2)


CASES = [case_bias_gelu, case_swiglu, case_scale_residual_cast]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    torch.manual_seed(int(time.time()))
    pack = kiln.Pack(args.pack)
    ceiling = copy_ceiling()
    dev = torch.cuda.get_device_name()
    print("device %s, copy ceiling %.2f TB/s" % (dev, ceiling))
    rows = []
    for make in CASES:
        c = make(pack)
        if args.only and c["name"] != args.only:
            continue
        c["kiln"]()
        torch.cuda.synchronize()
        ref = c["eager"]().float()
        err = (c["out"].float() - ref).abs().max().item()
        ok = err <= c["tol"] * max(1.0, ref.abs().max().item())
        compiled = torch.compile(c["eager"])
        t_kiln = time_ms(c["kiln"])
        t_eager = time_ms(c["eager"])
        t_comp = time_ms(compiled)
        tbs = lambda ms: c["bytes"] / (ms * 1e-3) / 1e12  # noqa: E731
        row = dict(case=c["name"], shape=c["shape"], kiln_ms=t_kiln, eager_ms=t_eager, compile_ms=t_comp,
                   kiln_tbs=tbs(t_kiln), eager_tbs=tbs(t_eager), compile_tbs=tbs(t_comp),
                   pct_of_copy=100 * tbs(t_kiln) / ceiling, vs_eager=t_eager / t_kiln,
                   vs_compile=t_comp / t_kiln, max_err_vs_eager=err, agrees=ok)
        rows.append(row)
        print("%-22s %-18s kiln %.4f ms %.2f TB/s (%.0f%% of copy) | eager %.4f ms x%.2f | compile %.4f ms x%.2f | %s"
              % (row["case"], row["shape"], t_kiln, row["kiln_tbs"], row["pct_of_copy"], t_eager, row["vs_eager"],
                 t_comp, row["vs_compile"], "agrees with torch" if ok else "DISAGREES (max err %.3g)" % err))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) + ["device", "copy_tbs"])
        w.writeheader()
        for r in rows:
            w.writerow(dict(r, device=dev, copy_tbs=ceiling))
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
