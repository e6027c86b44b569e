// kiln attention engine, decode path (sm_80 and later), split over the keys: ${what}.
// Work items (batch, k/v head, split): the ROWS = G x SQ query rows of the q heads that share
// the k/v head (GQA packed, row r = q head hk * G + r / SQ, position r % SQ) against one
// split of the band's keys. The grid (at most W CTAs an SM) sets the splits a (batch, head),
// NS, so that the items fill it (kiln_decode_splits, shared with the combine kernel); a batch
// entry's key blocks are dealt evenly over its splits, MIN_BLOCKS at least. A CTA of 4 warps
// takes an item: each warp walks its own key blocks of BN keys (w, w + 4, ...) through a
// private cp.async ring of STAGES, S = Q K^T and O += P V by mma.sync m16n8k16 with its own
// online softmax; the warps' (max, sum, O) meet in shared memory. A batch entry of one split
// gets its O and statistics here; otherwise the split's unnormalized O with its max and sum
// go to the workspace, for ${symbol}_combine.

// Rows [r0, r0 + ROWS) of keys or values (COLS elements; row(r): row r's first element) into
// shared rows PITCH bytes apart, by the 32 lanes of a warp; rows at or past `valid` are
// zero-filled, their addresses never formed (a page table need not name their block).
template <int ROWS, int COLS, int PITCH, class Row>
__device__ __forceinline__ void kiln_sdpa_warp_rows(kiln_u32 dst, Row row, int r0, int valid, int lane,
                                                    const kiln_u16 *any) {
  constexpr int CH = COLS / 8, N = ROWS * CH;
#pragma unroll
  for (int i = 0; i < (N + 31) / 32; i++) {
    const int c = lane + 32 * i;
    if (N % 32 == 0 || c < N) {
      const int r = c / CH, k = c % CH;
      const bool in = r0 + r < valid;
      kiln_cp_async16(dst + (kiln_u32)(r * PITCH + k * 16), (in ? row(r0 + r) : any) + k * 8, in ? 16u : 0u);
    }
  }
}

${splits}

