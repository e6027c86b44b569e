// kiln GDN engine, recurrent form (sm_80 and later): ${what}.
// A CTA takes (sequence n, state head ho, rows [v0, v0 + BV) of the V x K state). Each state
// row is held in fp32 registers by 8 lanes (lane j: values 4 (j + 8 i) .. + 3, i < K / 32, so a
// row loads as 16-byte pieces, 128 contiguous bytes per 8 lanes); a thread holds R rows. The
// tokens arrive C at a time by cp.async into two stages (q, k rows and the v tile), the next
// stage in flight under the current one. Per token, with raw q, k and r = 1/|.| (or 1):
//   a = S k, b = S q   (8-lane shuffles), p = alpha r_k a, u = beta (v - p),
//   o = scale r_q (alpha b + u r_k (k.q)),   S <- alpha S + (u r_k) k^T,
// which is OPS.md §8.1's decay, delta write and read of the updated state, one reduction round
// a token. A warp per token computes |q|, |k| and k.q for the stage; outputs are staged in
// shared memory and stored a token row at a time.

extern "C" __global__ void __launch_bounds__(${THREADS}) ${symbol}(${params}) {
  constexpr int K = ${K}, V = ${V}, BV = ${BV}, R = ${R}, C = ${C}, THREADS = ${THREADS};
  constexpr int VT = V / BV, GROUPS = BV / R, NC = K / 32, WARPS = THREADS / 32;
  static_assert(GROUPS * 8 == THREADS && V % BV == 0 && K % 32 == 0 && BV % 8 == 0 && C <= THREADS,
                "gdn_recurrent: tile shape");
  using STATE_T = ${STATE_T};
${setup}
  const kiln_i64 blk = blockIdx.x;
  const int vt = (int)(blk % VT), ho = (int)(blk / VT % HO);
  const kiln_i64 n = blk / VT / HO;
  // the launch has one spare row of CTAs (N + 1 by cu_seqlens' length); N_RUN <= N also
  // keeps to the rows of state_indices, the states and final_state
  if (n >= N_RUN) return;
  int qh, kh, vh;
  kiln_gdn_heads<H, HK, HV, HO>(ho, qh, kh, vh);
  kiln_i64 bos, eos;
  kiln_gdn_bounds(gcu, n, T, bos, eos);
  kiln_i64 row = n;
  if constexpr (IDX) {
    row = kiln_gdn_pool_row(gidx, n, POOL);
    if (row < 0) return;  // not a pool row: the sequence is skipped
  }
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, j8 = tid & 7, grp = tid >> 3;
  const int v0 = vt * BV;
  // the state tile: issued first, its loads in flight under everything below
  float S[R][NC][4];
  const kiln_i64 s_off = ((row * HO + ho) * V + v0) * (kiln_i64)K;
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int i = 0; i < NC; i++) {
      if constexpr (HAS_H0) {
        kiln_gdn_ld4(h0 + s_off + (kiln_i64)(grp + r * GROUPS) * K + 4 * (j8 + 8 * i), S[r][i]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; e++) S[r][i][e] = 0.0f;
      }
    }
  float amp, bias;
  gate_params(ho, amp, bias);
  // shared memory: two stages of [q C x K | k C x K | v C x BV] (io), then the tokens'
  // scalars (alpha, beta, r_k, scale r_q, k.q) and their outputs, fp32
  constexpr int STAGE = C * (4 * K + 2 * BV);
  extern __shared__ __align__(16) kiln_u8 kiln_smem[];
  const kiln_u32 sbase = kiln_smem_u32(kiln_smem);
  float (*sc)[5] = reinterpret_cast<float (*)[5]>(kiln_smem + 2 * STAGE);
  float *os = reinterpret_cast<float *>(kiln_smem + 2 * STAGE + C * 5 * 4);
  // tokens [t0, t0 + C) into stage s; tokens at or past eos are not read
  auto issue = [&](kiln_i64 t0, int s) {
    constexpr int QC = K / 8, VC = BV / 8, PER = 2 * QC + VC;
    const kiln_u32 dst = sbase + s * STAGE;
    for (int i = tid; i < C * PER; i += THREADS) {
      const int j = i / PER, c = i % PER;
      const kiln_i64 t = t0 + j;
      if (t >= eos) continue;
      if (c < QC) {
        kiln_cp_async16(dst + (j * K + c * 8) * 2, gq + (t * H + qh) * K + c * 8, 16u);
      } else if (c < 2 * QC) {
        kiln_cp_async16(dst + C * K * 2 + (j * K + (c - QC) * 8) * 2, gk + (t * HK + kh) * K + (c - QC) * 8, 16u);
      } else {
        kiln_cp_async16(dst + C * K * 4 + (j * BV + (c - 2 * QC) * 8) * 2, gv + (t * HV + vh) * V + v0 + (c - 2 * QC) * 8, 16u);
      }
    }
    kiln_cp_async_commit();
  };
  // thread j < C holds token t0 + j's raw g and beta, a stage ahead
  float g_r = 0.0f, b_r = 0.0f;
  auto fetch_gates = [&](kiln_i64 t0) {
    const kiln_i64 t = t0 + tid;
    if (tid < C && t < eos) { g_r = ld_g(t * HO + ho); b_r = ld_b(t * HO + ho); }
  };
  issue(bos, 0);
  fetch_gates(bos);
  int s = 0;
