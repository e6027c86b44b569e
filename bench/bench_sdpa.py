#!/usr/bin/env python3
"""kiln's forward sdpa beside torch's cuDNN and FlashAttention-2 backends, one process, the same tensors.

Shapes of the attention issue (BHSD bf16, scale 1/sqrt(D), inference: no Stats); each case's O
is compared with cuDNN's (both bf16 outputs of fp32 math: max abs difference) before timing.
Times are medians of CUDA-graph replays (bench.side_by_side); TFLOP/s count 4 B Hq Sq Skv D,
halved under a causal mask. Decode cases (1 or 4 new tokens against a cache of Skv keys, no
mask) count GB/s of K and V read once (2 B Hkv Skv D x 2 bytes) and go to sdpa_decode.csv.
Backward cases (dQ, dK, dV from kiln's forward O and Stats and a random dO) beside torch's
backward through autograd on each backend, 2.5x the forward's FLOPs, checked against an fp32
autograd reference on a slice of heads, go to sdpa_bwd.csv; the deterministic plan is timed
beside the default one. Usage:

    python3 bench/bench_sdpa.py --pack build/sdpa.kpack --out DIR [--rounds N] [--only prefill|decode|backward]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import bench  # noqa: E402
import kiln  # noqa: E402

# (graph, B, Hq, Hkv, S, D, causal)
CASES = [
    ("sdpa_full", 4, 16, 16, 4096, 128, False),
    ("sdpa_causal", 4, 16, 16, 4096, 128, True),
    ("sdpa_full", 8, 16, 16, 2048, 64, False),
    ("sdpa_causal", 1, 16, 16, 16384, 128, True),
    ("sdpa_gqa_causal", 1, 64, 8, 8192, 128, True),
    ("sdpa_full", 4, 16, 16, 4096, 256, False),
    ("sdpa_gqa32_causal", 4, 32, 8, 2048, 128, True),
    ("sdpa_gqa32_causal", 16, 32, 8, 512, 128, True),
    ("sdpa_full", 32, 16, 16, 1024, 64, False),
]

# backward: (graph, B, Hq, Hkv, S, D, causal)
BACKWARD = [
    ("sdpa_train_full", 4, 16, 16, 4096, 128, False),
    ("sdpa_train_causal", 4, 16, 16, 4096, 128, True),
    ("sdpa_train_full", 8, 16, 16, 2048, 64, False),
    ("sdpa_train_causal", 1, 16, 16, 16384, 128, True),
    ("sdpa_train_gqa_causal", 1, 64, 8, 8192, 128, True),
]

# (B, Hq, Hkv, Sq, Skv): Llama-3 8B (32/8) from one sequence to a batch of 64, 70B (64/8), MHA
DECODE = [
    (1, 32, 8, 1, 8192),
    (1, 32, 8, 1, 131072),
    (16, 32, 8, 1, 4096),
    (64, 32, 8, 1, 2048),
    (8, 64, 8, 1, 32768),
    (8, 32, 8, 4, 8192),
    (8, 16, 16, 1, 8192),
]
# paged decode (pages of 16 keys in a random order, full lengths) beside the peers' dense
# decode of the same sizes: (B, Skv)
PAGED = [(16, 8192), (64, 2048)]


def peer(backend, q, k, v, causal, gqa):
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    return run


def main():
    args = bench.pack_args(__doc__, out="build/bench-sdpa",
                           extra=[("--only", {"choices": ["prefill", "decode", "backward"], "help": "one half of the cases"})])
    pack = kiln.Pack(args.pack)
    rows = []
    for graph, B, H, HK, S, D, causal in (CASES if args.only in (None, "prefill") else []):
        inst = "D=%d,H=%d,HK=%d" % (D, H, HK)
        plan = pack.plan(graph, inst)
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, HK, S, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, HK, S, D, device="cuda", dtype=torch.bfloat16)
        o = torch.full((B, H, S, D), float("nan"), device="cuda", dtype=torch.bfloat16)
        gqa = H != HK

        def run_kiln():
            plan(q=q, kk=k, v=v, o=o)
        cudnn = peer(SDPBackend.CUDNN_ATTENTION, q, k, v, causal, gqa)
        flash = peer(SDPBackend.FLASH_ATTENTION, q, k, v, causal, gqa)
        run_kiln()
        ref = cudnn()
        torch.cuda.synchronize()
        diff = (o.float() - ref.float()).abs()
        err = diff.max().item()
        ok = err < 3e-2 and not torch.isnan(o).any().item()
        try:
            flash()
            have_fa2 = True
        except RuntimeError:
            have_fa2 = False
        fns = [run_kiln, cudnn] + ([flash] if have_fa2 else [])
        times = bench.side_by_side(fns, args.rounds)
        flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        tf = [flops / (t * 1e-3) / 1e12 for t in times]
        name = "%s B%d H%d/%d S%d d%d" % ("causal" if causal else "full", B, H, HK, S, D)
        row = {"case": name, "plan": plan.kernels[0].plan_id, "kiln_ms": "%.4f" % times[0],
               "kiln_TFLOPs": "%.0f" % tf[0], "cudnn_ms": "%.4f" % times[1], "cudnn_TFLOPs": "%.0f" % tf[1],
               "x_cudnn": "%.3f" % (times[1] / times[0]),
               "fa2_TFLOPs": "%.0f" % tf[2] if have_fa2 else "", "x_fa2": "%.3f" % (times[2] / times[0]) if have_fa2 else "",
               "max_abs_vs_cudnn": "%.3g" % err, "check": "ok" if ok else "MISMATCH"}
        rows.append(row)
        print("%-32s kiln %7.3f ms %4.0f TFLOP/s  cuDNN %4.0f (%.2fx)  FA2 %s  |O-cuDNN| %.3g %s  [%s]" % (
            name, times[0], tf[0], tf[1], times[1] / times[0], row["fa2_TFLOPs"] or "-", err,
            row["check"], row["plan"]), flush=True)
        del q, k, v, o, ref
        torch.cuda.empty_cache()
    if rows:
        bench.write_csv(args.out, "sdpa.csv", rows)
    drows = decode_cases(pack, args.rounds) if args.only in (None, "decode") else []
    if drows:
        bench.write_csv(args.out, "sdpa_decode.csv", drows)
    brows = backward_cases(pack, args.rounds) if args.only in (None, "backward") else []
    if brows:
        bench.write_csv(args.out, "sdpa_bwd.csv", brows)
    return 0 if all(r["check"] == "ok" for r in rows + drows + brows) else 1


def reference_grads(q, k, v, dO, causal, heads=2):
    """dQ, dK, dV of the first `heads` k/v heads' q heads in fp32 autograd (the math backend)."""
    G = q.shape[1] // k.shape[1]
    qs = q[:, :heads * G].float().requires_grad_(True)
    ks = k[:, :heads].float().requires_grad_(True)
    vs = v[:, :heads].float().requires_grad_(True)
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, enable_gqa=G > 1)
    return torch.autograd.grad(o, (qs, ks, vs), dO[:, :heads * G].float())


