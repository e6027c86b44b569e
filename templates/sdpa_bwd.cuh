// kiln attention engine, backward (sm_80 and later): ${what}.
// FlashAttention-2's backward over mma.sync m16n8k16 (fp32 accumulation), ldmatrix and cp.async.
// A CTA holds BN keys of one (batch, k/v head) in shared memory, 16 a warp, and walks the blocks
// of BM query rows that see them, for each q head of the GQA group: S^T = K Q^T and dP^T = V dO^T
// into registers, P^T = exp2(s sl2 - L2) (L2: the forward's Stats in log2 units, +inf on rows
// that take no gradient), dS^T = P^T (dP^T - Dsum); dV += P^T dO and dK += dS^T Q from those
// registers (their layout is the A fragment's), dS^T through shared memory into dQ = dS K, a
// warp a 16-row by D/WC block, added into the fp32 workspace (red.add, or under
// DETERMINISTIC in key-block order behind a per-tile counter). Q, dO, L2 and Dsum of the next
// query block are copied under the current one's products (two buffers).

extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${symbol}(${params}) {
  constexpr int BM = ${BM}, BN = ${BN}, D = ${D}, THREADS = ${THREADS}, WARPS = BN / 16;
  constexpr bool DETERMINISTIC = ${DETERMINISTIC};
${setup}
  constexpr int P_ = (D + 8) * 2, SP = (BM + 8) * 2;  // shared row pitches (bytes): K V Q dO, dS^T
  constexpr kiln_u32 KV_BYTES = BN * P_, QO_BYTES = BM * P_;
  constexpr int WR = BM / 16, WC = WARPS / WR, DC = D / WC;  // the dQ product: warps by rows, columns
  static_assert(D % 16 == 0 && BM % 16 == 0 && WARPS % WR == 0 && DC % 16 == 0, "sdpa_bwd: tile shape");
  extern __shared__ __align__(16) kiln_u8 kiln_smem[];
  const kiln_u32 sk = kiln_smem_u32(kiln_smem), sv = sk + KV_BYTES, sq = sv + KV_BYTES, sdo = sq + 2 * QO_BYTES,
                 sds = sdo + 2 * QO_BYTES, sl = sds + BN * SP;  // sl: [buffer][L2 | Dsum][BM] floats
  const float *l2s = reinterpret_cast<const float *>(kiln_smem + (sl - sk));
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, c2 = 2 * (lane & 3);
  const int n = blockIdx.x, b = (int)(blockIdx.y / HK), hk = (int)(blockIdx.y % HK), n0 = n * BN;
  constexpr int G = HQ / HK;
  int lq, lk, delta;
  lengths(b, lq, lk, delta);
  // the query blocks [mlo, mhi) whose rows see keys of this block (as kv_blocks sees it from theirs)
  const int n_m = (int)((SQ + BM - 1) / BM);
  int mlo = n_m, mhi = 0;
  for (int mb = 0; mb < n_m; mb++) {
    int jlo, jhi;
    kv_blocks(mb * BM, lq, lk, delta, BN, jlo, jhi);
    if (jlo <= n && n < jhi) {
      mlo = mb < mlo ? mb : mlo;
      mhi = mb + 1;
    }
  }
  const int nm = mhi > mlo ? mhi - mlo : 0, steps = G * nm;
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int nb = 0; nb < D / 8; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[nb][e] = dv[nb][e] = 0.0f;
  const kiln_i64 rows = B * HQ * SQ;
  const float *l2g = ws + rows * D, *dsg = l2g + rows;
  kiln_u32 *sem = reinterpret_cast<kiln_u32 *>(ws + rows * (D + 3));
  (void)sem;
  // step s: q head hk G + s / nm, query block mlo + s % nm, into buffer buf
  auto load_step = [&](int s, int buf) {
    const int hq = hk * G + s / nm, m0 = (mlo + s % nm) * BM;
    kiln_sdpa_load_rows<BM, D, P_, THREADS>(sq + buf * QO_BYTES, gq + (kiln_i64)b * q_sb + (kiln_i64)hq * q_sh, q_ss,
                                            m0, lq, t);
    kiln_sdpa_load_rows<BM, D, P_, THREADS>(sdo + buf * QO_BYTES, gdo + (kiln_i64)b * do_sb + (kiln_i64)hq * do_sh,
                                            do_ss, m0, lq, t);
    if (t < 2 * BM) {
      const int r = t % BM;
      const kiln_i64 at = ((kiln_i64)b * HQ + hq) * SQ + m0 + r;
      const bool in = m0 + r < SQ;
      kiln_cp_async4(sl + (kiln_u32)((buf * 2 + t / BM) * BM + r) * 4, (t < BM ? l2g : dsg) + (in ? at : 0), in ? 4u : 0u);
    }
  };
  if (steps > 0) {
    kiln_sdpa_load_rows<BN, D, P_, THREADS>(sk, gk + (kiln_i64)b * k_sb + (kiln_i64)hk * k_sh, k_ss, n0, lk, t);
    kiln_sdpa_load_rows<BN, D, P_, THREADS>(sv, gv + (kiln_i64)b * v_sb + (kiln_i64)hk * v_sh, v_ss, n0, lk, t);
    load_step(0, 0);
    kiln_cp_async_commit();
  }
  // ldmatrix row addresses of this lane: K, V as A (the warp's 16 keys); Q, dO as B (queries by
  // lane / 16, k halves by lane / 8); Q, dO transposed as B over queries; dS^T transposed as A
  // (queries by lane / 8, keys by lane / 16); K transposed as B over keys
  const kiln_u32 a_lane = (kiln_u32)((warp * 16 + (lane & 15)) * P_ + (lane >> 4) * 16);
  const kiln_u32 b_lane = (kiln_u32)(((lane >> 4) * 8 + (lane & 7)) * P_ + ((lane >> 3) & 1) * 16);
  const kiln_u32 bt_lane = (kiln_u32)((((lane >> 3) & 1) * 8 + (lane & 7)) * P_ + (lane >> 4) * 16);
  const int rg = warp % WR, cg = warp / WR;
  const kiln_u32 ds_lane = sds + (kiln_u32)(((lane >> 4) * 8 + (lane & 7)) * SP + (((lane >> 3) & 1) * 8 + rg * 16) * 2);
#pragma unroll 1
  for (int s = 0; s < steps; s++) {
    const int buf = s & 1, hq = hk * G + s / nm, mb = mlo + s % nm, m0 = mb * BM;
    if (s + 1 < steps) load_step(s + 1, buf ^ 1);  // its buffer's last reader passed the previous step's barrier
    kiln_cp_async_commit();
    kiln_cp_async_wait<1>();
    __syncthreads();
    const kiln_u32 qb = sq + buf * QO_BYTES, ob = sdo + buf * QO_BYTES;
    const float *l2 = l2s + buf * 2 * BM, *dsum = l2 + BM;
    // S^T = K Q^T and dP^T = V dO^T: the warp's 16 keys by BM queries
    float st[BM / 8][4], dp[BM / 8][4];
#pragma unroll
    for (int nb = 0; nb < BM / 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) st[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      kiln_u32 ak[4], av[4];
      kiln_ldmatrix_x4(ak, sk + a_lane + ks * 32);
      kiln_ldmatrix_x4(av, sv + a_lane + ks * 32);
#pragma unroll
      for (int pp = 0; pp < BM / 16; pp++) {
        kiln_u32 bq[4], bo[4];
        kiln_ldmatrix_x4(bq, qb + b_lane + pp * 16 * P_ + ks * 32);
        kiln_mma_${MMA_T}(st[2 * pp], ak, bq[0], bq[1]);
        kiln_mma_${MMA_T}(st[2 * pp + 1], ak, bq[2], bq[3]);
        kiln_ldmatrix_x4(bo, ob + b_lane + pp * 16 * P_ + ks * 32);
        kiln_mma_${MMA_T}(dp[2 * pp], av, bo[0], bo[1]);
        kiln_mma_${MMA_T}(dp[2 * pp + 1], av, bo[2], bo[3]);
      }
    }
    // P^T and dS^T (scores of keys j, queries i); masked pairs get P = 0
    const bool masked = needs_mask(m0, n0, BN, lk, delta);
#pragma unroll
    for (int nb = 0; nb < BM / 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int qi = nb * 8 + c2 + (e & 1), kj = n0 + warp * 16 + g + 8 * (e >> 1);
        const float y = score(st[nb][e]);
        float p = kiln_exp2(fmaf(y, sl2, -l2[qi]));
        if (masked && !keep(m0 + qi, kj, lk, delta)) p = 0.0f;
        float ds = p * (dp[nb][e] - dsum[qi]);
        if (SOFTCAP) {
          const float tc = y * cap_inv;
          ds *= 1.0f - tc * tc;
        }
        st[nb][e] = p;
        dp[nb][e] = ds;
      }
    // dV += P^T dO, dK += dS^T Q (k over queries: the accumulators' layout is the A fragment's)
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
      kiln_u32 pa[4], da[4];
      pa[0] = ${PACK}(st[2 * kk][0], st[2 * kk][1]);
      pa[1] = ${PACK}(st[2 * kk][2], st[2 * kk][3]);
      pa[2] = ${PACK}(st[2 * kk + 1][0], st[2 * kk + 1][1]);
      pa[3] = ${PACK}(st[2 * kk + 1][2], st[2 * kk + 1][3]);
      da[0] = ${PACK}(dp[2 * kk][0], dp[2 * kk][1]);
      da[1] = ${PACK}(dp[2 * kk][2], dp[2 * kk][3]);
      da[2] = ${PACK}(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      da[3] = ${PACK}(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
      // dS^T to shared memory for dQ: rows g, g + 8 of the warp's keys, queries of this k step
      kiln_st_shared_b32(sds + (kiln_u32)((warp * 16 + g) * SP + (kk * 16 + c2) * 2), da[0]);
      kiln_st_shared_b32(sds + (kiln_u32)((warp * 16 + g + 8) * SP + (kk * 16 + c2) * 2), da[1]);
      kiln_st_shared_b32(sds + (kiln_u32)((warp * 16 + g) * SP + (kk * 16 + 8 + c2) * 2), da[2]);
      kiln_st_shared_b32(sds + (kiln_u32)((warp * 16 + g + 8) * SP + (kk * 16 + 8 + c2) * 2), da[3]);
#pragma unroll
      for (int pp = 0; pp < D / 16; pp++) {
        kiln_u32 bo[4], bq[4];
        kiln_ldmatrix_x4_trans(bo, ob + bt_lane + kk * 16 * P_ + pp * 32);
        kiln_mma_${MMA_T}(dv[2 * pp], pa, bo[0], bo[1]);
        kiln_mma_${MMA_T}(dv[2 * pp + 1], pa, bo[2], bo[3]);
        kiln_ldmatrix_x4_trans(bq, qb + bt_lane + kk * 16 * P_ + pp * 32);
        kiln_mma_${MMA_T}(dk[2 * pp], da, bq[0], bq[1]);
        kiln_mma_${MMA_T}(dk[2 * pp + 1], da, bq[2], bq[3]);
      }
    }
    __syncthreads();  // dS^T complete; Q and dO of this buffer no longer read
    // dQ = dS K: rows rg * 16 of the block, columns cg * DC
    float dq[DC / 8][4];
#pragma unroll
    for (int nb = 0; nb < DC / 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) dq[nb][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      kiln_u32 a[4];
      kiln_ldmatrix_x4_trans(a, ds_lane + kk * 16 * SP);
#pragma unroll
      for (int pp = 0; pp < DC / 16; pp++) {
        kiln_u32 bk[4];
        kiln_ldmatrix_x4_trans(bk, sk + bt_lane + kk * 16 * P_ + (cg * DC / 16 + pp) * 32);
        kiln_mma_${MMA_T}(dq[2 * pp], a, bk[0], bk[1]);
        kiln_mma_${MMA_T}(dq[2 * pp + 1], a, bk[2], bk[3]);
      }
    }
    float *acc = ws + (((kiln_i64)b * HQ + hq) * SQ + m0 + rg * 16 + g) * D + cg * DC + c2;
    const int live = lq - (m0 + rg * 16 + g);  // rows past lq take no gradient
    if constexpr (DETERMINISTIC) {
      // key blocks add into a query block's dQ in their order: block jlo first, each after the last
      int jlo, jhi;
      kv_blocks(m0, lq, lk, delta, BN, jlo, jhi);
      kiln_u32 *turn = sem + ((kiln_i64)b * HQ + hq) * n_m + mb;
      if (t == 0) kiln_turn_wait(turn, n - jlo);
      __syncthreads();
#pragma unroll
      for (int nb = 0; nb < DC / 8; nb++)
#pragma unroll
        for (int r = 0; r < 2; r++)
          if (8 * r < live) {
            kiln_add2_cg(acc + (kiln_i64)8 * r * D + nb * 8, dq[nb][2 * r], dq[nb][2 * r + 1]);
          }
      __threadfence();
      __syncthreads();
      if (t == 0) kiln_turn_pass(turn, n - jlo + 1);
    } else {
#pragma unroll
      for (int nb = 0; nb < DC / 8; nb++)
#pragma unroll
        for (int r = 0; r < 2; r++)
          if (8 * r < live) kiln_red_add2(acc + (kiln_i64)8 * r * D + nb * 8, dq[nb][2 * r], dq[nb][2 * r + 1]);
    }
  }
  // dK (times the scale) and dV of the warp's keys; keys past lk (or seen by no query) get 0
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int kj = n0 + warp * 16 + g + 8 * r;
    if (kj < SKV) {
      kiln_u16 *pk = gdk + (kiln_i64)b * dk_sb + (kiln_i64)hk * dk_sh + (kiln_i64)kj * dk_ss + c2;
      kiln_u16 *pv = gdv + (kiln_i64)b * dv_sb + (kiln_i64)hk * dv_sh + (kiln_i64)kj * dv_ss + c2;
#pragma unroll
      for (int nb = 0; nb < D / 8; nb++) {
        *reinterpret_cast<kiln_u32 *>(pk + nb * 8) = ${PACK}(dk[nb][2 * r] * scale, dk[nb][2 * r + 1] * scale);
        *reinterpret_cast<kiln_u32 *>(pv + nb * 8) = ${PACK}(dv[nb][2 * r], dv[nb][2 * r + 1]);
      }
    }
  }
}
