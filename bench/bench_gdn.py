#!/usr/bin/env python3
"""kiln's Gated DeltaNet forward beside FLA (flash-linear-attention), one process, the same tensors.

Inputs as FlashQLA's benchmark draws them: q and k L2-normalized, g = logsigmoid(randn) / 16
(fp32, log space), beta = sigmoid(randn), an fp32 initial state, K = V = 128, bf16. Cases:
  decode   specs/gdn_decode.lua: 256 sequences of one token, 16/32 heads, states in a pool by
           state_indices updated in place, the L2 norm, safe gate and beta sigmoid in the kernel
           (raw g, b): the state traffic (2 x 64 KB a sequence and head) as a share of a torch
           copy of the same bytes; FLA's fused_recurrent_gated_delta_rule with the same options
           in the kernel (A_log, dt_bias), states gathered for it beforehand.
  forward  tests/specs/gdn/bench.lua: T = 32768 as 1 x 32768 and 4 x 8192, q/k over v heads 16/64,
           16/32, 2/8, initial and final states; FLA's chunk_gated_delta_rule.
kiln's O and final state are checked against FLA's with FLA's metric (relative RMS error <= 5e-3;
FLA's states are K-major [N, HV, K, V], kiln's V-major [N, HV, V, K]); a mismatch fails the run.
Times are medians of CUDA-graph replays (bench.side_by_side), FLA's first calls (Triton
autotuning) before timing. Without FLA (the wheels in .whl) kiln is timed alone. Writes gdn.csv
(case, plan, kiln_us, peer, peer_us, ratio = peer/kiln, pct_copy for decode). Usage:

    python3 bench/bench_gdn.py --pack build/gdn.kpack --out DIR [--rounds N] [--only decode|forward]
        [--decode-pack PACK ...]   (gdn_decode built with another plan: one more decode row each)
        [--forward-pack PACK ...]  (tests/specs/gdn/bench.lua built with another plan: one more
                                    row a forward case each, FLA timed beside it again)
"""
import gc
import os
import sys

