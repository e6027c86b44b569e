#!/usr/bin/env python3
"""kiln's forward sdpa beside torch's cuDNN and FlashAttention-2 backends, one process, the same tensors.

Shapes of the attention issue (BHSD bf16, scale 1/sqrt(D), inference: no Stats); each case's O
is compared with cuDNN's (both bf16 outputs of fp32 math: max abs difference) before timing.
Times are medians of CUDA-graph replays (bench.side_by_side); TFLOP/s count 4 B Hq Sq Skv D,
halved under a causal mask. Usage:

    python3 bench/bench_sdpa.py --pack build/sdpa.kpack --out DIR [--rounds N]
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


def peer(backend, q, k, v, causal, gqa):
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    return run


def main():
    args = bench.pack_args(__doc__, out="build/bench-sdpa")
    pack = kiln.Pack(args.pack)
    rows = []
    for graph, B, H, HK, S, D, causal in CASES:
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
    bench.write_csv(args.out, "sdpa.csv", rows)
    return 0 if all(r["check"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