extern "C" __global__ void __launch_bounds__(128, 1) ${symbol}(${params}) {
  constexpr int BM = ${BM}, BN = ${BN}, STAGES = ${STAGES}, D = ${D}, DV = ${DV}, SQR = ${SQ}, MT = ${MT};
${setup}
${kv_rows}
  constexpr int G = HQ / HK, ROWS = G * SQR, WARPS = 4;
  constexpr int QP = (D + 8) * 2, VP = (DV + 8) * 2;  // shared row pitches in bytes (ldmatrix: distinct banks)
  constexpr kiln_u32 Q_BYTES = MT * 16 * QP, K_BYTES = BN * QP, V_BYTES = BN * VP, STAGE = K_BYTES + V_BYTES;
  constexpr int NB = BN / 8, OP = DV + 4;  // n8 blocks of S; the pitch of O's floats where the warps meet
  static_assert(D % 16 == 0 && DV % 16 == 0 && BN % 16 == 0 && ROWS <= MT * 16 && STAGES >= 2, "sdpa_decode: tile shape");
  extern __shared__ __align__(16) kiln_u8 kiln_smem[];
  const kiln_u32 sq = kiln_smem_u32(kiln_smem);
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const kiln_i64 ns = kiln_decode_splits(B, SKV, sms), n_items = B * HK * ns;
  const float NEG_INF = -__int_as_float(0x7f800000);
  const int c0 = 2 * (lane & 3);
#pragma unroll 1
  for (kiln_i64 item = blockIdx.x; item < n_items; item += gridDim.x) {
    const int split = (int)(item % ns), hk = (int)(item / ns % HK), b = (int)(item / ns / HK);
    int lq, lk, delta, jlo, jhi, per, n_split;
    lengths(b, lq, lk, delta);
    kv_blocks(0, lq, lk, delta, BN, jlo, jhi);
    kiln_decode_deal(jhi - jlo, ns, per, n_split);
    if (split >= n_split) continue;
    const int ub = jlo + split * per, ue = ub + per < jhi ? ub + per : jhi;  // this split's key blocks
    __syncthreads();  // the previous item's partials are read
    // Q: rows past ROWS (and positions past SQ) zero-filled
    for (int c = t; c < MT * 16 * (D / 8); c += 128) {
      const int r = c / (D / 8), k = c % (D / 8);
      const int hq = hk * G + r / SQR, s = r % SQR;
      const bool in = r < ROWS && s < SQ;
      kiln_cp_async16(sq + (kiln_u32)(r * QP + k * 16),
                      gq + (in ? (kiln_i64)b * q_sb + (kiln_i64)hq * q_sh + (kiln_i64)s * q_ss : 0) + k * 8, in ? 16u : 0u);
    }
    kiln_cp_async_commit();
    const kiln_u32 sw = sq + Q_BYTES + (kiln_u32)warp * STAGES * STAGE;  // this warp's ring
    auto k_at = [&](int r) { return k_row(b, hk, r); };
    auto v_at = [&](int r) { return v_row(b, hk, r); };
    auto load = [&](int j, int stage) {  // key block j into a stage; a group per call, empty past the split
      if (j < ue) {
        kiln_sdpa_warp_rows<BN, D, QP>(sw + stage * STAGE, k_at, j * BN, lk, lane, gk);
        kiln_sdpa_warp_rows<BN, DV, VP>(sw + stage * STAGE + K_BYTES, v_at, j * BN, lk, lane, gv);
      }
      kiln_cp_async_commit();
    };
    float o[MT][DV / 8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      m[mt][0] = m[mt][1] = NEG_INF;
      l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
      for (int nb = 0; nb < DV / 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[mt][nb][e] = 0.0f;
    }
    // the q position of accumulator row mt * 16 + (lane >> 2) + 8 * h
    auto pos = [&](int mt, int h) { return (mt * 16 + (lane >> 2) + 8 * h) % SQR; };
#pragma unroll
    for (int u = 0; u < STAGES - 1; u++) load(ub + warp + u * WARPS, u);
    kiln_cp_async_wait<STAGES - 1>();
    __syncthreads();  // Q landed for every warp
    const kiln_u32 q_lane = sq + (kiln_u32)((lane & 15) * QP + (lane >> 4) * 16);
    const kiln_u32 k_lane = (kiln_u32)(((lane >> 4) * 8 + (lane & 7)) * QP + ((lane >> 3) & 1) * 16);
    const kiln_u32 v_lane = K_BYTES + (kiln_u32)((((lane >> 3) & 1) * 8 + (lane & 7)) * VP + (lane >> 4) * 16);
    int stage = 0;
#pragma unroll 1
    for (int j = ub + warp; j < ue; j += WARPS, stage = stage + 1 == STAGES ? 0 : stage + 1) {
      load(j + (STAGES - 1) * WARPS, stage == 0 ? STAGES - 1 : stage - 1);
      kiln_cp_async_wait<STAGES - 1>();
      __syncwarp();  // block j landed for every lane
      const kiln_u32 st = sw + stage * STAGE;
      const int j0 = j * BN;
      const bool masked = needs_mask(0, j0, BN, lk, delta);
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        float s[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
          for (int e = 0; e < 4; e++) s[nb][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
          kiln_u32 a[4];
          kiln_ldmatrix_x4(a, q_lane + mt * 16 * QP + ks * 32);
#pragma unroll
          for (int pp = 0; pp < BN / 16; pp++) {
            kiln_u32 bk[4];
            kiln_ldmatrix_x4(bk, st + k_lane + pp * 16 * QP + ks * 32);
            kiln_mma_${MMA_T}(s[2 * pp], a, bk[0], bk[1]);
            kiln_mma_${MMA_T}(s[2 * pp + 1], a, bk[2], bk[3]);
          }
        }
        if (SCORE_FN) {
#pragma unroll
          for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[nb][e] = score(s[nb][e]);
        }
        if (masked) {
#pragma unroll
          for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++)
              if (!keep(pos(mt, e >> 1), j0 + 8 * nb + c0 + (e & 1), lk, delta)) s[nb][e] = NEG_INF;
        }
        float mx[2] = { m[mt][0], m[mt][1] }, ms[2], corr[2], sum[2] = { 0.0f, 0.0f };
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
          for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[nb][e]);
#pragma unroll
        for (int r = 0; r < 2; r++) {
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
          ms[r] = mx[r] == NEG_INF ? 0.0f : mx[r] * sl2;  // a row with no key yet: exp2(-inf - 0) = 0
          corr[r] = kiln_exp2(m[mt][r] * sl2 - ms[r]);
          m[mt][r] = mx[r];
        }
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            s[nb][e] = kiln_exp2(fmaf(s[nb][e], sl2, -ms[e >> 1]));
            sum[e >> 1] += s[nb][e];
          }
#pragma unroll
        for (int r = 0; r < 2; r++) l[mt][r] = l[mt][r] * corr[r] + sum[r];
#pragma unroll
        for (int nb = 0; nb < DV / 8; nb++)
#pragma unroll
          for (int e = 0; e < 4; e++) o[mt][nb][e] *= corr[e >> 1];
        kiln_u32 p[BN / 16][4];  // P's A fragments (the S accumulator layout)
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
          p[kk][0] = ${PACK}(s[2 * kk][0], s[2 * kk][1]);
          p[kk][1] = ${PACK}(s[2 * kk][2], s[2 * kk][3]);
          p[kk][2] = ${PACK}(s[2 * kk + 1][0], s[2 * kk + 1][1]);
          p[kk][3] = ${PACK}(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        }
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
          for (int pp = 0; pp < DV / 16; pp++) {
            kiln_u32 bv[4];
            kiln_ldmatrix_x4_trans(bv, st + v_lane + kk * 16 * VP + pp * 32);
            kiln_mma_${MMA_T}(o[mt][2 * pp], p[kk], bv[0], bv[1]);
            kiln_mma_${MMA_T}(o[mt][2 * pp + 1], p[kk], bv[2], bv[3]);
          }
      }
      __syncwarp();  // every lane is done with the stage the next iteration refills
    }
    kiln_cp_async_wait<0>();
    __syncthreads();  // the stages are free: the warps meet in them
    // per warp: max and sum of each row, then O's floats (row pitch OP)
    float *sm_m = reinterpret_cast<float *>(kiln_smem + Q_BYTES), *sm_l = sm_m + WARPS * MT * 16;
    float *sm_x = sm_l + WARPS * MT * 16, *sm_f = sm_x + MT * 16, *sm_o = sm_f + MT * 16;
    static_assert(4 * (2 * WARPS * MT * 16 + 2 * MT * 16 + WARPS * MT * 16 * OP) <= WARPS * STAGES * STAGE,
                  "sdpa_decode: the warps' partials fit the stages");
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = mt * 16 + (lane >> 2) + 8 * h;
        float lr = l[mt][h];
        lr += __shfl_xor_sync(0xffffffffu, lr, 1);
        lr += __shfl_xor_sync(0xffffffffu, lr, 2);
        if ((lane & 3) == 0) { sm_m[warp * MT * 16 + row] = m[mt][h]; sm_l[warp * MT * 16 + row] = lr; }
