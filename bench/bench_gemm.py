#!/usr/bin/env python3
"""kiln GEMMs side by side with cuBLAS (through torch) in one process on the same tensors.

Cases: bf16 C = A·B at 8192³, 4096³ and 16384×4096×4096 against torch.matmul; a linear layer
with bias and GELU at 8192³ against F.linear + F.gelu; SwiGLU (bias, SiLU, times a gate) and a
scaled residual at 8192×4096×4096 against F.silu(F.linear) * gate and torch.addmm; fp8 e4m3 (per-tensor descales, bf16
out) at 8192³ against torch._scaled_mm; a gated MLP's up projection (two products of one x, SwiGLU:
one dual GEMM kernel) at 8192×{11008,14336}×4096 against F.silu(F.linear) * F.linear; block-scaled
fp8 (fp32 scales per 1x128 block of x, per 128x128 block of the weight) at 8192³, 4096×7168×2048
and 4096×2048×7168 against torch's blockwise scaled_mm (cuBLAS; per-tensor where it is refused);
grouped GEMMs of 8 and 64 experts (K 4096 / N 1536, K 7168 / N 4096, 8192-65536 tokens routed by
Zipf weights) against torch._grouped_mm. Times are bench.bench.time_ms medians; TFLOP/s count
2·M·N·K. Every result (kiln's and torch's) is checked against the same math in fp32 in torch:
rel L2 error at most 1e-2. Usage (after `kiln build specs/gemm*.lua --sm 90a -o PACK`):

    python3 bench/bench_gemm.py --pack PACK --out DIR [--only NAME]
"""
import argparse
import csv
import itertools
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# bench/ itself off the path, so that `bench` is the folder (bench.bench), not bench.py
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402
from bench.bench import time_ms  # noqa: E402

TOL = 1e-2  # rel L2 for bf16/fp8 operands with fp32 accumulation


def rel_l2(x, ref):
    x, ref = x.float(), ref.float()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def bf16(*shape, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)


def cases(pack):
    for M, N, K in ((8192, 8192, 8192), (4096, 4096, 4096), (16384, 4096, 4096)):
        a, b = bf16(M, K), bf16(K, N)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        yield dict(name="gemm_bf16", M=M, N=N, K=K, plan=pack.plan("gemm", "K=%d,N=%d" % (K, N)),
                   kiln=dict(a=a, b=b, c=c), out=c, peer=lambda a=a, b=b: torch.matmul(a, b), peer_name="torch.matmul",
                   ref=lambda a=a, b=b: a.float() @ b.float())
    M = N = K = 8192
    x, w, bias = bf16(M, K), bf16(N, K, scale=K ** -0.5), bf16(N)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    yield dict(name="gemm_bias_gelu", M=M, N=N, K=K, plan=pack.plan("gemm_bias_gelu", "K=%d,N=%d" % (K, N)),
               kiln=dict(x=x, w=w.t(), b=bias, y=y), out=y, peer=lambda: F.gelu(F.linear(x, w, bias)),
               peer_name="F.linear+F.gelu", ref=lambda: F.gelu(x.float() @ w.float().t() + bias.float()))
    # the other fused epilogues of the shipped specs (N = K = 4096), against the fewest torch calls
    M, N, K = 8192, 4096, 4096
    x, w, bias, gate = bf16(M, K), bf16(N, K, scale=K ** -0.5), bf16(N), bf16(M, N)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    yield dict(name="gemm_swiglu", M=M, N=N, K=K, plan=pack.plan("gemm_swiglu", "K=%d,N=%d" % (K, N)),
               kiln=dict(x=x, w=w.t(), b=bias, gate=gate, y=y), out=y, peer=lambda: F.silu(F.linear(x, w, bias)) * gate,
               peer_name="F.silu(F.linear)*gate", ref=lambda: F.silu(x.float() @ w.float().t() + bias.float()) * gate.float())
    wr, r = bf16(K, N, scale=K ** -0.5), bf16(M, N)
    yr = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    yield dict(name="gemm_residual", M=M, N=N, K=K, plan=pack.plan("gemm_residual", "K=%d,N=%d" % (K, N)),
               kiln=dict(x=x, w=wr, r=r, y=yr), out=yr, peer=lambda: torch.addmm(r, x, wr, alpha=0.5),
               peer_name="torch.addmm(r, alpha=.5)", ref=lambda: (x.float() @ wr.float()) * 0.5 + r.float())
    # a gated MLP's up projection (specs/gemm_gated_mlp.lua: one dual GEMM kernel on sm_90a)
    # against torch's two linear layers and the product, at LLaMA-2 7B's and LLaMA-3 8B's N
    for M, N, K in ((8192, 11008, 4096), (8192, 14336, 4096)):
        x, wg, wu = bf16(M, K), bf16(N, K, scale=K ** -0.5), bf16(N, K, scale=K ** -0.5)
        y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        yield dict(name="gemm_gated_mlp", M=M, N=N, K=K, flops=4.0 * M * N * K,
                   plan=pack.plan("gemm_gated_mlp", "K=%d,N=%d" % (K, N)), kiln=dict(x=x, wg=wg.t(), wu=wu.t(), y=y), out=y,
                   peer=lambda x=x, wg=wg, wu=wu: F.silu(F.linear(x, wg)) * F.linear(x, wu), peer_name="F.silu(F.linear)*F.linear",
                   ref=lambda x=x, wg=wg, wu=wu: F.silu(x.float() @ wg.float().t()) * (x.float() @ wu.float().t()))
    M = N = K = 8192
    e4m3 = torch.float8_e4m3fn
    a8 = torch.randn(M, K, device="cuda").clamp(-8, 8).to(e4m3)
    w8 = torch.randn(N, K, device="cuda").clamp(-8, 8).to(e4m3)
    da, db = torch.full((1,), 0.5, device="cuda"), torch.full((1,), 0.25, device="cuda")
    y8 = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    amax = torch.empty(1, 1, device="cuda")
    yield dict(name="gemm_fp8", M=M, N=N, K=K, plan=pack.plan("gemm_fp8", "K=%d,N=%d" % (K, N)),
               kiln=dict(a=a8, b=w8.t(), descale_a=da, descale_b=db, y=y8, amax=amax), out=y8,
               peer=lambda: torch._scaled_mm(a8, w8.t(), scale_a=da[0], scale_b=db[0], out_dtype=torch.bfloat16),
               peer_name="torch._scaled_mm", ref=lambda: (a8.float() @ w8.float().t()) * (da * db),
               extra=lambda: ("amax", amax.item(), y8.float().abs().max().item()))


