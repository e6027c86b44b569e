// kiln GDN engine, chunked forward (sm_80 and later): ${what}.
// One CTA per (sequence, state head, tile of BV rows of the V x K state), serial over the
// sequence's chunks of C = 64 tokens; the state S (BV x K, fp32) stays in the accumulators of
// WARPS = BV / 16 warps (warp w: rows 16w..16w+15). Per chunk, in log2 units (G = the in-chunk
// prefix sum of the gate, r = the L2 norms' reciprocals, 1 without them):
//   A = strict-lower(b_i rk_i rk_j (k_i . k_j) 2^(G_i - G_j)),  T = (I + A)^-1 in fp32,
//   U = K S^T,  W = b (V - 2^G rk U),  V_new = T W,
//   O = scale [rq 2^G (Q S^T) + (rq_i rk_j (q_i . k_j) 2^(G_i - G_j), j <= i) V_new],
//   S <- 2^G_C S + (rk 2^(G_C - G) V_new)^T K,
// the matmuls by mma.sync m16n8k16 (io-dtype operands, fp32 accumulators); Q, K and V of the
// next chunk arrive by cp.async into the other half of a two-stage ring meanwhile.

extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${symbol}(${params}) {
  constexpr int C = 64, KD = ${K}, VD = ${V}, BV = ${BV}, WARPS = BV / 16, THREADS = 32 * WARPS;
${setup}
  constexpr int QP = (KD + 8) * 2, VP = (BV + 8) * 2, TP = (C + 8) * 2;  // row pitches in bytes (ldmatrix: distinct banks)
  constexpr int AP = C + 4, XP = 48;                                    // row pitches of A / T and X in floats
  constexpr kiln_u32 K_OFF = C * QP, V_OFF = 2 * C * QP, STAGE = 2 * C * QP + C * VP;
  constexpr kiln_u32 A_OFF = 2 * STAGE, X_OFF = A_OFF + C * AP * 4, TB_OFF = X_OFF + 16 * XP * 4;
  constexpr kiln_u32 PB_OFF = TB_OFF + C * TP, WB_OFF = PB_OFF + C * TP, NB_OFF = WB_OFF + C * VP;
  constexpr kiln_u32 SC_OFF = NB_OFF + C * VP, SMEM = SC_OFF + 4 * C * 4;
  static_assert(KD % 16 == 0 && VD % BV == 0 && BV % 16 == 0 && THREADS >= C && SMEM == ${SMEM}, "gdn_chunk: tile shape");
  extern __shared__ __align__(16) kiln_u8 kiln_smem[];
  const kiln_u32 sm = kiln_smem_u32(kiln_smem);
  float *sA = reinterpret_cast<float *>(kiln_smem + A_OFF), *sX = reinterpret_cast<float *>(kiln_smem + X_OFF);
  float *gam = reinterpret_cast<float *>(kiln_smem + SC_OFF), *bet = gam + C, *rq = bet + C, *rk = rq + C;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gr = lane >> 2, c2 = 2 * (lane & 3);
  constexpr int VT = VD / BV;
  const int vt = (int)(blockIdx.x % VT), ho = (int)(blockIdx.x / VT % HO);
  const kiln_i64 seq = (kiln_i64)blockIdx.x / VT / HO;
  if (seq >= NSEQ) return;
  kiln_i64 bos, eos;
  kiln_gdn_bounds(cu, seq, T, bos, eos);
  int hq, hk, hv;
  kiln_gdn_heads<H, HK, HV, HO>(ho, hq, hk, hv);
  const int v0 = vt * BV, vw = 16 * warp;  // the CTA's and the warp's first state row
  // tokens outside every sequence get O = 0 (those before the first and after the last); a
  // sequence whose pool row is not in the pool is skipped (neither O nor its state written)
  auto zero_o = [&](kiln_i64 from, kiln_i64 to) {
    for (kiln_i64 e = from * (BV / 2) + tid; e < to * (BV / 2); e += THREADS)
      *reinterpret_cast<kiln_u32 *>(go + ((e / (BV / 2)) * HO + ho) * VD + v0 + 2 * (e % (BV / 2))) = 0u;
  };
  if (seq == 0) zero_o(0, bos);
  if (seq == NSEQ - 1) zero_o(eos, T);
  const kiln_i64 row = pool_row(seq);
  if (row < 0) return;
  // S: rows vw + gr (+ 8) of the tile, columns 8 nb + c2 (+ 1)
  float s[KD / 8][4];
#pragma unroll
  for (int nb = 0; nb < KD / 8; nb++)
#pragma unroll
    for (int h = 0; h < 2; h++) state_load(row, ho, v0 + vw + gr + 8 * h, 8 * nb + c2, s[nb][2 * h], s[nb][2 * h + 1]);
  for (int i = tid; i < C; i += THREADS) rq[i] = rk[i] = 1.0f;
  const int n_chunks = (int)((eos - bos + C - 1) / C);
  auto load_chunk = [&](int ch) {  // chunk ch's Q, K and V tile into stage ch & 1; rows past the sequence zero-filled
    const kiln_i64 t0 = bos + (kiln_i64)ch * C;
    const kiln_u32 st = sm + (ch & 1) * STAGE;
    for (int e = tid; e < C * (KD / 8); e += THREADS) {
      const int r = e / (KD / 8), k8 = e % (KD / 8);
      const bool in = t0 + r < eos;
      const kiln_i64 t = in ? t0 + r : 0;
      kiln_cp_async16(st + r * QP + k8 * 16, gq + (t * H + hq) * KD + k8 * 8, in ? 16u : 0u);
      kiln_cp_async16(st + K_OFF + r * QP + k8 * 16, gk + (t * HK + hk) * KD + k8 * 8, in ? 16u : 0u);
    }
    for (int e = tid; e < C * (BV / 8); e += THREADS) {
      const int r = e / (BV / 8), k8 = e % (BV / 8);
      const bool in = t0 + r < eos;
      const kiln_i64 t = in ? t0 + r : 0;
      kiln_cp_async16(st + V_OFF + r * VP + k8 * 16, gv + (t * HV + hv) * VD + v0 + k8 * 8, in ? 16u : 0u);
    }
  };
  // warp 0's lanes hold the raw gate and beta of tokens 2 lane and 2 lane + 1 of the next chunk
  float graw[2] = { 0.0f, 0.0f }, braw[2] = { 0.0f, 0.0f };
  auto load_gates = [&](int ch) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const kiln_i64 t = bos + (kiln_i64)ch * C + 2 * lane + e;
      if (ch < n_chunks && t < eos) { graw[e] = gate_raw(t, ho); braw[e] = beta_raw(t, ho); }
    }
  };
  if (n_chunks > 0) load_chunk(0);
  kiln_cp_async_commit();
  if (warp == 0) load_gates(0);
  // ldmatrix lane offsets (bytes): A operands of row-major tiles, B operands of [n][k] tiles,
  // B operands of [k][n] tiles (.trans), A operands of [k][m] tiles (.trans)
  const kiln_u32 a_q = (lane & 15) * QP + (lane >> 4) * 16, a_t = (lane & 15) * TP + (lane >> 4) * 16;
  const kiln_u32 b_nk = ((lane >> 4) * 8 + (lane & 7)) * QP + ((lane >> 3) & 1) * 16;
  const kiln_u32 b_kn_v = (((lane >> 3) & 1) * 8 + (lane & 7)) * VP + (lane >> 4) * 16;
  const kiln_u32 b_kn_q = (((lane >> 3) & 1) * 8 + (lane & 7)) * QP + (lane >> 4) * 16;
  const kiln_u32 a_km = ((lane & 7) + ((lane >> 4) & 1) * 8) * VP + ((lane >> 3) & 1) * 16;
