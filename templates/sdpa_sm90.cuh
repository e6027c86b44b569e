// kiln attention engine, sm_90a: ${what}.
// Persistent and warp-specialized, 384 threads: tiles of BM = 128 query rows of one (batch,
// q head) in the order tile_of gives, a CTA taking one a wave (wave_tile).
// Warpgroup 0 (${REG_PRODUCER} registers): one thread copies with TMA each tile's Q (BM rows, one
// buffer) and its key blocks' K and V (BN rows each) into a ring of STAGES stages; boxes of
// 64 elements (128 bytes, 128-byte swizzle), so a row of D elements is D/64 boxes BN * 128
// bytes apart. Warpgroups 1 and 2 (${REG_CONSUMER} registers) own rows 0-63 and 64-127 of the
// tile: S = Q K^T by wgmma from shared memory (K-major), the online softmax on S in
// registers, O += P V by wgmma with P from registers (the accumulator layout is the A
// fragment's) and V MN-major. Block j + 1's S is issued with block j's P V and its softmax
// runs while that product is in flight; with PINGPONG the two warpgroups take turns issuing
// (named barriers 1 and 2) so one's exps run under the other's products.
// Barriers (8 bytes each): full_q, empty_q, then full_k[s], empty_k[s], full_v[s], empty_v[s];
// an empty barrier completes when the 8 consumer warps have arrived (a warp arrives once its
// wgmma reading the stage has completed).
${tmaps}
extern "C" __global__ void __launch_bounds__(384, 1) ${symbol}(${params}) {
  constexpr int BM = ${BM}, BN = ${BN}, STAGES = ${STAGES}, D = ${D}, DV = ${DV};
  constexpr int DB = (D + 63) / 64, DVB = (DV + 63) / 64;  // 128-byte boxes per row
  constexpr kiln_u32 Q_BYTES = BM * 128 * DB, K_BYTES = BN * 128 * DB, V_BYTES = BN * 128 * DVB;
  constexpr bool PINGPONG = ${PINGPONG};
  constexpr kiln_u32 TURN = 1;  // named barriers TURN + h: consumer warpgroup h may issue
  constexpr kiln_u32 ZERO = 3;  // named barrier: the last block's padding rows of V are zero
${setup}
  extern __shared__ __align__(1024) kiln_u8 kiln_smem[];
  const kiln_u32 sq = (kiln_smem_u32(kiln_smem) + 1023u) & ~1023u;
  const kiln_u32 sk = sq + Q_BYTES, sv = sk + STAGES * K_BYTES, bars = sv + STAGES * V_BYTES;
  const kiln_u32 full_q = bars, empty_q = bars + 8;
  auto full_k = [&](kiln_u32 s) { return bars + 16 + 8 * s; };
  auto empty_k = [&](kiln_u32 s) { return bars + 16 + 8 * (STAGES + s); };
  auto full_v = [&](kiln_u32 s) { return bars + 16 + 8 * (2 * STAGES + s); };
  auto empty_v = [&](kiln_u32 s) { return bars + 16 + 8 * (3 * STAGES + s); };
  if (threadIdx.x == 0) {
    kiln_mbar_init(full_q, 1);
    kiln_mbar_init(empty_q, 8);
#pragma unroll 1
    for (int s = 0; s < STAGES; s++) {
      kiln_mbar_init(full_k(s), 1);
      kiln_mbar_init(empty_k(s), 8);
      kiln_mbar_init(full_v(s), 1);
      kiln_mbar_init(empty_v(s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
  if (wg == 0) {
    // ---- producer: one thread, the CTA's tiles in order, each tile's Q then its K and V blocks
    kiln_setmaxnreg_dec<${REG_PRODUCER}>();
    if (t == 0) {
      kiln_tma_prefetch(&${TM_Q});
      kiln_tma_prefetch(&${TM_K});
      kiln_tma_prefetch(&${TM_V});
      kiln_u32 it = 0, tq = 0;  // key blocks and tiles issued
#pragma unroll 1
      for (kiln_i64 w = 0; w < n_waves; w++) {
        const kiln_i64 tile = wave_tile(w);
        if (tile >= n_tiles) continue;
        int b, hq, m0, lq, lk, delta, jlo, jhi;
        tile_of(tile, b, hq, m0);
        lengths(b, lq, lk, delta);
        kv_blocks(m0, lq, lk, delta, BN, jlo, jhi);
        if (jhi <= jlo) continue;
        const int hk = hq / (HQ / HK), hv = hq / (HQ / HV);
        kiln_mbar_wait(empty_q, (tq & 1) ^ 1);
        kiln_mbar_expect_tx(full_q, Q_BYTES);
#pragma unroll
        for (int db = 0; db < DB; db++) kiln_tma_load_4d(sq + db * BM * 128, &${TM_Q}, db * 64, m0, hq, b, full_q);
        tq++;
#pragma unroll 1
        for (int j = jlo; j < jhi; j++, it++) {
          const kiln_u32 s = it % STAGES, phase = ((it / STAGES) & 1) ^ 1;
          kiln_mbar_wait(empty_k(s), phase);
          kiln_mbar_expect_tx(full_k(s), K_BYTES);
#pragma unroll
          for (int db = 0; db < DB; db++)
            kiln_tma_load_4d(sk + s * K_BYTES + db * BN * 128, &${TM_K}, db * 64, j * BN, hk, b, full_k(s));
          kiln_mbar_wait(empty_v(s), phase);
          kiln_mbar_expect_tx(full_v(s), V_BYTES);
#pragma unroll
          for (int db = 0; db < DVB; db++)
            kiln_tma_load_4d(sv + s * V_BYTES + db * BN * 128, &${TM_V}, db * 64, j * BN, hv, b, full_v(s));
        }
      }
    }
  } else {
    // ---- consumers: warpgroup h holds rows 64 h .. 64 h + 63 of each tile
    kiln_setmaxnreg_inc<${REG_CONSUMER}>();
    const int h = wg - 1, lane = t & 31, warp = t >> 5;
    const float NEG_INF = -__int_as_float(0x7f800000);
    float s[BN / 2];       // S of one block: accumulator i of n8 block nb at row r0 + 8 ((i >> 1) & 1), col 8 nb + 2 (lane % 4) + (i & 1)
    kiln_u32 p[BN / 4];    // P as the A fragments of BN / 16 k-steps
    float o[DV / 2];       // O, the accumulator layout over DV columns
    float m[2] = { NEG_INF, NEG_INF }, l[2] = { 0.0f, 0.0f };  // running max (score units), row sums
    kiln_u32 it = 0, tq = 0;
    int steps = 0;         // turns taken on the tensor cores (PINGPONG)
    auto turn_wait = [&]() {
      if (PINGPONG && (h == 1 || steps > 0)) kiln_bar_sync(TURN + h, 256);
    };
    auto turn_pass = [&]() {
      if (PINGPONG) kiln_bar_arrive(TURN + (h ^ 1), 256);
      steps++;
    };
    auto qk = [&](kiln_u32 stage) {
      kiln_wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < D / 16; ks++) {
        const kiln_u64 da = kiln_wgmma_desc(sq + (ks / 4) * BM * 128 + h * 64 * 128 + (ks % 4) * 32, 16, 1024);
        const kiln_u64 db = kiln_wgmma_desc(sk + stage * K_BYTES + (ks / 4) * BN * 128 + (ks % 4) * 32, 16, 1024);
        if (ks == 0) kiln_wgmma_qk_first(s, da, db);
        else kiln_wgmma_qk(s, da, db);
      }
      kiln_wgmma_commit();
    };
    auto pv = [&](kiln_u32 stage) {
      kiln_wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < BN / 16; ks++) {
        const kiln_u32 a[4] = { p[4 * ks], p[4 * ks + 1], p[4 * ks + 2], p[4 * ks + 3] };
        kiln_wgmma_pv(o, a, kiln_wgmma_desc(sv + stage * V_BYTES + ks * 2048, BN * 128, 1024));
      }
      kiln_wgmma_commit();
    };
    // the softmax of block j on s: mask, new max, the rescale factor of what came before (corr),
    // s <- exp2(x sl2 - m sl2) and its row sums added to l after the rescale
    const int r0 = h * 64 + warp * 16 + (lane >> 2), c0 = 2 * (lane & 3);
    // (masked: a constant at every call, so that a block without the mask has no branch between
    // the waits, across which ptxas would wait for the in-flight P V)
    auto softmax = [&](int m0, int j, int lk, int delta, float (&corr)[2], bool masked) {
      if (SCORE_FN) {
#pragma unroll
        for (int i = 0; i < BN / 2; i++) s[i] = score(s[i]);
      }
      if (masked) {
#pragma unroll
        for (int i = 0; i < BN / 2; i++)
          if (!keep(m0 + r0 + 8 * ((i >> 1) & 1), j * BN + 8 * (i >> 2) + c0 + (i & 1), lk, delta)) s[i] = NEG_INF;
      }
      float mx[2] = { m[0], m[1] };
#pragma unroll
      for (int i = 0; i < BN / 2; i++) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
      float ms[2];
#pragma unroll
      for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        ms[r] = mx[r] == NEG_INF ? 0.0f : mx[r] * sl2;
        corr[r] = kiln_exp2(m[r] * sl2 - ms[r]);
        m[r] = mx[r];
      }
      float sum[2] = { 0.0f, 0.0f };
#pragma unroll
      for (int i = 0; i < BN / 2; i++) {
        s[i] = kiln_exp2(fmaf(s[i], sl2, -ms[(i >> 1) & 1]));
        sum[(i >> 1) & 1] += s[i];
      }
#pragma unroll
      for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + sum[r];
    };
    auto to_p = [&]() {
#pragma unroll
      for (int i = 0; i < BN / 4; i++) p[i] = ${PACK}(s[2 * i], s[2 * i + 1]);
    };
    auto rescale = [&](const float (&corr)[2]) {
#pragma unroll
      for (int i = 0; i < DV / 2; i++) o[i] *= corr[(i >> 1) & 1];
    };
    auto release = [&](kiln_u32 bar) { if (lane == 0) kiln_mbar_arrive(bar); };
#pragma unroll 1
    for (kiln_i64 w = 0; w < n_waves; w++) {
      const kiln_i64 tile = wave_tile(w);
      if (tile >= n_tiles) continue;
      int b, hq, m0, lq, lk, delta, jlo, jhi;
      tile_of(tile, b, hq, m0);
      lengths(b, lq, lk, delta);
      kv_blocks(m0, lq, lk, delta, BN, jlo, jhi);
      const int n = jhi - jlo;
#pragma unroll
      for (int i = 0; i < DV / 2; i++) o[i] = 0.0f;
      m[0] = m[1] = NEG_INF;
      l[0] = l[1] = 0.0f;
      if (n > 0) {
        float corr[2];
        kiln_mbar_wait(full_q, tq & 1);
        // block jlo: S alone
        turn_wait();
        kiln_mbar_wait(full_k(it % STAGES), (it / STAGES) & 1);
        qk(it % STAGES);
        turn_pass();
        kiln_wgmma_wait<0>();
        kiln_reg_fence(s);
        release(empty_k(it % STAGES));
        if (n == 1) release(empty_q);
        softmax(m0, jlo, lk, delta, corr, true);
        to_p();
        // blocks jlo + jj: a masked prefix (a left bound), unmasked ones, a masked suffix (the
        // right bound, the keys' end); each run is its own loop
        int lo_end = jlo + 1, hi_start = jhi;
        while (lo_end < jhi && needs_mask(m0, lo_end * BN, BN, lk, delta)) lo_end++;
        while (hi_start > lo_end && needs_mask(m0, (hi_start - 1) * BN, BN, lk, delta)) hi_start--;
        auto step = [&](int jj, bool masked) {
          const kiln_u32 cur = (it + jj) % STAGES, prev = (it + jj - 1) % STAGES;
          turn_wait();
          kiln_mbar_wait(full_k(cur), ((it + jj) / STAGES) & 1);
          qk(cur);
          kiln_reg_fence(o);
          rescale(corr);  // O to the previous block's max, while the tensor cores run S
          kiln_mbar_wait(full_v(prev), ((it + jj - 1) / STAGES) & 1);
          pv(prev);
          turn_pass();
          kiln_wgmma_wait<1>();  // S of block jlo + jj is done, P V of the one before may run on
          kiln_reg_fence(s);
          release(empty_k(cur));
          if (jj == n - 1) release(empty_q);
          softmax(m0, jlo + jj, lk, delta, corr, masked);
          kiln_reg_fence(s);  // the exps before the wait below: they run under P V
          kiln_reg_fence(l);
          kiln_wgmma_wait<0>();
          kiln_reg_fence(o);
          kiln_reg_fence(p);
          release(empty_v(prev));
          to_p();
        };
        int jj = 1;
#pragma unroll 1
        for (; jlo + jj < lo_end; jj++) step(jj, true);
#pragma unroll 1
        for (; jlo + jj < hi_start; jj++) step(jj, false);
#pragma unroll 1
        for (; jj < n; jj++) step(jj, true);
        // the last block's P V; its V rows from lk on lie inside the tensor when a padding
        // length ends the keys early (the copies zero-fill past the tensor only): warpgroup 0
        // zeroes them, since P's zeros there would still take a NaN or Inf of V into O
        const kiln_u32 last = (it + n - 1) % STAGES;
        if (jhi * BN > lk && lk < SKV) {
          kiln_mbar_wait(full_v(last), ((it + n - 1) / STAGES) & 1);
          if (h == 0) {
            const int z0 = lk - (jhi - 1) * BN, per_row = 8 * DVB;  // 16-byte chunks of a key's row over the boxes
#pragma unroll 1
            for (int i = t; i < (BN - z0) * per_row; i += 128) {
              const int row = z0 + i / per_row, box = (i % per_row) / 8, chunk = i % 8;
              kiln_st_shared_v4(sv + last * V_BYTES + box * BN * 128 + row * 128 + chunk * 16, 0u, 0u, 0u, 0u);
            }
            kiln_fence_proxy_async();  // the zeros before the tensor cores' reads
          }
          kiln_bar_sync(ZERO, 256);
        }
        turn_wait();
        rescale(corr);
        kiln_mbar_wait(full_v(last), ((it + n - 1) / STAGES) & 1);
        pv(last);
        turn_pass();
        kiln_wgmma_wait<0>();
        kiln_reg_fence(o);
        kiln_reg_fence(p);
        release(empty_v(last));
        it += n;
        tq++;
      }
      // the rows' ends: l over the 4 lanes of a row, statistics, O scaled and stored
#pragma unroll
      for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int row = m0 + r0 + 8 * r;
        float f = 0.0f;
        if (row < SQ && (lane & 3) == 0) f = row_end(b, hq, row, m[r], l[r], row >= lq);
        f = __shfl_sync(0xffffffffu, f, lane & ~3);
        if (row < SQ) {
#pragma unroll
          for (int nb = 0; nb < DV / 8; nb++) store_o(b, hq, row, 8 * nb + c0, o[4 * nb + 2 * r] * f, o[4 * nb + 2 * r + 1] * f);
        }
      }
    }
    // the turn the other warpgroup passed after its last issue
    if (PINGPONG && h == 0 && steps > 0) kiln_bar_sync(TURN, 256);
  }
}
