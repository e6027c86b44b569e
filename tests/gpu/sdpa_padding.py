#!/usr/bin/env python3
"""sdpa under a padding mask (tests/specs/gpu/sdpa_padding.lua) with the K and V rows past
each sequence's seq_len_kv set to NaN: O's rows within seq_len_q must equal an fp32 torch
reference over the keys within the length, with no NaN. O poisoned before each launch.
TAP on stdout. Usage: sdpa_padding.py LABEL=PACK ..."""
import sys

import torch
from tap import finish, ok  # this folder: TAP lines; puts the kiln package on the path
import kiln  # after tap

HQ, HK, D = 4, 2, 128
SCALE = 0.088


def reference(q, k, v, lq, lk):
    o = torch.zeros(q.shape[0], HQ, q.shape[2], D, device="cuda")
    for b in range(q.shape[0]):
        qb = q[b, :, :lq[b]].float()
        kb = k[b, :, :lk[b]].float().repeat_interleave(HQ // HK, 0)
        vb = v[b, :, :lk[b]].float().repeat_interleave(HQ // HK, 0)
        o[b, :, :lq[b]] = torch.softmax(qb @ kb.transpose(1, 2) * SCALE, -1) @ vb
    return o


def check(pk, B, S, SK, gen, label):
    plan = pk.plan("padding")
    q = torch.randn(B, HQ, S, D, generator=gen, device="cuda").bfloat16()
    k = torch.randn(B, HK, SK, D, generator=gen, device="cuda").bfloat16()
    v = torch.randn(B, HK, SK, D, generator=gen, device="cuda").bfloat16()
    lq = torch.randint(1, S + 1, (B,), generator=gen, device="cuda", dtype=torch.int32)
    lk = torch.randint(1, SK + 1, (B,), generator=gen, device="cuda", dtype=torch.int32)
    lk[0] = SK - 1  # one key of padding: inside the last block of every tile size
    lq_h, lk_h = lq.tolist(), lk.tolist()
    for b in range(B):
        k[b, :, lk_h[b]:] = float("nan")
        v[b, :, lk_h[b]:] = float("nan")
    o = torch.full((B, HQ, S, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan(q=q, kk=k, v=v, lq=lq.view(B, 1, 1, 1), lk=lk.view(B, 1, 1, 1), o=o)
    torch.cuda.synchronize()
    want = reference(q, k, v, lq_h, lk_h)
    nan = sum(int(torch.isnan(o[b, :, :lq_h[b]]).sum().item()) for b in range(B))
    err = max(float((o[b, :, :lq_h[b]].float() - want[b, :, :lq_h[b]]).abs().max().item()) for b in range(B))
    what = "%s B=%d S=%d SK=%d (lengths q %s, kv %s)" % (label, B, S, SK, lq_h, lk_h)
    ok(nan == 0, "%s: no NaN in O's rows within seq_len_q (%d)" % (what, nan))
    ok(err <= 2e-2, "%s: O within 2e-2 of the fp32 reference (max diff %.3g)" % (what, err))


def main():
    gen = torch.Generator(device="cuda")
    gen.manual_seed(2026)
    for arg in sys.argv[1:]:
        label, _, path = arg.partition("=")
        pk = kiln.Pack(path)
        for B, S, SK in ((3, 200, 333), (2, 128, 256), (2, 17, 1000), (1, 1, 130)):
            check(pk, B, S, SK, gen, label)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
