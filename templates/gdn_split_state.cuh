// kiln GDN engine, split chunked forward, state pass (sm_80 and later): ${what}.
// One CTA per (sequence, state head, tile of BV rows of the V x K state), serial over the
// sequence's chunks; S (BV x K, fp32) in the accumulators of WARPS = BV / 16 warps (warp w: rows
// 16w..16w+15). Per chunk, with W, U, G, rk from the pre-pass (the slot's workspace):
//   S_c = S (io dtype, to the slot),  V_new = U - W S^T (io dtype, over U),
//   S <- 2^G_n S + (rk 2^(G_n - G) V_new)^T K     (G_n: the gate prefix at the chunk's last token);
// W, K, the U tile, G and rk of the next chunk arrive by cp.async into the other stage meanwhile.

extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${symbol}(${params}) {
  constexpr int C = 64, KD = ${K}, VD = ${V}, BV = ${BV}, WARPS = BV / 16, THREADS = 32 * WARPS;
${setup}
  constexpr int QP = (KD + 8) * 2, VP = (BV + 8) * 2;  // row pitches in bytes (ldmatrix: distinct banks)
  constexpr kiln_u32 K_OFF = C * QP, U_OFF = 2 * C * QP, G_OFF = U_OFF + C * VP, STAGE = G_OFF + 2 * C * 4;
  constexpr kiln_u32 WB_OFF = 2 * STAGE, SMEM = WB_OFF + C * VP;
  static_assert(KD % 16 == 0 && VD % BV == 0 && BV % 16 == 0 && SMEM == ${SMEM}, "gdn_split_state: tile shape");
  extern __shared__ __align__(16) kiln_u8 kiln_smem[];
  const kiln_u32 sm = kiln_smem_u32(kiln_smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gr = lane >> 2, c2 = 2 * (lane & 3);
  constexpr int VT = VD / BV;
  const int vt = (int)(blockIdx.x % VT), ho = (int)(blockIdx.x / VT % HO);
  const kiln_i64 seq = (kiln_i64)blockIdx.x / VT / HO;
  if (seq >= NSEQ) return;
  kiln_i64 bos, eos;
  kiln_gdn_bounds(cu, seq, T, bos, eos);
  int hq, hk, hv;
  kiln_gdn_heads<H, HK, HV, HO>(ho, hq, hk, hv);
  (void)hq; (void)hv;
  const int v0 = vt * BV, vw = 16 * warp;
  // tokens outside every sequence get O = 0 (the output kernel writes the sequences' tokens)
  auto zero_o = [&](kiln_i64 from, kiln_i64 to) {
    for (kiln_i64 e = from * (BV / 2) + tid; e < to * (BV / 2); e += THREADS)
      *reinterpret_cast<kiln_u32 *>(go + ((e / (BV / 2)) * HO + ho) * VD + v0 + 2 * (e % (BV / 2))) = 0u;
  };
  if (seq == 0) zero_o(0, bos);
  if (seq == NSEQ - 1) zero_o(eos, T);
  const kiln_i64 row = pool_row(seq);
  if (row < 0) return;
  const kiln_i64 slots = T / C + NCU, slot0 = kiln_gdn_slot0<C>(cu, seq, T);
  const kiln_gdn_split_ws<C, HO, KD, VD> ws(wsp, slots);
  float s[KD / 8][4];
#pragma unroll
  for (int nb = 0; nb < KD / 8; nb++)
#pragma unroll
    for (int h = 0; h < 2; h++) state_load(row, ho, v0 + vw + gr + 8 * h, 8 * nb + c2, s[nb][2 * h], s[nb][2 * h + 1]);
  const int n_chunks = (int)((eos - bos + C - 1) / C);
  auto load_chunk = [&](int ch) {  // chunk ch's W, K, U tile, G and rk into stage ch & 1; K rows past the sequence zero-filled
    const kiln_i64 t0 = bos + (kiln_i64)ch * C, sl = ws.at(slot0 + ch, ho);
    const kiln_u32 st = sm + (ch & 1) * STAGE;
    for (int e = tid; e < C * (KD / 8); e += THREADS) {
      const int r = e / (KD / 8), k8 = e % (KD / 8);
      const bool in = t0 + r < eos;
      const kiln_i64 t = in ? t0 + r : 0;
      kiln_cp_async16(st + r * QP + k8 * 16, ws.w + (sl * C + r) * KD + k8 * 8, 16u);
      kiln_cp_async16(st + K_OFF + r * QP + k8 * 16, gk + (t * HK + hk) * KD + k8 * 8, in ? 16u : 0u);
    }
    for (int e = tid; e < C * (BV / 8); e += THREADS) {
      const int r = e / (BV / 8), k8 = e % (BV / 8);
      kiln_cp_async16(st + U_OFF + r * VP + k8 * 16, ws.u + (sl * C + r) * VD + v0 + k8 * 8, 16u);
    }
    for (int e = tid; e < 2 * C / 4; e += THREADS) kiln_cp_async16(st + G_OFF + 16 * e, ws.gr + sl * 2 * C + 4 * e, 16u);
  };
  if (n_chunks > 0) load_chunk(0);
  kiln_cp_async_commit();
  const kiln_u32 a_q = (lane & 15) * QP + (lane >> 4) * 16;
  const kiln_u32 b_kn_q = (((lane >> 3) & 1) * 8 + (lane & 7)) * QP + (lane >> 4) * 16;
  const kiln_u32 a_km = ((lane & 7) + ((lane >> 4) & 1) * 8) * VP + ((lane >> 3) & 1) * 16;
#pragma unroll 1
  for (int ch = 0; ch < n_chunks; ch++) {
    const kiln_i64 t0 = bos + (kiln_i64)ch * C, sl = ws.at(slot0 + ch, ho);
    const int n = (int)(eos - t0 < C ? eos - t0 : C);
    const kiln_u32 st = sm + (ch & 1) * STAGE;
    const float *gam = reinterpret_cast<const float *>(kiln_smem + (st - sm) + G_OFF), *rk = gam + C;
    __syncthreads();  // the previous chunk is done with the other stage and WB
    if (ch + 1 < n_chunks) load_chunk(ch + 1);
    kiln_cp_async_commit();
    // S_c to the slot (io dtype) and the W S^T operands, from the accumulators
    kiln_u16 *sc = ws.state + sl * VD * KD;
#pragma unroll
    for (int nb = 0; nb < KD / 8; nb++)
#pragma unroll
      for (int h = 0; h < 2; h++)
        *reinterpret_cast<kiln_u32 *>(sc + (kiln_i64)(v0 + vw + gr + 8 * h) * KD + 8 * nb + c2) =
            ${PACK}(s[nb][2 * h], s[nb][2 * h + 1]);
    kiln_cp_async_wait<1>();
    __syncthreads();  // chunk ch landed
    float x[4][2][4];
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
      for (int nn = 0; nn < 2; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) x[mi][nn][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KD / 16; ks++) {
      const kiln_u32 b00 = ${PACK}(s[2 * ks][0], s[2 * ks][1]), b01 = ${PACK}(s[2 * ks + 1][0], s[2 * ks + 1][1]);
      const kiln_u32 b10 = ${PACK}(s[2 * ks][2], s[2 * ks][3]), b11 = ${PACK}(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
      for (int mi = 0; mi < 4; mi++) {
        kiln_u32 a[4];
        kiln_ldmatrix_x4(a, st + a_q + mi * 16 * QP + ks * 32);
        kiln_mma_${MMA_T}(x[mi][0], a, b00, b01);
        kiln_mma_${MMA_T}(x[mi][1], a, b10, b11);
      }
    }
    // V_new = U - W S^T to the slot (over U), rk 2^(G_n - G) V_new into WB, the warp's columns
    const float gc = gam[n - 1];
    kiln_u16 *un = ws.u + sl * C * VD + v0;
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = 16 * mi + gr + 8 * h;
        const float f = r < n ? rk[r] * kiln_exp2(gc - gam[r]) : 0.0f;
#pragma unroll
        for (int nn = 0; nn < 2; nn++) {
          const int col = vw + 8 * nn + c2;
          const kiln_u32 w = *reinterpret_cast<const kiln_u32 *>(kiln_smem + (st - sm) + U_OFF + r * VP + col * 2);
          const float y0 = ${TO_F32}((kiln_u16)(w & 0xffffu)) - x[mi][nn][2 * h];
          const float y1 = ${TO_F32}((kiln_u16)(w >> 16)) - x[mi][nn][2 * h + 1];
          *reinterpret_cast<kiln_u32 *>(un + r * VD + col) = ${PACK}(y0, y1);
          kiln_st_shared_b32(sm + WB_OFF + r * VP + col * 2, ${PACK}(f * y0, f * y1));
        }
      }
    __syncwarp();  // WB written for the warp's ldmatrix
    // S <- 2^G_n S + (rk 2^(G_n - G) V_new)^T K: A operands from WB (.trans), B from K (.trans)
    kiln_gdn_state_update<KD, VP, QP, ${BF16}>(s, gc, sm + WB_OFF + a_km + vw * 2, st + K_OFF + b_kn_q);
  }
  kiln_cp_async_wait<0>();
#pragma unroll
  for (int nb = 0; nb < KD / 8; nb++)
#pragma unroll
    for (int h = 0; h < 2; h++) state_store(seq, row, ho, v0 + vw + gr + 8 * h, 8 * nb + c2, s[nb][2 * h], s[nb][2 * h + 1]);
}
