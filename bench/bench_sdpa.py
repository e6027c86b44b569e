#!/usr/bin/env python3
"""kiln's forward sdpa beside torch's cuDNN and FlashAttention-2 backends, one process, the same tensors.

Shapes of the attention issue (BHSD bf16, scale 1/sqrt(D), inference: no Stats); each case's O
is compared with cuDNN's (both bf16 outputs of fp32 math: max abs difference) before timing.
Times are medians of CUDA-graph replays (bench.side_by_side); TFLOP/s count 4 B Hq Sq Skv D,
halved under a causal mask. Decode cases (1 or 4 new tokens against a cache of Skv keys, no
mask) count GB/s of K and V read once (2 B Hkv Skv D x 2 bytes) and go to sdpa_decode.csv. Usage:

    python3 bench/bench_sdpa.py --pack build/sdpa.kpack --out DIR [--rounds N] [--only prefill|decode]
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
                           extra=[("--only", {"choices": ["prefill", "decode"], "help": "one half of the cases"})])
    pack = kiln.Pack(args.pack)
    rows = []
    for graph, B, H, HK, S, D, causal in (CASES if args.only != "decode" else []):
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
    drows = decode_cases(pack, args.rounds) if args.only != "prefill" else []
    if drows:
        bench.write_csv(args.out, "sdpa_decode.csv", drows)
    return 0 if all(r["check"] == "ok" for r in rows + drows) else 1


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