#pragma unroll
        for (int nb = 0; nb < DV / 8; nb++) {
          sm_o[(warp * MT * 16 + row) * OP + 8 * nb + c0] = o[mt][nb][2 * h];
          sm_o[(warp * MT * 16 + row) * OP + 8 * nb + c0 + 1] = o[mt][nb][2 * h + 1];
        }
      }
    __syncthreads();
    // each row's max and sum over the warps (score units; sums to the common max): the row's end
    // here when one split holds the keys, else the split's max and sum into the workspace
    const kiln_i64 slot = item * ROWS * (DV + 2);
    for (int row = t; row < ROWS; row += 128) {
      float mf = NEG_INF, lr = 0.0f;
      for (int w = 0; w < WARPS; w++) mf = fmaxf(mf, sm_m[w * MT * 16 + row]);
      const float mfs = mf == NEG_INF ? 0.0f : mf * sl2;
      for (int w = 0; w < WARPS; w++) lr += sm_l[w * MT * 16 + row] * kiln_exp2(sm_m[w * MT * 16 + row] * sl2 - mfs);
      const int hq = hk * G + row / SQR, s = row % SQR;
      if (n_split == 1) {
        sm_f[row] = row_end(b, hq, s, mf, lr, s >= lq);
      } else {
        ws[slot + (kiln_i64)row * (DV + 2) + DV] = mf;
        ws[slot + (kiln_i64)row * (DV + 2) + DV + 1] = lr;
        sm_f[row] = 1.0f;
      }
      sm_x[row] = mfs;
    }
    __syncthreads();
    for (int c = t; c < ROWS * (DV / 2); c += 128) {
      const int row = c / (DV / 2), col = 2 * (c % (DV / 2));
      float v0 = 0.0f, v1 = 0.0f;
      for (int w = 0; w < WARPS; w++) {
        const float *ow = sm_o + (w * MT * 16 + row) * OP + col;
        const float f = kiln_exp2(sm_m[w * MT * 16 + row] * sl2 - sm_x[row]);
        v0 += ow[0] * f;
        v1 += ow[1] * f;
      }
      const int hq = hk * G + row / SQR, s = row % SQR;
      if (n_split == 1) {
        if (s < SQ) store_o(b, hq, s, col, v0 * sm_f[row], v1 * sm_f[row]);
      } else {
        ws[slot + (kiln_i64)row * (DV + 2) + col] = v0;
        ws[slot + (kiln_i64)row * (DV + 2) + col + 1] = v1;
      }
    }
  }
}