os.environ.setdefault("FLA_FLASH_QLA", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bench  # noqa: E402
import kiln  # noqa: E402

try:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    HAVE_FLA = True
except Exception as e:  # noqa: BLE001 (any import failure: kiln alone)
    print("FLA not importable (%s): kiln alone" % e, flush=True)
    HAVE_FLA = False

TOL = 5e-3  # FLA's test ratio for the forward
FORWARD = [(16, 64), (16, 32), (2, 8)]  # q/k heads, v heads
T_FWD = 32768
B_DEC, H_DEC, HV_DEC = 256, 16, 32


def err_ratio(ref, x):
    """FLA's get_err_ratio: RMS of the difference over RMS of the reference."""
    ref, x = ref.float(), x.float()
    return ((ref - x).square().mean().sqrt() / (ref.square().mean().sqrt() + 1e-8)).item()


def inputs(T, H, HV, N):
    """FlashQLA's draws, THD: q, k [T, H, 128] normalized, v [T, HV, 128], g fp32, beta bf16."""
    q = F.normalize(torch.randn(T, H, 128, device="cuda", dtype=torch.float32), p=2, dim=-1).bfloat16()
    k = F.normalize(torch.randn(T, H, 128, device="cuda", dtype=torch.float32), p=2, dim=-1).bfloat16()
    v = torch.randn(T, HV, 128, device="cuda", dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(T, HV, device="cuda", dtype=torch.float32)) / 16
    beta = torch.randn(T, HV, device="cuda", dtype=torch.float32).sigmoid().bfloat16()
    h0 = torch.randn(N, HV, 128, 128, device="cuda", dtype=torch.float32)  # V-major
    return q, k, v, g, beta, h0


def check(name, o, o_ref, s, s_ref):
    """(ok, worst ratio) of kiln's O and state against FLA's; prints the mismatch."""
    eo, es = err_ratio(o_ref, o), err_ratio(s_ref, s)
    bad = not (eo <= TOL and es <= TOL) or torch.isnan(o).any().item() or torch.isnan(s).any().item()
    if bad:
        print("MISMATCH %s: O ratio %.3g, state ratio %.3g (<= %g)" % (name, eo, es, TOL), flush=True)
    return not bad, max(eo, es)


def forward_cases(pack, rounds):
    rows = []
    for H, HV in FORWARD:
        for N in (1, 4):
            plan = pack.plan("gdn_fwd_%d_%d_n%d" % (H, HV, N))
            q, k, v, g, beta, h0 = inputs(T_FWD, H, HV, N)
            cu = torch.arange(0, T_FWD + 1, T_FWD // N, device="cuda", dtype=torch.int32)
            o = torch.full((T_FWD, HV, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
            ht = torch.full_like(h0, float("nan"))

            def run_kiln():
                plan(q=q, k=k, v=v, g=g, b=beta, cu=cu, h0=h0, o=o, final_state=ht)
            run_kiln()
            fns, peer, ok, err = [run_kiln], "", True, float("nan")
            if HAVE_FLA:
                # equal lengths: FLA's batch form [N, T/N, ...] (cu_seqlens would sync the host,
                # which a CUDA graph cannot hold)
                args = dict(initial_state=h0.transpose(-1, -2).contiguous(), output_final_state=True)
                qb, kb, vb, gb, bb = (x.view(N, T_FWD // N, *x.shape[1:]) for x in (q, k, v, g, beta))

                def run_fla():
                    return chunk_gated_delta_rule(qb, kb, vb, gb, bb, **args)
                o_f, ht_f = run_fla()  # the first call autotunes
                torch.cuda.synchronize()
                ok, err = check("forward", o, o_f.reshape(T_FWD, HV, 128), ht, ht_f.transpose(-1, -2))
                fns.append(run_fla)
                peer = "fla.chunk_gated_delta_rule"
            times = timed(fns, rounds)
            name = "forward T%d N%d H%d/%d d128" % (T_FWD, N, H, HV)
            rows.append(row(name, plan, times, peer, ok, err))
            # (a T = 32768 case holds GBs: FLA's chunk states, the split plan's workspace; the
            # next case, and the next pack's, start from a free GPU)
            plan.free_workspaces()
            del q, k, v, g, beta, h0, o, ht, fns, run_kiln
            if HAVE_FLA:
                del o_f, ht_f, run_fla, args, qb, kb, vb, gb, bb
            gc.collect()
            torch.cuda.empty_cache()
    return rows


def decode_case(pack, rounds):
    plan = pack.plan("gdn_decode")
    B, H, HV = B_DEC, H_DEC, HV_DEC
    q, k, v, _, _, _ = inputs(B, H, HV, 1)
    g = torch.randn(B, HV, device="cuda", dtype=torch.float32)  # raw: the safe gate is in the kernel
    b = torch.randn(B, HV, device="cuda", dtype=torch.bfloat16)  # raw: the sigmoid is in the kernel
    a_log = torch.randn(HV, device="cuda", dtype=torch.float32) * 0.5
    dt_bias = torch.randn(HV, device="cuda", dtype=torch.float32) * 0.5
    cu = torch.arange(B + 1, device="cuda", dtype=torch.int32)
    P = 2 * B
    pool0 = torch.randn(P, HV, 128, 128, device="cuda", dtype=torch.float32)
    idx = torch.randperm(P, device="cuda")[:B].to(torch.int32)
    pool = pool0.clone()
    o = torch.full((B, HV, 128), float("nan"), device="cuda", dtype=torch.bfloat16)

    def run_kiln():
        plan(q=q, k=k, v=v, g=g, b=b, cu=cu, pool=pool, idx=idx, a_log=a_log, dt_bias=dt_bias, o=o)
    run_kiln()  # the pool's rows idx now hold the final states
    torch.cuda.synchronize()
    fns, peer, ok, err = [run_kiln], "", True, float("nan")
    untouched = torch.ones(P, dtype=torch.bool, device="cuda")
    untouched[idx.long()] = False
    if not torch.equal(pool[untouched], pool0[untouched]):
        print("MISMATCH decode: rows outside state_indices changed", flush=True)
        ok = False
    if HAVE_FLA:
        h0_f = pool0[idx.long()].transpose(-1, -2).contiguous()  # K-major, gathered
        args = dict(initial_state=h0_f, output_final_state=True, use_qk_l2norm_in_kernel=True,
                    use_gate_in_kernel=True, A_log=a_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True)

        def run_fla():
            return fused_recurrent_gated_delta_rule(q[:, None], k[:, None], v[:, None], g[:, None], beta=b[:, None],
                                                    **args)
        o_f, ht_f = run_fla()
        torch.cuda.synchronize()
        good, err = check("decode", o, o_f[:, 0], pool[idx.long()], ht_f.transpose(-1, -2))
        ok = ok and good
        fns.append(run_fla)
        peer = "fla.fused_recurrent_gated_delta_rule"
    times = timed(fns, rounds)
    state_bytes = 2 * B * HV * 128 * 128 * 4
    r = row("decode B%d H%d/%d d128 pool" % (B, H, HV), plan, times, peer, ok, err)
    copy = bench.same_copy_tbs(state_bytes)
    tbs = state_bytes / (times[0] * 1e-3) / 1e12
    r["pct_copy"] = "%.0f" % (100 * tbs / copy)
    print("  state traffic %.2f TB/s = %.0f%% of a copy of the same bytes (%.2f TB/s)" % (tbs, 100 * tbs / copy, copy),
          flush=True)
    return [r]


def timed(fns, rounds):
    """bench.side_by_side, or (a peer that cannot be captured in a CUDA graph) medians of
    plain launches, each fn alike."""
    try:
        return bench.side_by_side(fns, rounds)
    except RuntimeError as e:
        print("  CUDA graph capture failed (%s): plain launches" % str(e).split("\n")[0], flush=True)
        torch.cuda.synchronize()
        return [bench.time_ms(fn) for fn in fns]


def row(name, plan, times, peer, ok, err):
    r = {"case": name, "plan": plan.kernels[0].plan_id, "kiln_us": "%.1f" % (1e3 * times[0]), "peer": peer,
         "peer_us": "%.1f" % (1e3 * times[1]) if len(times) > 1 else "",
         "ratio": "%.3f" % (times[1] / times[0]) if len(times) > 1 else "", "pct_copy": "",
         "err_ratio": "%.2g" % err, "check": "ok" if ok else "MISMATCH"}
    print("%-32s kiln %9.1f us  %s %s (%sx)  err %s %s  [%s]" % (
        name, 1e3 * times[0], peer or "-", r["peer_us"] or "-", r["ratio"] or "-", r["err_ratio"], r["check"],
        r["plan"]), flush=True)
    return r


def main():
    args = bench.pack_args(__doc__, out="build/bench-gdn",
                           extra=[("--only", {"choices": ["decode", "forward"], "help": "one half of the cases"}),
                                  ("--decode-pack", {"action": "append", "default": [],
                                                     "help": "another pack of gdn_decode (another plan), timed too"}),
                                  ("--forward-pack", {"action": "append", "default": [],
                                                      "help": "another pack of the forward graphs (another plan), timed too"})])
    pack = kiln.Pack(args.pack)
    rows = []
    if args.only != "forward":
        for p in [pack] + [kiln.Pack(x) for x in args.decode_pack]:
            rows += decode_case(p, args.rounds)
    if args.only != "decode":
        for p in [pack] + [kiln.Pack(x) for x in args.forward_pack]:
            rows += forward_cases(p, args.rounds)
    bench.write_csv(args.out, "gdn.csv", rows)
    bad = [r["case"] for r in rows if r["check"] != "ok"]
    if bad:
        print("FAIL: kiln differs from FLA in %s" % ", ".join(bad), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
