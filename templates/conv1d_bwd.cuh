// kiln conv1d engine, backward tile kernel: ${what}.
// Grid: NCH chunks x channel tiles of TC; a CTA walks its chunk's items (batch entry, tile of TT
// steps), every NCH-th of the B ceil(L / TT). An item: x-bar over [t0 - HP, t0 + TT + HP) and
// dout over [t0, t0 + TT + HP) into shared memory (fp32), dz = dout act'(z) in place (z recomputed),
// dx of the tile (dx-bar[t] = sum_j w[j] dz[t + H - j], plus dfinal_states at the last H steps),
// dinitial_states by the first tile, and the item's dweight / dbias sums (own steps only) added
// to the CTA's. The CTA's sums go to its workspace row ws[chunk][c][0..W] (W + 1: dbias); the
// reduce kernel adds the NCH rows in order: no atomics, the same bits every run. PF: the next
// item's x and dout loads are issued as soon as the current item's tiles are in shared memory
// (in flight during its math and dx stores).
extern "C" __global__ void __launch_bounds__(${NT}, KILN_CV_MINB(${MINB})) ${symbol}(${params}) {
  constexpr int NT = ${NT}, TC = ${TC}, TT = ${TT}, W = ${W}, H = W - 1, HP = ${HP}, V = ${V}, NCH = ${NCH};
  constexpr bool PF = ${PF};
  constexpr int XR = TT + 2 * HP, ZR = TT + HP, PC = TC + 1, WS = W <= 16 ? W : 1, UNROLL = W <= 16 ? W : 4;
  // FAST (W <= 4): a thread sums one channel over a slice of TT / SLICES steps, W + 1 sums in
  // registers; else a thread owns (channel, tap) pairs, their sums in shared memory
  constexpr bool FAST = W <= 4;
  constexpr int SLICES = NT / TC, SPAN = TT / SLICES, NACC = FAST ? 1 : TC * (W + 1);
  static_assert(NT % TC == 0 && TT % SLICES == 0 && (!FAST || SLICES * (W + 1) <= XR), "conv1d backward: slices of the tile");
${setup}
  __shared__ float xs[XR * PC], zs[ZR * PC], wsm[WS * TC], bsm[TC], accs[NACC];
  __shared__ int ss[SEQ ? XR : 1];
  const kiln_i64 cb = (kiln_i64)blockIdx.y * TC;  // the tile's first channel
  for (int i = threadIdx.x; i < TC * (WS + 1); i += NT) {
    const int cc = i % TC, j = i / TC;
    const kiln_i64 c = cb + cc;
    if (j < WS) wsm[j * TC + cc] = c < D && W <= 16 ? w_get(c, j) : 0.0f;
    else bsm[cc] = c < D ? bias_get(c) : 0.0f;
  }
  for (int i = threadIdx.x; i < NACC; i += NT) accs[i] = 0.0f;
  auto wt = [&](int cc, int j) -> float { return W <= 16 ? wsm[j * TC + cc] : cb + cc < D ? w_get(cb + cc, j) : 0.0f; };
  float acc[FAST ? W + 1 : 1];
#pragma unroll
  for (int j = 0; j < (FAST ? W + 1 : 1); j++) acc[j] = 0.0f;
  const int my_c = threadIdx.x % TC, my_slice = threadIdx.x / TC;
  const kiln_i64 n_tt = (L + TT - 1) / TT, items = B * n_tt;
  // both tiles' loads in flight before either is stored
  kiln_cv_loader<NT, XR, TC, X_CL, XT> lx;
  kiln_cv_loader<NT, ZR, TC, DY_CL, XT> ly;
  auto issue = [&](kiln_i64 it) {
    const kiln_i64 b = PF ? kiln_cv_opaque(it / n_tt) : it / n_tt, t0 = it % n_tt * TT;
    lx.issue(t0 - HP, cb, L, D, x_vec, [&](kiln_i64 c, kiln_i64 t) { return x_getr(b, c, t); });
    ly.issue(t0, cb, L, D, dy_vec, [&](kiln_i64 c, kiln_i64 t) { return dy_getr(b, c, t); });
  };
  if (PF && blockIdx.x < items) issue(blockIdx.x);
  for (kiln_i64 it = blockIdx.x; it < items; it += NCH) {
    const kiln_i64 b = it / n_tt, t0 = it % n_tt * TT, c0 = cb;
    __syncthreads();  // the weights are in; the previous item's readers are done
    auto xbar = [&](kiln_i64 c, kiln_i64 t) -> float {
      if (c >= D || t >= L || t < -H) return 0.0f;
      return t >= 0 ? x_get(b, c, t) : INIT ? init_get(b, c, t + H) : 0.0f;
    };
    if (!PF) issue(it);
    lx.commit(xs, t0 - HP, c0, xbar);
    ly.commit(zs, t0, c0, [&](kiln_i64 c, kiln_i64 t) -> float { return c < D && t < L ? dy_get(b, c, t) : 0.0f; });
    if (PF && it + NCH < items) issue(it + NCH);
    if (SEQ)
      for (int r = threadIdx.x; r < XR; r += NT) {
        const kiln_i64 t = t0 - HP + r;
        ss[r] = t >= 0 && t < L ? seq_get(b, t) : -1;
      }
    __syncthreads();
    // tap j of step t0 + r reads xs row r + HP - H + j, where its token is of the same sequence
    auto tap = [&](int r, int j) -> bool { return !SEQ || ss[r + HP - H + j] == ss[r + HP]; };
    if (SILU) {
      for (int i = threadIdx.x; i < ZR * TC; i += NT) {
        const int r = i / TC, cc = i % TC;
        float z = bsm[cc];
#pragma unroll UNROLL
        for (int j = 0; j < W; j++)
          if (tap(r, j)) z += wt(cc, j) * xs[(r + HP - H + j) * PC + cc];
        const float sg = kiln_cv_sigmoid(z);
        zs[r * PC + cc] *= sg * (1.0f + z * (1.0f - sg));
      }
      __syncthreads();
    }
    // dweight, dbias: the tile's own steps (dz past L is 0)
    if (FAST) {
#pragma unroll
      for (int k = 0; k < SPAN; k++) {
        const int r = my_slice * SPAN + k;
        const float dz = zs[r * PC + my_c];
#pragma unroll
        for (int j = 0; j < W; j++)
          if (tap(r, j)) acc[j] += dz * xs[(r + HP - H + j) * PC + my_c];
        acc[W] += dz;
      }
    } else {
      for (int p = threadIdx.x; p < NACC; p += NT) {
        const int cc = p % TC, j = p / TC;
        float s = 0.0f;
        for (int r = 0; r < TT; r++) {
          const float dz = zs[r * PC + cc];
          s += j == W ? dz : tap(r, j) ? dz * xs[(r + HP - H + j) * PC + cc] : 0.0f;
        }
        accs[p] += s;
      }
    }
    // dx at step t0 + r: dz of steps t0 + r + H - j (zs row r + H - j) through tap j
    auto dxv = [&](int r, int cc) -> float {
      float s = 0.0f;
#pragma unroll UNROLL
      for (int j = 0; j < W; j++)
        if (!SEQ || ss[r + HP] == ss[r + HP + H - j]) s += wt(cc, j) * zs[(r + H - j) * PC + cc];
      const kiln_i64 t = t0 + r;
      if (DFIN && t >= L - H && t < L && c0 + cc < D) s += dfin_get(b, c0 + cc, t - L + H);
      return s;
    };
    kiln_cv_store<NT, TT, TC, V, DX_CL>(t0, c0, L, D, dx_vec, dxv,
                                        [&](kiln_i64 c, kiln_i64 t, float x) { dx_put(b, c, t, x); },
                                        [&](kiln_i64 c, kiln_i64 t, const float *v) { dx_putv(b, c, t, v); });
    // dinitial_states[s] = dx-bar[s]: dz of steps s - j >= 0 through tap j, and dfinal_states[s - L]
    if (DINIT && t0 == 0)
      for (int i = threadIdx.x; i < TC * H; i += NT) {
        const int cc = i % TC, s = i / TC;
        if (c0 + cc >= D) continue;
        float v = 0.0f;
        for (int j = 0; j <= s; j++) v += wt(cc, j) * zs[(s - j) * PC + cc];
        if (DFIN && s >= L) v += dfin_get(b, c0 + cc, s - L);
        dinit_put(b, c0 + cc, s, v);
      }
  }
  // the CTA's sums: FAST slices meet in xs (after every reader of the last item), in slice order
  float *row = ws + (kiln_i64)blockIdx.x * D * (W + 1);
  __syncthreads();
  if (FAST) {
#pragma unroll
    for (int j = 0; j <= W; j++) xs[(my_slice * (W + 1) + j) * PC + my_c] = acc[j];
    __syncthreads();
    for (int p = threadIdx.x; p < TC * (W + 1); p += NT) {
      const int cc = p % TC, j = p / TC;
      float s = 0.0f;
      for (int k = 0; k < SLICES; k++) s += xs[(k * (W + 1) + j) * PC + cc];
      if (cb + cc < D) row[(cb + cc) * (W + 1) + j] = s;
    }
  } else {
    for (int p = threadIdx.x; p < NACC; p += NT) {
      const int cc = p % TC, j = p / TC;
      if (cb + cc < D) row[(cb + cc) * (W + 1) + j] = accs[p];
    }
  }
}