#pragma unroll 1
  for (int ch = 0; ch < n_chunks; ch++) {
    const kiln_i64 t0 = bos + (kiln_i64)ch * C;
    const int n = (int)(eos - t0 < C ? eos - t0 : C);
    const kiln_u32 st = sm + (ch & 1) * STAGE;
    __syncthreads();  // the previous chunk is done with the other stage and the scratch
    if (ch + 1 < n_chunks) load_chunk(ch + 1);
    kiln_cp_async_commit();
    if (warp == 0) {  // G (inclusive prefix sum over the chunk, log2 units) and b; past the sequence 0
      float lg[2];
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const bool in = 2 * lane + e < n;
        lg[e] = in ? gate_log2(graw[e], ho) : 0.0f;
        bet[2 * lane + e] = in ? beta_of(braw[e]) : 0.0f;
      }
      float x = lg[0] + lg[1];
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const float y = __shfl_up_sync(0xffffffffu, x, off);
        if (lane >= off) x += y;
      }
      gam[2 * lane] = x - lg[1];
      gam[2 * lane + 1] = x;
      load_gates(ch + 1);
    }
    kiln_cp_async_wait<1>();
    __syncthreads();  // chunk ch landed; G and b written
    if (L2) {  // 1 / sqrt(sum x^2 + eps) of the q rows (rq) and k rows (rk), columns rotated by row (banks)
      for (int r = tid; r < 2 * C; r += THREADS) {
        const kiln_u8 *p = kiln_smem + (st - sm) + (r < C ? r * QP : K_OFF + (r - C) * QP);
        (r < C ? rq : rk)[r % C] = rsqrtf(kiln_gdn_sumsq<KD>(p, r, [](kiln_u16 h) { return ${TO_F32}(h); }) + 1e-6f);
      }
      __syncthreads();
    }
    // KK^T into A (fp32, strict lower, scaled) and QK^T into P (io dtype, causal incl. the
    // diagonal, scaled): m tiles of 16 rows dealt over the warps, only blocks left of the
    // diagonal; QK^T's tiles in reverse, so that 4 warps get 5 blocks of 16 x 16 each
