// kiln GDN engine, split chunked forward, pre-pass (sm_80 and later): ${what}.
// One CTA of 4 warps per (slot, state head): the chunk's parts that do not need the state, in
// log2 units (G = the in-chunk prefix sum of the gate, rk = the k rows' L2 reciprocals or 1):
//   A = strict-lower(b_i rk_i rk_j (k_i . k_j) 2^(G_i - G_j)),  T = (I + A)^-1 in fp32,
//   W = T (b 2^G rk K),  U = T (b V)     (so that V_new = U - W S^T),
// W, U (all C rows, those past the sequence 0), G and rk into the slot's workspace.

extern "C" __global__ void __launch_bounds__(128, 2) ${symbol}(${params}) {
  constexpr int C = 64, KD = ${K}, VD = ${V}, THREADS = 128;
${setup}
  constexpr int QP = (KD + 8) * 2, VP = (VD + 8) * 2, TP = (C + 8) * 2, AP = C + 4, XP = 48;
  constexpr kiln_u32 V_OFF = C * QP, A_OFF = V_OFF + C * VP, X_OFF = A_OFF + C * AP * 4, TB_OFF = X_OFF + 16 * XP * 4;
  constexpr kiln_u32 SC_OFF = TB_OFF + C * TP, SMEM = SC_OFF + 3 * C * 4;
  static_assert(KD % 16 == 0 && VD % 16 == 0 && SMEM == ${SMEM}, "gdn_split_prep: tile shape");
  extern __shared__ __align__(16) kiln_u8 kiln_smem[];
  const kiln_u32 sm = kiln_smem_u32(kiln_smem);
  float *sA = reinterpret_cast<float *>(kiln_smem + A_OFF), *sX = reinterpret_cast<float *>(kiln_smem + X_OFF);
  float *gam = reinterpret_cast<float *>(kiln_smem + SC_OFF), *bet = gam + C, *rk = bet + C;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gr = lane >> 2, c2 = 2 * (lane & 3);
  const kiln_i64 slots = T / C + NCU, slot = (kiln_i64)blockIdx.x / HO;
  const int ho = (int)(blockIdx.x % HO);
  if (slot >= slots) return;
  const kiln_i64 seq = kiln_gdn_slot_seq<C>(cu, NSEQ, T, slot);
  if (seq < 0) return;
  kiln_i64 bos, eos;
  kiln_gdn_bounds(cu, seq, T, bos, eos);
  const kiln_i64 t0 = bos + (slot - kiln_gdn_slot0<C>(cu, seq, T)) * C;
  if (t0 >= eos) return;
  const int n = (int)(eos - t0 < C ? eos - t0 : C);
  int hq, hk, hv;
  kiln_gdn_heads<H, HK, HV, HO>(ho, hq, hk, hv);
  (void)hq;
  const kiln_gdn_split_ws<C, HO, KD, VD> ws(wsp, slots);
  for (int e = tid; e < C * (KD / 8); e += THREADS) {  // K rows, past the sequence zero-filled
    const int r = e / (KD / 8), k8 = e % (KD / 8);
    const kiln_i64 t = r < n ? t0 + r : 0;
    kiln_cp_async16(sm + r * QP + k8 * 16, gk + (t * HK + hk) * KD + k8 * 8, r < n ? 16u : 0u);
  }
  for (int e = tid; e < C * (VD / 8); e += THREADS) {  // V rows
    const int r = e / (VD / 8), k8 = e % (VD / 8);
    const kiln_i64 t = r < n ? t0 + r : 0;
    kiln_cp_async16(sm + V_OFF + r * VP + k8 * 16, gv + (t * HV + hv) * VD + k8 * 8, r < n ? 16u : 0u);
  }
  kiln_cp_async_commit();
  if (warp == 0) {  // G (inclusive prefix sum, log2 units) and b; past the sequence 0
    float lg[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int i = 2 * lane + e;
      lg[e] = i < n ? gate_log2(gate_raw(t0 + i, ho), ho) : 0.0f;
      bet[i] = i < n ? beta_of(beta_raw(t0 + i, ho)) : 0.0f;
    }
    float x = lg[0] + lg[1];
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const float y = __shfl_up_sync(0xffffffffu, x, off);
      if (lane >= off) x += y;
    }
    gam[2 * lane] = x - lg[1];
    gam[2 * lane + 1] = x;
  }
  kiln_cp_async_wait<0>();
  __syncthreads();
  for (int r = tid; r < C; r += THREADS) {  // rk: 1 / sqrt(sum k^2 + eps), columns rotated by row (banks)
    rk[r] = L2 ? rsqrtf(kiln_gdn_sumsq<KD>(kiln_smem + r * QP, r, [](kiln_u16 h) { return ${TO_F32}(h); }) + 1e-6f) : 1.0f;
    ws.gr[ws.at(slot, ho) * 2 * C + r] = gam[r];
    ws.gr[ws.at(slot, ho) * 2 * C + C + r] = rk[r];
  }
  __syncthreads();
  const kiln_u32 a_q = (lane & 15) * QP + (lane >> 4) * 16, a_t = (lane & 15) * TP + (lane >> 4) * 16;
  const kiln_u32 b_nk = ((lane >> 4) * 8 + (lane & 7)) * QP + ((lane >> 3) & 1) * 16;
  const kiln_u32 b_kn_v = (((lane >> 3) & 1) * 8 + (lane & 7)) * VP + (lane >> 4) * 16;
  const kiln_u32 b_kn_q = (((lane >> 3) & 1) * 8 + (lane & 7)) * QP + (lane >> 4) * 16;
  {  // KK^T into A (fp32, strict lower, scaled): warp w the rows 16w..16w+15, blocks left of the diagonal
    const int mi = warp;
    float acc[8][4];
    kiln_gdn_causal_mma<KD, QP, ${BF16}>(acc, mi, sm + a_q + mi * 16 * QP, sm + b_nk);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = 16 * mi + gr + 8 * h;
      const float gi = gam[r], fi = bet[r] * rk[r];
#pragma unroll
      for (int nb = 0; nb < 8; nb++) {
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int j = 8 * nb + c2 + e;
          x[e] = j < r ? acc[nb][2 * h + e] * fi * rk[j] * kiln_exp2(gi - gam[j]) : 0.0f;
        }
        *reinterpret_cast<float2 *>(sA + r * AP + 8 * nb + c2) = make_float2(x[0], x[1]);
      }
    }
  }
  __syncthreads();
  kiln_gdn_inverse<C, AP, XP, THREADS>(sA, sX, tid);
  // T in the io dtype; K rows scaled to b 2^G rk k, V rows to b v (in place)
  for (int e = tid; e < C * C / 2; e += THREADS) {
    const int r = e / (C / 2), cc = 2 * (e % (C / 2));
    kiln_st_shared_b32(sm + TB_OFF + r * TP + cc * 2, ${PACK}(sA[r * AP + cc], sA[r * AP + cc + 1]));
  }
  for (int e = tid; e < C * (KD + VD) / 2; e += THREADS) {
    const bool kk = e < C * KD / 2;
    const int x = kk ? e : e - C * KD / 2, w2 = (kk ? KD : VD) / 2, r = x / w2;
    const kiln_u32 ad = (kk ? r * QP : V_OFF + r * VP) + 4 * (x % w2);
    const float f = kk ? bet[r] * rk[r] * kiln_exp2(gam[r]) : bet[r];
    const kiln_u32 w = *reinterpret_cast<const kiln_u32 *>(kiln_smem + ad);
    kiln_st_shared_b32(sm + ad, ${PACK}(f * ${TO_F32}((kiln_u16)(w & 0xffffu)), f * ${TO_F32}((kiln_u16)(w >> 16))));
  }
  __syncthreads();
  // W = T (b 2^G rk K) and U = T (b V): 16 columns a job, T lower triangular (blocks at or left of the diagonal)