def block_quant(x, bm, bk):
    """x [R, C] in e4m3 with one fp32 scale (amax / 448) per bm x bk block: (data, scales [R/bm, C/bk])."""
    R, C = x.shape
    xb = x.float().view(R // bm, bm, C // bk, bk)
    s = xb.abs().amax(dim=(1, 3)).clamp_min(1e-12) / 448.0
    return (xb / s[:, None, :, None]).to(torch.float8_e4m3fn).view(R, C), s


def expand(s, bm, bk):
    return s.repeat_interleave(bm, 0).repeat_interleave(bk, 1)


def block_scaled_peer(a8, sa, w8, ws):
    """torch's blockwise fp8 GEMM (cuBLAS: 1x128 activation, 128x128 weight scales) as a callable
    and its name, or torch._scaled_mm with per-tensor scales where that is refused."""
    sa_t = sa.t().contiguous().t()  # the activation scales outer-dim-major, as cuBLAS takes them
    tries = []
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        tries.append((lambda: F.scaled_mm(a8, w8.t(), sa_t, F.ScalingType.BlockWise1x128, ws.t(),
                                          F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16),
                      "F.scaled_mm blockwise"))
    tries.append((lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa_t, scale_b=ws.t(), out_dtype=torch.bfloat16),
                  "torch._scaled_mm blockwise"))
    for fn, name in tries:
        try:
            fn()
            torch.cuda.synchronize()
            return fn, name
        except (RuntimeError, TypeError, ValueError) as e:
            print("# %s refused: %s" % (name, str(e).splitlines()[0][:160]), flush=True)
    one = torch.ones(1, device="cuda")
    return (lambda: torch._scaled_mm(a8, w8.t(), scale_a=one[0], scale_b=one[0], out_dtype=torch.bfloat16),
            "torch._scaled_mm per-tensor")


def block_cases(pack):
    """Block-scaled fp8 (specs/gemm_fp8_block.lua): e4m3 data, fp32 scales per 1x128 block of x
    and per 128x128 block of the weight, against torch's blockwise fp8 GEMM."""
    for M, N, K in ((8192, 8192, 8192), (4096, 7168, 2048), (4096, 2048, 7168)):
        a8, sa = block_quant(torch.randn(M, K, device="cuda"), 1, 128)
        w8, ws = block_quant(torch.randn(N, K, device="cuda") * K ** -0.5, 128, 128)
        y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        peer, peer_name = block_scaled_peer(a8, sa, w8, ws)
        yield dict(name="gemm_fp8_block", M=M, N=N, K=K, plan=pack.plan("gemm_fp8_block", "K=%d,N=%d" % (K, N)),
                   kiln=dict(a=a8, b=w8.t(), sa=sa, sb=ws.t().contiguous(), y=y), out=y, peer=peer, peer_name=peer_name,
                   # (the per-tensor peer computes another product: its error is not checked)
                   peer_checked=not peer_name.endswith("per-tensor"),
                   ref=lambda a8=a8, sa=sa, w8=w8, ws=ws: (a8.float() * expand(sa, 1, 128)) @ (w8.float() * expand(ws, 128, 128)).t())


