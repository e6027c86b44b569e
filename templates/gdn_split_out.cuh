// kiln GDN engine, split chunked forward, output (sm_80 and later): ${what}.
// One CTA of 4 warps per (slot, state head), after the state pass: with S_c the chunk's starting
// state and V_new from the slot, G from the pre-pass, rq/rk the L2 reciprocals (1 without them),
//   O = scale [rq 2^G (Q S_c^T) + (rq_i rk_j (q_i . k_j) 2^(G_i - G_j), j <= i) V_new],
// 16 columns of O a job; rows past the sequence not stored.

extern "C" __global__ void __launch_bounds__(128, 2) ${symbol}(${params}) {
  constexpr int C = 64, KD = ${K}, VD = ${V}, THREADS = 128;
${setup}
  constexpr int QP = (KD + 8) * 2, VP = (VD + 8) * 2, TP = (C + 8) * 2;
  constexpr kiln_u32 K_OFF = C * QP, S_OFF = 2 * C * QP, N_OFF = S_OFF + VD * QP, PB_OFF = N_OFF + C * VP;
  constexpr kiln_u32 SC_OFF = PB_OFF + C * TP, SMEM = SC_OFF + 3 * C * 4;
  static_assert(KD % 16 == 0 && VD % 16 == 0 && SMEM == ${SMEM}, "gdn_split_out: tile shape");
  extern __shared__ __align__(16) kiln_u8 kiln_smem[];
  const kiln_u32 sm = kiln_smem_u32(kiln_smem);
  float *gam = reinterpret_cast<float *>(kiln_smem + SC_OFF), *rq = gam + C, *rk = rq + C;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gr = lane >> 2, c2 = 2 * (lane & 3);
  const kiln_i64 slots = T / C + NCU, slot = (kiln_i64)blockIdx.x / HO;
  const int ho = (int)(blockIdx.x % HO);
  if (slot >= slots) return;
  const kiln_i64 seq = kiln_gdn_slot_seq<C>(cu, NSEQ, T, slot);
  if (seq < 0 || pool_row(seq) < 0) return;
  kiln_i64 bos, eos;
  kiln_gdn_bounds(cu, seq, T, bos, eos);
  const kiln_i64 t0 = bos + (slot - kiln_gdn_slot0<C>(cu, seq, T)) * C;
  if (t0 >= eos) return;
  const int n = (int)(eos - t0 < C ? eos - t0 : C);
  int hq, hk, hv;
  kiln_gdn_heads<H, HK, HV, HO>(ho, hq, hk, hv);
  (void)hv;
  const kiln_gdn_split_ws<C, HO, KD, VD> ws(wsp, slots);
  const kiln_i64 sl = ws.at(slot, ho);
  for (int e = tid; e < C * (KD / 8); e += THREADS) {  // Q and K rows, past the sequence zero-filled
    const int r = e / (KD / 8), k8 = e % (KD / 8);
    const kiln_i64 t = r < n ? t0 + r : 0;
    kiln_cp_async16(sm + r * QP + k8 * 16, gq + (t * H + hq) * KD + k8 * 8, r < n ? 16u : 0u);
    kiln_cp_async16(sm + K_OFF + r * QP + k8 * 16, gk + (t * HK + hk) * KD + k8 * 8, r < n ? 16u : 0u);
  }
  for (int e = tid; e < VD * (KD / 8); e += THREADS) {  // S_c
    const int r = e / (KD / 8), k8 = e % (KD / 8);
    kiln_cp_async16(sm + S_OFF + r * QP + k8 * 16, ws.state + (sl * VD + r) * KD + k8 * 8, 16u);
  }
  for (int e = tid; e < C * (VD / 8); e += THREADS) {  // V_new
    const int r = e / (VD / 8), k8 = e % (VD / 8);
    kiln_cp_async16(sm + N_OFF + r * VP + k8 * 16, ws.u + (sl * C + r) * VD + k8 * 8, 16u);
  }
  for (int e = tid; e < C / 4; e += THREADS) kiln_cp_async16(sm + SC_OFF + 16 * e, ws.gr + sl * 2 * C + 4 * e, 16u);
  kiln_cp_async_commit();
  kiln_cp_async_wait<0>();
  __syncthreads();
  for (int r = tid; r < 2 * C; r += THREADS) {  // rq, rk: 1 / sqrt(sum x^2 + eps), columns rotated by row (banks)
    float ss = 0.0f;
    if (L2) ss = kiln_gdn_sumsq<KD>(kiln_smem + (r < C ? r * QP : K_OFF + (r - C) * QP), r, [](kiln_u16 h) { return ${TO_F32}(h); });
    (r < C ? rq : rk)[r % C] = L2 ? rsqrtf(ss + 1e-6f) : 1.0f;
  }
  __syncthreads();
  const kiln_u32 a_q = (lane & 15) * QP + (lane >> 4) * 16, a_t = (lane & 15) * TP + (lane >> 4) * 16;
  const kiln_u32 b_nk = ((lane >> 4) * 8 + (lane & 7)) * QP + ((lane >> 3) & 1) * 16;
  const kiln_u32 b_kn_v = (((lane >> 3) & 1) * 8 + (lane & 7)) * VP + (lane >> 4) * 16;
  {  // QK^T into P (io dtype, causal incl. the diagonal, scaled): warp w the rows 16w..16w+15
    const int mi = warp;
    float acc[8][4];
    kiln_gdn_causal_mma<KD, QP, ${BF16}>(acc, mi, sm + a_q + mi * 16 * QP, sm + K_OFF + b_nk);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = 16 * mi + gr + 8 * h;
      const float gi = gam[r], fi = rq[r];
#pragma unroll
      for (int nb = 0; nb < 8; nb++) {
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int j = 8 * nb + c2 + e;
          x[e] = j <= r ? acc[nb][2 * h + e] * fi * rk[j] * kiln_exp2(gi - gam[j]) : 0.0f;
        }
        kiln_st_shared_b32(sm + PB_OFF + r * TP + (8 * nb + c2) * 2, ${PACK}(x[0], x[1]));
      }
    }
  }
  __syncthreads();