#pragma unroll 1
  for (int job = warp; job < (KD + VD) / 16; job += 4) {
    const bool kk = job < KD / 16;
    const int cb = kk ? job : job - KD / 16;
    const kiln_u32 bsrc = kk ? sm + b_kn_q + cb * 32 : sm + V_OFF + b_kn_v + cb * 32;
    const kiln_u32 bstep = kk ? 16 * QP : 16 * VP;
    kiln_u16 *dst = kk ? ws.w + ws.at(slot, ho) * C * KD : ws.u + ws.at(slot, ho) * C * VD;
    const int pitch = kk ? KD : VD;
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
      float acc[2][4];
#pragma unroll
      for (int nn = 0; nn < 2; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[nn][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks <= mi; ks++) {
        kiln_u32 a[4], b[4];
        kiln_ldmatrix_x4(a, sm + TB_OFF + a_t + mi * 16 * TP + ks * 32);
        kiln_ldmatrix_x4_trans(b, bsrc + ks * bstep);
        kiln_mma_${MMA_T}(acc[0], a, b[0], b[1]);
        kiln_mma_${MMA_T}(acc[1], a, b[2], b[3]);
      }
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int nn = 0; nn < 2; nn++)
          *reinterpret_cast<kiln_u32 *>(dst + (16 * mi + gr + 8 * h) * pitch + 16 * cb + 8 * nn + c2) =
              ${PACK}(acc[nn][2 * h], acc[nn][2 * h + 1]);
    }
  }
}
