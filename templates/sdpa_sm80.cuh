// kiln attention engine, portable path (sm_80 and later): ${what}.
// FlashAttention-2 over mma.sync m16n8k16 (fp32 accumulation), ldmatrix and cp.async.
// Persistent, 384 threads: tiles of BM = 128 query rows of one (batch, q head) in the order
// tile_of gives, a CTA taking one a wave (wave_tile). Warps 0-7 own 16 rows each: S = Q K^T,
// the online softmax and O in registers, P passed from the S accumulators straight into A
// fragments (the layouts coincide), V read with ldmatrix.trans. Warps 8-11 copy with cp.async
// the tile's Q (one buffer) and its blocks of KB keys into a ring of STAGES stages of K and V,
// zero-filling rows past seq_len (padding never reaches the products).
// K and V of a block are separate groups, and the CTA meets twice a block: at A (K of u has
// landed; V of u + STAGES - 1 is then copied) and B (V of u has landed; K of u + STAGES is
// then copied), so V's copy runs under S and K's under P V. Rows are padded by 16 bytes
// (ldmatrix's 8 rows fall in distinct banks); Q stays in registers up to D = 128.

${tmaps}
extern "C" __global__ void __launch_bounds__(384, 1) ${symbol}(${params}) {
  constexpr int BM = ${BM}, BN = ${BN}, STAGES = ${STAGES}, D = ${D}, DV = ${DV};
${setup}
  constexpr int KB = BN;  // keys a stage holds (the engine's mma_keys)
  constexpr bool Q_REGS = D <= 128;  // Q's A fragments stay in registers, else ldmatrix per k-step
  constexpr int QP = (D + 8) * 2, VP = (DV + 8) * 2;  // shared row pitches in bytes
  constexpr kiln_u32 Q_BYTES = BM * QP, K_BYTES = KB * QP, V_BYTES = KB * VP;
  constexpr int NB = KB / 8;  // n8 blocks of S
  static_assert(D % 16 == 0 && DV % 16 == 0 && KB % 16 == 0 && BM == 128, "sdpa_sm80: tile shape");
  extern __shared__ __align__(16) kiln_u8 kiln_smem[];
  const kiln_u32 sq = kiln_smem_u32(kiln_smem), sk = sq + Q_BYTES, sv = sk + STAGES * K_BYTES;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  // the CTA barrier, reached by the copying and the mma warps from different code (not .aligned)
  auto cta_sync = []() { kiln_cta_sync(384); };
  kiln_u32 it = 0;  // key blocks the CTA has visited: block u of a tile sits in stage (it + u) % STAGES
#pragma unroll 1
  for (kiln_i64 w = 0; w < n_waves; w++) {
    const kiln_i64 tile = wave_tile(w);
    if (tile >= n_tiles) continue;
    int b, hq, m0, lq, lk, delta, jlo, jhi;
    tile_of(tile, b, hq, m0);
    lengths(b, lq, lk, delta);
    kv_blocks(m0, lq, lk, delta, KB, jlo, jhi);
    const int n = jhi - jlo;
    if (warp >= BM / 16) {
      // ---- warps 8-11 copy. Groups in the order Q with K0, V0, K1, V1, ...: STAGES - 1 blocks
      // ahead of the one read, each copy after the barrier past which no warp reads its stage.
      // The next tile's first copies follow the last barrier B: Q and K are read before it, and
      // its V stages are not the one the last P V reads.
      if (n > 0) {
        const int ct = t - BM / 16 * 32;
        const kiln_u16 *k = gk + (kiln_i64)b * k_sb + (kiln_i64)(hq / (HQ / HK)) * k_sh;
        const kiln_u16 *v = gv + (kiln_i64)b * v_sb + (kiln_i64)(hq / (HQ / HV)) * v_sh;
        // a group per call, empty past the tile's last block, so every wait counts the same
        auto load_k = [&](int u) {
          if (u < n) kiln_sdpa_load_rows<KB, D, QP>(sk + (it + u) % STAGES * K_BYTES, k, k_ss, (jlo + u) * KB, lk, ct);
          kiln_cp_async_commit();
        };
        auto load_v = [&](int u) {
          if (u < n) kiln_sdpa_load_rows<KB, DV, VP>(sv + (it + u) % STAGES * V_BYTES, v, v_ss, (jlo + u) * KB, lk, ct);
          kiln_cp_async_commit();
        };
        kiln_sdpa_load_rows<BM, D, QP>(sq, gq + (kiln_i64)b * q_sb + (kiln_i64)hq * q_sh, q_ss, m0, lq, ct);
        load_k(0);
#pragma unroll
        for (int s = 1; s < STAGES; s++) {
          load_v(s - 1);
          load_k(s);
        }
#pragma unroll 1
        for (int u = 0; u < n; u++) {
          kiln_cp_async_wait<2 * (STAGES - 1)>();
          cta_sync();  // A: K of block u (and Q) landed; V of block u - 1 is no longer read
          load_v(u + STAGES - 1);
          kiln_cp_async_wait<2 * (STAGES - 1)>();
          cta_sync();  // B: V of block u landed; K of block u and Q are no longer read
          load_k(u + STAGES);
        }
      }
    } else {
      // ---- warps 0-7: rows r0 and r0 + 8 of the tile, columns c0 and c0 + 1 of each n8 block
      const float NEG_INF = -__int_as_float(0x7f800000);
      const int r0 = warp * 16 + (lane >> 2), c0 = 2 * (lane & 3);
      float o[DV / 8][4];  // O over DV columns (m16n8 accumulator blocks)
      float m[2] = { NEG_INF, NEG_INF }, l[2] = { 0.0f, 0.0f };  // running max (score units), row sums
#pragma unroll
      for (int nb = 0; nb < DV / 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[nb][e] = 0.0f;
      if (n > 0) {
        // ldmatrix row addresses of this lane: Q (A: rows 0-15, k halves by lane / 16), K (B of
        // two n8 blocks: keys by lane / 16, k halves by lane / 8), V (transposed: keys by lane / 8,
        // dv halves by lane / 16)
        const kiln_u32 q_lane = sq + (kiln_u32)((warp * 16 + (lane & 15)) * QP + (lane >> 4) * 16);
        const kiln_u32 k_lane = sk + (kiln_u32)(((lane >> 4) * 8 + (lane & 7)) * QP + ((lane >> 3) & 1) * 16);
        const kiln_u32 v_lane = sv + (kiln_u32)((((lane >> 3) & 1) * 8 + (lane & 7)) * VP + (lane >> 4) * 16);
        kiln_u32 qf[Q_REGS ? D / 16 : 1][4];
#pragma unroll 1
        for (int u = 0; u < n; u++) {
          const kiln_u32 stage = (it + u) % STAGES;
          cta_sync();  // A
          if constexpr (Q_REGS) {
            if (u == 0) {
#pragma unroll
              for (int ks = 0; ks < D / 16; ks++) kiln_ldmatrix_x4(qf[ks], q_lane + ks * 32);
            }
          }
          // S = Q K^T
          float s[NB][4];
#pragma unroll
          for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nb][e] = 0.0f;
#pragma unroll
          for (int ks = 0; ks < D / 16; ks++) {
            kiln_u32 a[4];
            if constexpr (Q_REGS) {
#pragma unroll
              for (int e = 0; e < 4; e++) a[e] = qf[ks][e];
            } else {
              kiln_ldmatrix_x4(a, q_lane + ks * 32);
            }
#pragma unroll
            for (int pp = 0; pp < KB / 16; pp++) {
              kiln_u32 bk[4];
              kiln_ldmatrix_x4(bk, k_lane + stage * K_BYTES + pp * 16 * QP + ks * 32);
              kiln_mma_${MMA_T}(s[2 * pp], a, bk[0], bk[1]);
              kiln_mma_${MMA_T}(s[2 * pp + 1], a, bk[2], bk[3]);
            }
          }
          // the online softmax: score, mask, the new max, p = exp2(x sl2 - m sl2), O rescaled
          const int j0 = (jlo + u) * KB;
          if (SCORE_FN) {
#pragma unroll
            for (int nb = 0; nb < NB; nb++)
#pragma unroll
              for (int e = 0; e < 4; e++) s[nb][e] = score(s[nb][e]);
          }
          if (needs_mask(m0, j0, KB, lk, delta)) {
#pragma unroll
            for (int nb = 0; nb < NB; nb++)
#pragma unroll
              for (int e = 0; e < 4; e++)
                if (!keep(m0 + r0 + 8 * (e >> 1), j0 + 8 * nb + c0 + (e & 1), lk, delta)) s[nb][e] = NEG_INF;
          }
          float mx[2] = { m[0], m[1] };
#pragma unroll
          for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[nb][e]);
          float ms[2], corr[2], sum[2] = { 0.0f, 0.0f };
#pragma unroll
          for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            ms[r] = mx[r] == NEG_INF ? 0.0f : mx[r] * sl2;  // a row with no key yet: exp2(-inf - 0) = 0
            corr[r] = kiln_exp2(m[r] * sl2 - ms[r]);
            m[r] = mx[r];
          }
#pragma unroll
          for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
              s[nb][e] = kiln_exp2(fmaf(s[nb][e], sl2, -ms[e >> 1]));
              sum[e >> 1] += s[nb][e];
            }
#pragma unroll
          for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + sum[r];
#pragma unroll
          for (int nb = 0; nb < DV / 8; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[nb][e] *= corr[e >> 1];
          // P's A fragment of k-step kk: (row r0, keys c0, c0 + 1), (r0 + 8, same), then keys + 8
          kiln_u32 p[KB / 16][4];
#pragma unroll
          for (int kk = 0; kk < KB / 16; kk++) {
            p[kk][0] = ${PACK}(s[2 * kk][0], s[2 * kk][1]);
            p[kk][1] = ${PACK}(s[2 * kk][2], s[2 * kk][3]);
            p[kk][2] = ${PACK}(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            p[kk][3] = ${PACK}(s[2 * kk + 1][2], s[2 * kk + 1][3]);
          }
          cta_sync();  // B
          // O += P V
#pragma unroll
          for (int kk = 0; kk < KB / 16; kk++)
#pragma unroll
            for (int pp = 0; pp < DV / 16; pp++) {
              kiln_u32 bv[4];
              kiln_ldmatrix_x4_trans(bv, v_lane + stage * V_BYTES + kk * 16 * VP + pp * 32);
              kiln_mma_${MMA_T}(o[2 * pp], p[kk], bv[0], bv[1]);
              kiln_mma_${MMA_T}(o[2 * pp + 1], p[kk], bv[2], bv[3]);
            }
        }
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
          for (int nb = 0; nb < DV / 8; nb++) store_o(b, hq, row, 8 * nb + c0, o[nb][2 * r] * f, o[nb][2 * r + 1] * f);
        }
      }
    }
    it += n;
  }
}