#pragma unroll 1
  for (kiln_i64 t0 = bos; t0 < eos; t0 += C, s ^= 1) {
    const int nt = eos - t0 < C ? (int)(eos - t0) : C;
    kiln_cp_async_wait<0>();
    __syncthreads();  // stage s landed; the previous stage's tokens and outputs are done
    if (t0 + C < eos) issue(t0 + C, s ^ 1);
    const kiln_u16 *sq = reinterpret_cast<const kiln_u16 *>(kiln_smem + s * STAGE);
    const kiln_u16 *sk = sq + C * K, *sv = sq + 2 * C * K;
    if (tid < nt) { sc[tid][0] = kiln_gdn_alpha<GATE>(g_r, amp, bias); sc[tid][1] = kiln_gdn_beta<BETA>(b_r); }
    fetch_gates(t0 + C);
    for (int j = warp; j < nt; j += WARPS) {
      float qq = 0.0f, kk = 0.0f, kq = 0.0f;
#pragma unroll
      for (int e = lane; e < K; e += 32) {
        const float a = ld_io(sq[j * K + e]), b = ld_io(sk[j * K + e]);
        qq = fmaf(a, a, qq), kk = fmaf(b, b, kk), kq = fmaf(a, b, kq);
      }
#pragma unroll
      for (int m = 16; m >= 1; m >>= 1) {
        qq += __shfl_xor_sync(0xffffffffu, qq, m);
        kk += __shfl_xor_sync(0xffffffffu, kk, m);
        kq += __shfl_xor_sync(0xffffffffu, kq, m);
      }
      if (lane == 0) {
        sc[j][2] = L2 ? rsqrtf(kk + 1e-6f) : 1.0f;
        sc[j][3] = L2 ? scale * rsqrtf(qq + 1e-6f) : scale;
        sc[j][4] = kq;
      }
    }
    __syncthreads();  // the stage's scalars are in
#pragma unroll 1
    for (int j = 0; j < nt; j++) {
      float kr[NC][4], qr[NC][4];
#pragma unroll
      for (int i = 0; i < NC; i++) {
        const uint2 wq = *reinterpret_cast<const uint2 *>(sq + j * K + 4 * (j8 + 8 * i));
        const uint2 wk = *reinterpret_cast<const uint2 *>(sk + j * K + 4 * (j8 + 8 * i));
        qr[i][0] = ld_io((kiln_u16)wq.x), qr[i][1] = ld_io((kiln_u16)(wq.x >> 16));
        qr[i][2] = ld_io((kiln_u16)wq.y), qr[i][3] = ld_io((kiln_u16)(wq.y >> 16));
        kr[i][0] = ld_io((kiln_u16)wk.x), kr[i][1] = ld_io((kiln_u16)(wk.x >> 16));
        kr[i][2] = ld_io((kiln_u16)wk.y), kr[i][3] = ld_io((kiln_u16)(wk.y >> 16));
      }
      float a[R], b[R];
#pragma unroll
      for (int r = 0; r < R; r++) {
        float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;  // two chains each: half the dependent adds
#pragma unroll
        for (int i = 0; i < NC; i++) {
          a0 = fmaf(S[r][i][0], kr[i][0], a0), a1 = fmaf(S[r][i][1], kr[i][1], a1);
          a0 = fmaf(S[r][i][2], kr[i][2], a0), a1 = fmaf(S[r][i][3], kr[i][3], a1);
          b0 = fmaf(S[r][i][0], qr[i][0], b0), b1 = fmaf(S[r][i][1], qr[i][1], b1);
          b0 = fmaf(S[r][i][2], qr[i][2], b0), b1 = fmaf(S[r][i][3], qr[i][3], b1);
        }
        a[r] = a0 + a1, b[r] = b0 + b1;
      }
#pragma unroll
      for (int m = 1; m < 8; m <<= 1)
#pragma unroll
        for (int r = 0; r < R; r++) {
          a[r] += __shfl_xor_sync(0xffffffffu, a[r], m);
          b[r] += __shfl_xor_sync(0xffffffffu, b[r], m);
        }
      const float alpha = sc[j][0], beta = sc[j][1], rk = sc[j][2], sqs = sc[j][3], kq = sc[j][4];
#pragma unroll
      for (int r = 0; r < R; r++) {
        const int vr = grp + r * GROUPS;
        const float u = beta * (ld_io(sv[j * BV + vr]) - alpha * rk * a[r]);
        const float uk = u * rk;  // u times the normalized k = uk times the raw k
        if (j8 == 0) os[j * BV + vr] = sqs * fmaf(alpha, b[r], uk * kq);
#pragma unroll
        for (int i = 0; i < NC; i++)
#pragma unroll
          for (int e = 0; e < 4; e++) S[r][i][e] = fmaf(uk, kr[i][e], alpha * S[r][i][e]);
      }
    }
    __syncthreads();  // the stage's outputs are in
    for (int i = tid; i < nt * (BV / 2); i += THREADS) {
      const int j = i / (BV / 2), c = i % (BV / 2);
      *reinterpret_cast<kiln_u32 *>(go + ((t0 + j) * HO + ho) * V + v0 + 2 * c) = pack_io(os[j * BV + 2 * c], os[j * BV + 2 * c + 1]);
    }
  }
  kiln_cp_async_wait<0>();  // an empty sequence's stage group
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int i = 0; i < NC; i++) {
      const kiln_i64 at = (kiln_i64)(grp + r * GROUPS) * K + 4 * (j8 + 8 * i);
      if constexpr (FINAL) kiln_gdn_st4(fin + ((n * HO + ho) * V + v0) * (kiln_i64)K + at, S[r][i]);
      if constexpr (OVERWRITE) kiln_gdn_st4(const_cast<STATE_T *>(h0) + s_off + at, S[r][i]);  // h0 is writable here
    }
}