#pragma unroll 1
    for (int job = warp; job < 8; job += WARPS) {
      const int mi = job < 4 ? job : 7 - job;
      const bool qk = job >= 4;
      float acc[8][4];
      kiln_gdn_causal_mma<KD, QP, ${BF16}>(acc, mi, st + (qk ? 0u : K_OFF) + a_q + mi * 16 * QP, st + K_OFF + b_nk);
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = 16 * mi + gr + 8 * h;
        const float gi = gam[r], fi = qk ? rq[r] : bet[r] * rk[r];
#pragma unroll
        for (int nb = 0; nb < 8; nb++) {
          float x[2];
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int j = 8 * nb + c2 + e;
            x[e] = (qk ? j <= r : j < r) ? acc[nb][2 * h + e] * fi * rk[j] * kiln_exp2(gi - gam[j]) : 0.0f;
          }
          if (qk) kiln_st_shared_b32(sm + PB_OFF + r * TP + (8 * nb + c2) * 2, ${PACK}(x[0], x[1]));
          else *reinterpret_cast<float2 *>(sA + r * AP + 8 * nb + c2) = make_float2(x[0], x[1]);
        }
      }
    }
    // U = K S^T and Q S^T for the warp's 16 state rows (S from the accumulators as B operands)
    float u[4][2][4], o[4][2][4];
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
      for (int nn = 0; nn < 2; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) u[mi][nn][e] = o[mi][nn][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KD / 16; ks++) {
      const kiln_u32 b00 = ${PACK}(s[2 * ks][0], s[2 * ks][1]), b01 = ${PACK}(s[2 * ks + 1][0], s[2 * ks + 1][1]);
      const kiln_u32 b10 = ${PACK}(s[2 * ks][2], s[2 * ks][3]), b11 = ${PACK}(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
      for (int mi = 0; mi < 4; mi++) {
        kiln_u32 a[4];
        kiln_ldmatrix_x4(a, st + K_OFF + a_q + mi * 16 * QP + ks * 32);
        kiln_mma_${MMA_T}(u[mi][0], a, b00, b01);
        kiln_mma_${MMA_T}(u[mi][1], a, b10, b11);
        kiln_ldmatrix_x4(a, st + a_q + mi * 16 * QP + ks * 32);
        kiln_mma_${MMA_T}(o[mi][0], a, b00, b01);
        kiln_mma_${MMA_T}(o[mi][1], a, b10, b11);
      }
    }
    // W = b (V - 2^G rk U) into the warp's columns of WB
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = 16 * mi + gr + 8 * h;
        const float f = kiln_exp2(gam[r]) * rk[r], b = bet[r];
#pragma unroll
        for (int nn = 0; nn < 2; nn++) {
          const int col = vw + 8 * nn + c2;
          const kiln_u32 w = *reinterpret_cast<const kiln_u32 *>(kiln_smem + (st - sm) + V_OFF + r * VP + col * 2);
          const float x0 = b * (${TO_F32}((kiln_u16)(w & 0xffffu)) - f * u[mi][nn][2 * h]);
          const float x1 = b * (${TO_F32}((kiln_u16)(w >> 16)) - f * u[mi][nn][2 * h + 1]);
          kiln_st_shared_b32(sm + WB_OFF + r * VP + col * 2, ${PACK}(x0, x1));
        }
      }
    __syncthreads();  // A complete
    kiln_gdn_inverse<C, AP, XP, THREADS>(sA, sX, tid);  // T = (I + A)^-1 in place, fp32
    for (int e = tid; e < C * C / 2; e += THREADS) {  // T in the io dtype (the upper triangle is 0)
      const int r = e / (C / 2), cc = 2 * (e % (C / 2));
      kiln_st_shared_b32(sm + TB_OFF + r * TP + cc * 2, ${PACK}(sA[r * AP + cc], sA[r * AP + cc + 1]));
    }
    __syncthreads();
    // V_new = T W for the warp's columns (T is lower triangular: blocks at or left of the diagonal)
    float vn[4][2][4];
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
#pragma unroll
      for (int nn = 0; nn < 2; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) vn[mi][nn][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks <= mi; ks++) {
        kiln_u32 a[4], b[4];
        kiln_ldmatrix_x4(a, sm + TB_OFF + a_t + mi * 16 * TP + ks * 32);
        kiln_ldmatrix_x4_trans(b, sm + WB_OFF + b_kn_v + ks * 16 * VP + vw * 2);
        kiln_mma_${MMA_T}(vn[mi][0], a, b[0], b[1]);
        kiln_mma_${MMA_T}(vn[mi][1], a, b[2], b[3]);
      }
    }
    __syncwarp();  // every lane read W before WB takes the decayed V_new
    // V_new (io dtype) into NB, rk 2^(G_C - G) V_new into WB, the warp's columns
    const float gc = gam[C - 1];
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = 16 * mi + gr + 8 * h;
        const float f = rk[r] * kiln_exp2(gc - gam[r]);
