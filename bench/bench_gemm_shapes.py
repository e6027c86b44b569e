#!/usr/bin/env python3
"""kiln's GEMM over the shapes of real layers, side by side with cuBLAS (through torch).

The graphs of tests/specs/bench/gemm_shapes.lua (linear layers of LLaMA-3 8B / Mixtral,
Qwen2.5 7B, GPT-2 with bias, fp8 e4m3 with per-tensor descales, a batched product with fp32
out), each at M = 1, 16, 128, 1024, 4096 and 16384 rows. Peers: F.linear (bias too),
torch._scaled_mm, torch.bmm. Times are CUDA-graph replays (bench.graph_ms: no host overhead,
for kiln and torch alike), the median of interleaved rounds; every output (kiln's and torch's)
is checked against the same math in fp32 (rel L2 <= 1e-2). Prints the geometric mean of
torch / kiln and the slowest shapes. Usage (after `kiln build
tests/specs/bench/gemm_shapes.lua --sm 90a -o PACK`):

    python3 bench/bench_gemm_shapes.py --pack PACK --out DIR [--only linear_fp8] [--m 1,16]
"""
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
from bench.bench import graph_ms, pack_args, write_csv  # noqa: E402

TOL = 1e-2
MS = (1, 16, 128, 1024, 4096, 16384)


def rel_l2(x, ref):
    x, ref = x.float(), ref.float()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def randn(*shape, scale=1.0, dtype=torch.bfloat16):
    return (torch.randn(*shape, device="cuda") * scale).to(dtype)


def case(graph, inst, M):
    """(kiln kwargs, output, peer fn, peer name, fp32 reference fn) of one shape."""
    N, K = inst["N"], inst["K"]
    if graph == "bmm_f32":
        Bt = inst["Bt"]
        a, b = randn(Bt, M, K), randn(Bt, K, N, scale=K ** -0.5)
        c = torch.empty(Bt, M, N, device="cuda")
        try:
            torch.bmm(a[:, :1], b, out_dtype=torch.float32)
            peer, name = (lambda: torch.bmm(a, b, out_dtype=torch.float32)), "torch.bmm(out_dtype=fp32)"
        except (TypeError, RuntimeError):
            peer, name = (lambda: torch.bmm(a, b).float()), "torch.bmm().float()"
        return dict(a=a, b=b, c=c), c, peer, name, lambda: a.float() @ b.float()
    if graph == "linear_fp8":
        e4m3 = torch.float8_e4m3fn
        x8 = torch.randn(M, K, device="cuda").clamp(-8, 8).to(e4m3)
        w8 = torch.randn(N, K, device="cuda").clamp(-8, 8).to(e4m3)
        da, db = torch.full((1,), 0.5, device="cuda"), torch.full((1,), 1 / 64, device="cuda")
        y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        return (dict(x=x8, w=w8.t(), da=da, db=db, y=y), y,
                lambda: torch._scaled_mm(x8, w8.t(), scale_a=da[0], scale_b=db[0], out_dtype=torch.bfloat16),
                "torch._scaled_mm", lambda: (x8.float() @ w8.float().t()) * (da * db))
    x, w = randn(M, K), randn(N, K, scale=K ** -0.5)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    if graph == "linear_bias":
        b = randn(N)
        return (dict(x=x, w=w.t(), b=b, y=y), y, lambda: F.linear(x, w, b), "F.linear(bias)",
                lambda: x.float() @ w.float().t() + b.float())
    return dict(x=x, w=w.t(), y=y), y, lambda: F.linear(x, w), "F.linear", lambda: x.float() @ w.float().t()


def timed(fns, flops, rounds):
    """graph_ms medians of fns over interleaved rounds, batches sized to the work."""
    batch = 20 if flops < 2e10 else (10 if flops < 2e11 else 3)
    reps = 10 if flops < 2e11 else 5
    times = [[] for _ in fns]
    for _ in range(rounds):
        for t, fn in zip(times, fns):
            t.append(graph_ms(fn, batch=batch, reps=reps))
    return [sorted(t)[len(t) // 2] for t in times]


def main():
    args = pack_args(__doc__, out=".", extra=(("--only", dict(default=None)), ("--m", dict(default=None)),
                                              ("--csv", dict(default="gemm_shapes.csv"))))
    torch.manual_seed(int(time.time()))
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 references are fp32
    pack = kiln.Pack(args.pack)
    dev = torch.cuda.get_device_name()
    ms = [int(m) for m in args.m.split(",")] if args.m else MS
    print("device %s" % dev)
    rows = []
    for p in pack.plans():
        if args.only and p.graph != args.only:
            continue
        inst = dict((k, int(v)) for k, v in (kv.split("=") for kv in p.instance.split(",")))
        plan = pack.plan(p.graph, p.instance)
        plan_ids = ",".join(k.plan_id for k in plan.kernels if not k.plan_id.endswith(":init"))
        for M in ms:
            kw, out, peer, peer_name, ref_fn = case(p.graph, inst, M)
            out.fill_(float("nan"))
            plan(**kw)
            peer_out = peer()
            torch.cuda.synchronize()
            ref = ref_fn()
            err, peer_err = rel_l2(out, ref), rel_l2(peer_out, ref)
            del ref, peer_out
            flops = 2.0 * M * inst["N"] * inst["K"] * inst.get("Bt", 1)
            tk, tp = timed([lambda: plan(**kw), peer], flops, 1 if flops > 2e11 else args.rounds)
            shape = "%s%dx%dx%d" % ("%dx" % inst["Bt"] if "Bt" in inst else "", M, inst["N"], inst["K"])
            row = dict(case=p.graph, shape=shape, M=M, kiln_ms="%.5f" % tk, peer=peer_name, peer_ms="%.5f" % tp,
                       kiln_tflops="%.1f" % (flops / tk / 1e9), peer_tflops="%.1f" % (flops / tp / 1e9),
                       vs_peer="%.3f" % (tp / tk), rel_l2="%.2e" % err, peer_rel_l2="%.2e" % peer_err,
                       agrees=int(err <= TOL), plan=plan_ids, device=dev)
            rows.append(row)
            print("%-12s %-22s kiln %9.4f ms %6.1f TF | %s %9.4f ms %6.1f TF | x%.2f | rel L2 %.1e (peer %.1e) %s"
                  % (p.graph, shape, tk, flops / tk / 1e9, peer_name, tp, flops / tp / 1e9, tp / tk, err, peer_err,
                     "ok" if err <= TOL else "WRONG"), flush=True)
            del kw, out
    if not rows:
        return 1
    write_csv(args.out, args.csv, rows)
    ratios = [float(r["vs_peer"]) for r in rows]
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    worst = sorted(rows, key=lambda r: float(r["vs_peer"]))[:8]
    print("%d shapes: geometric mean x%.3f of torch, %d below 0.9x; slowest: %s" % (
        len(rows), gm, sum(r < 0.9 for r in ratios), ", ".join("%s %s x%s" % (r["case"], r["shape"], r["vs_peer"])
                                                              for r in worst)))
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