def rel_err(got, ref):
    """max |got - ref| over max |ref|."""
    return ((got.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def timed(fns, rounds):
    """bench.side_by_side, or where a peer's backward cannot be captured in a CUDA graph (a host
    sync in autograd), medians of batches of launches timed by events for every function alike."""
    try:
        return bench.side_by_side(fns, rounds)
    except RuntimeError as e:
        print("# CUDA graph capture failed (%s): timing by events" % str(e).split("\n")[0], flush=True)
        torch.cuda.synchronize()
        return [bench.time_ms(fn) for fn in fns]


def backward_cases(pack, rounds):
    rows = []
    for graph, B, H, HK, S, D, causal in BACKWARD:
        inst = "D=%d,H=%d,HK=%d" % (D, H, HK)
        fwd, bwd, det = (pack.plan(graph + x, inst) for x in ("_fwd", "_bwd", "_bwd_det"))
        q, dO = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(B, HK, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        o = torch.empty(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        stats = torch.empty(B, H, S, 1, device="cuda", dtype=torch.float32)
        fwd(q=q, kk=k, v=v, o=o, stats=stats)
        grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]

        def run(plan):
            return lambda: plan(q=q, kk=k, v=v, o=o, dO=dO, stats=stats, dq=grads[0], dk=grads[1], dv=grads[2])
        run_kiln, run_det = run(bwd), run(det)
        run_kiln()
        ref = reference_grads(q, k, v, dO, causal)
        G = H // HK
        err = max(rel_err(g[:, :2 * G] if i == 0 else g[:, :2], r) for i, (g, r) in enumerate(zip(grads, ref)))
        first = [g.clone() for g in grads]
        run_det()
        det_a = [g.clone() for g in grads]
        run_det()
        same = all(torch.equal(a, b) for a, b in zip(det_a, grads))
        err = max(err, max(rel_err(g, f.float()) for g, f in zip(grads, first)))
        ok = err < 2e-2 and same and not any(torch.isnan(g).any().item() for g in grads)
        peers = []
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            qq, kk, vv = (x.detach().requires_grad_(True) for x in (q, k, v))
            try:
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, enable_gqa=H != HK)

                def fn(out=out, qq=qq, kk=kk, vv=vv):
                    return torch.autograd.grad(out, (qq, kk, vv), dO, retain_graph=True)
                fn()
                torch.cuda.synchronize()
                peers.append((name, fn))
            except RuntimeError:
                pass
        times = timed([run_kiln, run_det] + [p[1] for p in peers], rounds)
        flops = 2.5 * 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        tf = [flops / (t * 1e-3) / 1e12 for t in times]
        got = {p[0]: i + 2 for i, p in enumerate(peers)}
        name = "bwd %s B%d H%d/%d S%d d%d" % ("causal" if causal else "full", B, H, HK, S, D)
        row = {"case": name, "plan": bwd.kernels[1].plan_id, "kiln_ms": "%.4f" % times[0], "kiln_TFLOPs": "%.0f" % tf[0],
               "det_ms": "%.4f" % times[1], "det_vs_default": "%.3f" % (times[0] / times[1])}
        for n in ("cudnn", "fa2"):
            i = got.get(n)
            row.update({n + "_ms": "%.4f" % times[i] if i else "", n + "_TFLOPs": "%.0f" % tf[i] if i else "",
                        "x_" + n: "%.3f" % (times[i] / times[0]) if i else ""})
        row["rel_err_vs_fp32"] = "%.3g" % err
        row["deterministic"] = "bitwise" if same else "DIFFERS"
        row["check"] = "ok" if ok else "MISMATCH"
        rows.append(row)
        print("%-32s kiln %7.3f ms %4.0f TFLOP/s (det %.3f ms)  cuDNN %s (%sx)  FA2 %s (%sx)  err %.3g %s %s  [%s]" % (
            name, times[0], tf[0], times[1], row["cudnn_TFLOPs"] or "-", row["x_cudnn"] or "-", row["fa2_TFLOPs"] or "-",
            row["x_fa2"] or "-", err, row["deterministic"], row["check"], row["plan"]), flush=True)
        del q, k, v, o, dO, stats, grads, first, det_a, peers
        torch.cuda.empty_cache()
    return rows


def paged_inputs(k, v):
    """k, v [B, H, Skv, 128] as block containers of 16 keys in a random order and their tables."""
    B, H, SK, D = k.shape
    per = SK // 16
    perm = torch.randperm(B * per, device="cuda")
    table = perm.view(B, 1, per, 1).to(torch.int32)

    def container(x):
        c = torch.empty(B * per, H, 16, D, device="cuda", dtype=x.dtype)
        c[perm] = x.view(B, H, per, 16, D).permute(0, 2, 1, 3, 4).reshape(B * per, H, 16, D)
        return c
    return container(k), container(v), table


def decode_cases(pack, rounds):
    cases = [(B, H, HK, S, SK, False) for B, H, HK, S, SK in DECODE] + [(B, 32, 8, 1, SK, True) for B, SK in PAGED]
    rows = []
    for B, H, HK, S, SK, paged in cases:
        q = torch.randn(B, H, S, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, HK, SK, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, HK, SK, 128, device="cuda", dtype=torch.bfloat16)
        o = torch.full((B, H, S, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
        if paged:
            plan = pack.plan("sdpa_decode_paged_32_8")
            kc, vc, table = paged_inputs(k, v)
            lq = torch.full((B, 1, 1, 1), S, device="cuda", dtype=torch.int32)
            lk = torch.full((B, 1, 1, 1), SK, device="cuda", dtype=torch.int32)

            def run_kiln():
                plan(q=q, kk=kc, v=vc, lq=lq, lk=lk, kt=table, vt=table, o=o)
        else:
            plan = pack.plan("sdpa_decode_%d_%d" % (H, HK), "H=%d,HK=%d,S=%d" % (H, HK, S))

            def run_kiln():
                plan(q=q, kk=k, v=v, o=o)
        gqa = H != HK
        peers = []
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            fn = peer(backend, q, k, v, False, gqa)
            try:
                out = fn()
                torch.cuda.synchronize()
                peers.append((name, fn, out))
            except RuntimeError:
                pass
        run_kiln()
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=gqa)
        torch.cuda.synchronize()
        err = (o.float() - ref).abs().max().item()
        ok = err < 2e-2 and not torch.isnan(o).any().item()
        times = bench.side_by_side([run_kiln] + [p[1] for p in peers], rounds)
        gbs = [2.0 * B * HK * SK * 128 * 2 / (t * 1e-3) / 1e9 for t in times]
        name = "decode%s B%d H%d/%d Sq%d Skv%d d128" % (" paged16" if paged else "", B, H, HK, S, SK)
        row = {"case": name, "plan": plan.kernels[0].plan_id, "kiln_ms": "%.4f" % times[0], "kiln_GBs": "%.0f" % gbs[0]}
        got = {p[0]: i + 1 for i, p in enumerate(peers)}

        def cell(n, f):
            return f(got[n]) if n in got else ""
        row.update({
            "cudnn_ms": cell("cudnn", lambda i: "%.4f" % times[i]), "cudnn_GBs": cell("cudnn", lambda i: "%.0f" % gbs[i]),
            "x_cudnn": cell("cudnn", lambda i: "%.3f" % (times[i] / times[0])),
            "fa2_ms": cell("fa2", lambda i: "%.4f" % times[i]), "fa2_GBs": cell("fa2", lambda i: "%.0f" % gbs[i]),
            "x_fa2": cell("fa2", lambda i: "%.3f" % (times[i] / times[0])),
        })
        row["max_abs_vs_fp32"] = "%.3g" % err
        row["check"] = "ok" if ok else "MISMATCH"
        rows.append(row)
        print("%-36s kiln %7.4f ms %5.0f GB/s  cuDNN %s (%sx)  FA2 %s (%sx)  |O-fp32| %.3g %s  [%s]" % (
            name, times[0], gbs[0], row["cudnn_GBs"] or "-", row["x_cudnn"] or "-", row["fa2_GBs"] or "-",
            row["x_fa2"] or "-", err, row["check"], row["plan"]), flush=True)
        del q, k, v, o, ref, peers
        torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":
    sys.exit(main())