#pragma unroll
        for (int nn = 0; nn < 2; nn++) {
          const kiln_u32 at = (r * VP + (vw + 8 * nn + c2) * 2);
          kiln_st_shared_b32(sm + NB_OFF + at, ${PACK}(vn[mi][nn][2 * h], vn[mi][nn][2 * h + 1]));
          kiln_st_shared_b32(sm + WB_OFF + at, ${PACK}(f * vn[mi][nn][2 * h], f * vn[mi][nn][2 * h + 1]));
        }
      }
    __syncwarp();  // NB and WB written for the warp's ldmatrix
    // O = scale (rq 2^G Q S^T + P V_new), rows past the sequence not stored
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = 16 * mi + gr + 8 * h;
        const float f = rq[r] * kiln_exp2(gam[r]);
#pragma unroll
        for (int nn = 0; nn < 2; nn++) { o[mi][nn][2 * h] *= f; o[mi][nn][2 * h + 1] *= f; }
      }
#pragma unroll
      for (int ks = 0; ks <= mi; ks++) {
        kiln_u32 a[4], b[4];
        kiln_ldmatrix_x4(a, sm + PB_OFF + a_t + mi * 16 * TP + ks * 32);
        kiln_ldmatrix_x4_trans(b, sm + NB_OFF + b_kn_v + ks * 16 * VP + vw * 2);
        kiln_mma_${MMA_T}(o[mi][0], a, b[0], b[1]);
        kiln_mma_${MMA_T}(o[mi][1], a, b[2], b[3]);
      }
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = 16 * mi + gr + 8 * h;
        if (r < n) {
#pragma unroll
          for (int nn = 0; nn < 2; nn++)
            *reinterpret_cast<kiln_u32 *>(go + ((t0 + r) * HO + ho) * VD + v0 + vw + 8 * nn + c2) =
                ${PACK}(scale * o[mi][nn][2 * h], scale * o[mi][nn][2 * h + 1]);
        }
      }
    }
    // S <- 2^G_C S + (rk 2^(G_C - G) V_new)^T K: A operands from WB (.trans), B from K (.trans)
    kiln_gdn_state_update<KD, VP, QP, ${BF16}>(s, gc, sm + WB_OFF + a_km + vw * 2, st + K_OFF + b_kn_q);
  }
  kiln_cp_async_wait<0>();
#pragma unroll
  for (int nb = 0; nb < KD / 8; nb++)
#pragma unroll
    for (int h = 0; h < 2; h++) state_store(seq, row, ho, v0 + vw + gr + 8 * h, 8 * nb + c2, s[nb][2 * h], s[nb][2 * h + 1]);
}