#pragma unroll 1
  for (int vc = warp; vc < VD / 16; vc += 4) {
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
      float o[2][4];
#pragma unroll
      for (int nn = 0; nn < 2; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[nn][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < KD / 16; ks++) {  // Q S_c^T: B operands from S_c's rows ([n][k])
        kiln_u32 a[4], b[4];
        kiln_ldmatrix_x4(a, sm + a_q + mi * 16 * QP + ks * 32);
        kiln_ldmatrix_x4(b, sm + S_OFF + b_nk + vc * 16 * QP + ks * 32);
        kiln_mma_${MMA_T}(o[0], a, b[0], b[1]);
        kiln_mma_${MMA_T}(o[1], a, b[2], b[3]);
      }
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = 16 * mi + gr + 8 * h;
        const float f = rq[r] * kiln_exp2(gam[r]);
#pragma unroll
        for (int nn = 0; nn < 2; nn++) { o[nn][2 * h] *= f; o[nn][2 * h + 1] *= f; }
      }
#pragma unroll
      for (int ks = 0; ks <= mi; ks++) {  // + P V_new (P lower triangular)
        kiln_u32 a[4], b[4];
        kiln_ldmatrix_x4(a, sm + PB_OFF + a_t + mi * 16 * TP + ks * 32);
        kiln_ldmatrix_x4_trans(b, sm + N_OFF + b_kn_v + ks * 16 * VP + vc * 32);
        kiln_mma_${MMA_T}(o[0], a, b[0], b[1]);
        kiln_mma_${MMA_T}(o[1], a, b[2], b[3]);
      }
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = 16 * mi + gr + 8 * h;
        if (r < n) {
#pragma unroll
          for (int nn = 0; nn < 2; nn++)
            *reinterpret_cast<kiln_u32 *>(go + ((t0 + r) * HO + ho) * VD + 16 * vc + 8 * nn + c2) =
                ${PACK}(scale * o[nn][2 * h], scale * o[nn][2 * h + 1]);
        }
      }
    }
  }
}