def zipf_counts(T, E, s=1.1, align=16):
    """T tokens over E experts with Zipf weights (expert order shuffled), each count a multiple
    of `align` (torch._grouped_mm's alignment), summing to T."""
    w = torch.tensor([1.0 / (r + 1) ** s for r in range(E)])[torch.randperm(E)]
    c = (w / w.sum() * (T // align)).floor().long() * align
    c[int(torch.argmax(w))] += T - int(c.sum())
    return c


def grouped_cases(pack):
    """Grouped GEMMs (specs/gemm_moe.lua: one launch over the experts, offsets on the device)
    against torch._grouped_mm, tokens routed unevenly (Zipf)."""
    for E, N, K, T in ((8, 1536, 4096, 8192), (8, 4096, 7168, 16384), (64, 1536, 4096, 65536), (64, 4096, 7168, 65536)):
        counts = zipf_counts(T, E)
        ends = counts.cumsum(0).to(torch.int32).cuda()
        starts = torch.cat([torch.zeros(1, dtype=torch.int32, device="cuda"), ends[:-1]])
        x, w = bf16(T, K), bf16(E, N, K, scale=K ** -0.5)
        wt = w.transpose(1, 2)  # [E, K, N], K-major
        y = torch.empty(T, N, device="cuda", dtype=torch.bfloat16)

        def ref(x=x, w=w, counts=counts):
            return torch.cat([xs.float() @ we.float().t() for xs, we in zip(x.split(counts.tolist()), w)])
        yield dict(name="gemm_moe", M=T, N=N, K=K, plan=pack.plan("gemm_moe", "E=%d,K=%d,N=%d" % (E, K, N)),
                   kiln=dict(x=x, w=wt, offsets=starts, y=y), out=y,
                   peer=lambda x=x, wt=wt, ends=ends: torch._grouped_mm(x, wt, offs=ends, out_dtype=torch.bfloat16),
                   peer_name="torch._grouped_mm", ref=ref, shape="%dx%dx%d E%d" % (T, N, K, E))


# The case generators and the names of the cases each yields: --only runs the one that has it
# (a generator plans all of its cases, so its specs must be in the pack).
GENERATORS = ((cases, ("gemm_bf16", "gemm_bias_gelu", "gemm_swiglu", "gemm_residual", "gemm_gated_mlp", "gemm_fp8")),
              (block_cases, ("gemm_fp8_block",)), (grouped_cases, ("gemm_moe",)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    torch.manual_seed(int(time.time()))
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 references are fp32
    pack = kiln.Pack(args.pack)
    dev = torch.cuda.get_device_name()
    print("device %s" % dev)
    rows = []
    gens = [gen for gen, names in GENERATORS if not args.only or args.only in names]
    for c in itertools.chain.from_iterable(gen(pack) for gen in gens):
        if args.only and c["name"] != args.only:
            continue
        plan, kw = c["plan"], c["kiln"]
        run_kiln = lambda plan=plan, kw=kw: plan(**kw)  # noqa: E731
        run_kiln()
        peer_out = c["peer"]()
        torch.cuda.synchronize()
        ref = c["ref"]()
        err = rel_l2(c["out"], ref)
        peer_err = rel_l2(peer_out, ref) if c.get("peer_checked", True) else float("nan")
        del ref, peer_out
        note = ""
        ok = err <= TOL
        if "extra" in c:
            what, got, want = c["extra"]()
            ok = ok and got == want
            note = " %s %s (max |y| %s)" % (what, got, want)
        t_kiln, t_peer = time_ms(run_kiln), time_ms(c["peer"])
        flops = c.get("flops", 2.0 * c["M"] * c["N"] * c["K"])
        tf = lambda ms: flops / (ms * 1e-3) / 1e12  # noqa: E731
        plan_ids = ",".join(k.plan_id for k in plan.kernels if not k.plan_id.endswith(":init"))
        row = dict(case=c["name"], shape=c.get("shape", "%dx%dx%d" % (c["M"], c["N"], c["K"])), kiln_ms=t_kiln, peer=c["peer_name"],
                   peer_ms=t_peer, kiln_tflops=tf(t_kiln), peer_tflops=tf(t_peer), vs_peer=t_peer / t_kiln,
                   rel_l2=err, peer_rel_l2=peer_err, agrees=ok, plan=plan_ids)
        rows.append(row)
        print("%-15s %-16s kiln %.3f ms %6.1f TFLOP/s | %s %.3f ms %6.1f TFLOP/s | x%.2f | rel L2 %.2e (peer %.2e)%s %s [%s]"
              % (row["case"], row["shape"], t_kiln, row["kiln_tflops"], c["peer_name"], t_peer, row["peer_tflops"],
                 row["vs_peer"], err, peer_err, note, "ok" if ok else "WRONG", plan_ids), flush=True)
    os.makedirs(args.out, exist_ok=True)
    if not rows:
        return 1
    with open(os.path.join(args.out, "bench_gemm.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) + ["device"])
        w.writeheader()
        for r in rows:
            w.writerow(dict(r, device=dev))
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
