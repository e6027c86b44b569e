#!/usr/bin/env python3
"""kiln's causal conv1d beside a copy of the same bytes and FLA's Triton kernels, one process, the same tensors.

Cases (tests/specs/conv1d/bench.lua): width 4, bf16, D = 8192, x channel-last ([B, T, D] as FLA
takes it, seen by kiln as [B, D, T] through its strides), silu, bias:
  fwd      B4 x T4096 and B1 x T32768: x read, y written ([B, D, T], the IR's output layout);
  bwd      the same sizes: x and dout read, dx written (dweight and dbias are D x 5 values);
  update   the decode update, B = 256 sequences of one token: x, the conv state (W - 1 = 3 steps)
           read, y and the new state written.
Each case's result is checked against torch (F.conv1d with groups = D, padding W - 1, sliced;
the backward through autograd in fp32) before timing; a mismatch fails the run. pct_copy = the
case's minimal bytes over kiln's time, as a share of a torch copy of as many bytes
(bench.same_copy_tbs, timed the same way). peer = FLA (fla.modules.causal_conv1d: causal_conv1d,
causal_conv1d_bwd, causal_conv1d_update; its Triton autotuning before timing), ratio = its time
over kiln's (> 1: kiln faster); without FLA (the wheels in .whl) kiln is timed against the copy
alone. Times are medians over interleaved rounds of CUDA-graph replays. Writes conv1d.csv
(case, plan, kiln_us, peer, peer_us, ratio, pct_copy, max_err, check). Each --cand pack (the
spec built with KILN_PLAN forcing a candidate) is timed too, a row per case whose plan differs
from those already timed (rows carry their plan ids). Usage:

    python3 bench/bench_conv1d.py --pack build/conv1d.kpack --out DIR [--cand PACK]... [--rounds N] [--only fwd|bwd|update]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bench  # noqa: E402
import kiln  # noqa: E402

try:
    from fla.modules.causal_conv1d import causal_conv1d as fla_conv, causal_conv1d_bwd as fla_bwd
    from fla.modules.causal_conv1d import causal_conv1d_update as fla_update
    HAVE_FLA = True
except Exception as e:  # noqa: BLE001 (any import failure: kiln against the copy alone)
    print("FLA not importable (%s): kiln against the copy alone" % e, flush=True)
    HAVE_FLA = False

D, W = 8192, 4
SIZES = [(4, 4096), (1, 32768)]
B_UPDATE = 256
TOL = 2e-2  # max |kiln - torch| over max |torch|, bf16 outputs of fp32 math
SEEN = set()  # the plans timed (the update's as ("update", id): a forward tile plan may run it too)


def rel_err(got, ref):
    ref = ref.float()
    return ((got.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def torch_conv(xt, w, b, h0=None):
    """silu(causal conv) of xt [B, D, T] (fp32), history h0 [B, D, W-1] or zeros."""
    T = xt.shape[2]
    if h0 is not None:
        xt = torch.cat([h0.float(), xt], dim=2)
        z = F.conv1d(xt, w.float().unsqueeze(1), b.float(), groups=D)
    else:
        z = F.conv1d(xt, w.float().unsqueeze(1), b.float(), padding=W - 1, groups=D)[..., :T]
    return F.silu(z)


def peer_of(fn):
    """[fn] when FLA runs this case (its first call autotunes), else [] (kiln against the copy alone)."""
    if not HAVE_FLA:
        return []
    try:
        fn()
        torch.cuda.synchronize()
        return [fn]
    except Exception as e:  # noqa: BLE001 (FLA refusing a case is not kiln's failure)
        print("FLA fails this case (%s): kiln alone" % e, flush=True)
        return []


def row(case, plan, times, nbytes, peer, err):
    kiln_us = times[0] * 1e3
    copy = bench.same_copy_tbs(nbytes)
    pct = 100.0 * nbytes / (times[0] * 1e-3) / 1e12 / copy
    ok = err < TOL
    r = {"case": case, "plan": plan, "kiln_us": "%.1f" % kiln_us, "peer": peer if len(times) > 1 else "",
         "peer_us": "%.1f" % (times[1] * 1e3) if len(times) > 1 else "",
         "ratio": "%.3f" % (times[1] / times[0]) if len(times) > 1 else "",
         "pct_copy": "%.0f%%" % pct, "max_err": "%.2g" % err, "check": "ok" if ok else "MISMATCH"}
    print("%-28s kiln %8.1f us  %3.0f%% of copy  %s %s (%sx)  err %.2g %s  [%s]" % (
        case, kiln_us, pct, r["peer"] or "-", r["peer_us"] or "-", r["ratio"] or "-", err, r["check"], plan), flush=True)
    return r


def forward_cases(pack, rounds):
    plan = pack.plan("conv1d_fwd")
    rows = []
    if plan.kernels[0].plan_id in SEEN:
        return rows
    SEEN.add(plan.kernels[0].plan_id)
    for B, T in SIZES:
        x = torch.randn(B, T, D, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(D, W, device="cuda", dtype=torch.bfloat16) / 2
        b = torch.randn(D, device="cuda", dtype=torch.bfloat16) / 2
        y = torch.full((B, D, T), float("nan"), device="cuda", dtype=torch.bfloat16)
        xt = x.transpose(1, 2)  # [B, D, T] with channels contiguous

        def run_kiln():
            plan(x=xt, w=w, b=b, y=y)
        run_kiln()
        err = rel_err(y, torch_conv(xt.float(), w, b))

        def run_fla():
            return fla_conv(x, weight=w, bias=b, activation="silu")
        fns, peer = [run_kiln] + peer_of(run_fla), "fla.causal_conv1d"
        times = bench.side_by_side(fns, rounds)
        rows.append(row("fwd B%d T%d D%d" % (B, T, D), plan.kernels[0].plan_id, times, 2 * x.numel() * 2, peer, err))
        del x, y, xt
        torch.cuda.empty_cache()
    return rows


def backward_cases(pack, rounds):
    plan = pack.plan("conv1d_bwd")
    rows = []
    if plan.kernels[0].plan_id in SEEN:
        return rows
    SEEN.add(plan.kernels[0].plan_id)
    for B, T in SIZES:
        x = torch.randn(B, T, D, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(B, T, D, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(D, W, device="cuda", dtype=torch.bfloat16) / 2
        b = torch.randn(D, device="cuda", dtype=torch.bfloat16) / 2
        dx = torch.full((B, D, T), float("nan"), device="cuda", dtype=torch.bfloat16)
        dw = torch.full((D, W), float("nan"), device="cuda", dtype=torch.bfloat16)
        db = torch.full((D,), float("nan"), device="cuda", dtype=torch.bfloat16)
        xt, dyt = x.transpose(1, 2), dy.transpose(1, 2)

        def run_kiln():
            plan(x=xt, w=w, b=b, dy=dyt, dx=dx, dw=dw, db=db)
        run_kiln()
        xf = xt.float().requires_grad_()
        wf, bf = w.float().requires_grad_(), b.float().requires_grad_()
        torch_conv(xf, wf, bf).backward(dyt.float())
        err = max(rel_err(dx, xf.grad), rel_err(dw, wf.grad), rel_err(db, bf.grad))
        del xf, wf, bf

        def run_fla():
            return fla_bwd(x=x, dy=dy, dht=None, weight=w, bias=b, activation="silu")
        fns, peer = [run_kiln] + peer_of(run_fla), "fla.causal_conv1d_bwd"
        times = bench.side_by_side(fns, rounds)
        rows.append(row("bwd B%d T%d D%d" % (B, T, D), plan.kernels[0].plan_id, times, 3 * x.numel() * 2, peer, err))
        del x, dy, dx, xt, dyt
        torch.cuda.empty_cache()
    return rows


def update_cases(pack, rounds):
    plan = pack.plan("conv1d_update")
    if ("update", plan.kernels[0].plan_id) in SEEN:
        return []
    SEEN.add(("update", plan.kernels[0].plan_id))
    B = B_UPDATE
    x = torch.randn(B, 1, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, W, device="cuda", dtype=torch.bfloat16) / 2
    b = torch.randn(D, device="cuda", dtype=torch.bfloat16) / 2
    h0 = torch.randn(B, D, W - 1, device="cuda", dtype=torch.bfloat16)
    y = torch.full((B, D, 1), float("nan"), device="cuda", dtype=torch.bfloat16)
    fin = torch.full((B, D, W - 1), float("nan"), device="cuda", dtype=torch.bfloat16)
    xt = x.transpose(1, 2)

    def run_kiln():
        plan(x=xt, w=w, b=b, h0=h0, y=y, fin=fin)
    run_kiln()
    err = max(rel_err(y, torch_conv(xt.float(), w, b, h0)), rel_err(fin, torch.cat([h0, xt], dim=2)[..., 1:]))
    cache = torch.randn(B, D, W, device="cuda", dtype=torch.bfloat16)  # FLA's state holds W steps

    def run_fla():
        return fla_update(x, cache, weight=w, bias=b, activation="silu")
    fns, peer = [run_kiln] + peer_of(run_fla), "fla.causal_conv1d_update"
    times = bench.side_by_side(fns, rounds)
    # x and y, the state read and written: 2 + 2 (W - 1) elements a (sequence, channel)
    return [row("update B%d L1 D%d" % (B, D), plan.kernels[0].plan_id, times, (2 + 2 * (W - 1)) * B * D * 2, peer, err)]


def main():
    args = bench.pack_args(__doc__, out="build/bench-conv1d",
                           extra=[("--only", {"choices": ["fwd", "bwd", "update"], "help": "one group of cases"}),
                                  ("--cand", {"action": "append", "default": [], "help": "a candidate plan's pack"})])
    rows = []
    for path in [args.pack] + args.cand:
        pack = kiln.Pack(path)
        for name, fn in (("fwd", forward_cases), ("bwd", backward_cases), ("update", update_cases)):
            if args.only in (None, name):
                rows += fn(pack, args.rounds)
    if rows:
        bench.write_csv(args.out, "conv1d.csv", rows)
    return 0 if all(r["check"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
