// kiln conv1d engine, forward tile kernel: ${what}.
// A CTA takes TC channels x TT steps of one batch entry (grid: time tiles, channel tiles, batch):
// x-bar over steps [t0 - HP, t0 + TT) into shared memory as fp32 (HP >= W - 1 rows of halo
// before the tile: x, or initial_states before step 0), then the tile's y in vectors along y's
// contiguous axis, the weights and bias of its channels in shared memory.
extern "C" __global__ void __launch_bounds__(${NT}, KILN_CV_MINB(${MINB})) ${symbol}(${params}) {
  constexpr int NT = ${NT}, TC = ${TC}, TT = ${TT}, W = ${W}, H = W - 1, HP = ${HP}, V = ${V};
  constexpr int ROWS = TT + HP, PC = TC + 1, WS = W <= 16 ? W : 1, UNROLL = W <= 16 ? W : 4;
${setup}
  __shared__ float xs[ROWS * PC], wsm[WS * TC], bsm[TC];
  __shared__ int ss[SEQ ? ROWS : 1];
  for (int i = threadIdx.x; i < TC * (WS + 1); i += NT) {
    const int cc = i % TC, j = i / TC;
    const kiln_i64 c = (kiln_i64)blockIdx.y * TC + cc;
    if (j < WS) wsm[j * TC + cc] = c < D && W <= 16 ? w_get(c, j) : 0.0f;
    else bsm[cc] = c < D ? bias_get(c) : 0.0f;
  }
#pragma unroll 1
  for (kiln_i64 b = blockIdx.z; b < B; b += gridDim.z) {
    // the tile's place, recomputed each batch entry (kiln_cv_opaque)
    const kiln_i64 t0 = kiln_cv_opaque((kiln_i64)blockIdx.x * TT), c0 = kiln_cv_opaque((kiln_i64)blockIdx.y * TC);
    __syncthreads();  // the weights are in; the previous batch entry's readers are done
    // weights past 16 taps are read where used (L1 holds the tile's channels)
    auto wt = [&](int cc, int j) -> float { return W <= 16 ? wsm[j * TC + cc] : c0 + cc < D ? w_get(c0 + cc, j) : 0.0f; };
    // x-bar at step t: x, the history before step 0, 0 past either end or D
    auto xbar = [&](kiln_i64 c, kiln_i64 t) -> float {
      if (c >= D || t >= L || t < -H) return 0.0f;
      return t >= 0 ? x_get(b, c, t) : INIT ? init_get(b, c, t + H) : 0.0f;
    };
    kiln_cv_loader<NT, ROWS, TC, X_CL, XT> lx;
    lx.issue(t0 - HP, c0, L, D, x_vec, [&](kiln_i64 c, kiln_i64 t) { return x_getr(b, c, t); });
    lx.commit(xs, t0 - HP, c0, xbar);
    if (SEQ)
      for (int r = threadIdx.x; r < ROWS; r += NT) {
        const kiln_i64 t = t0 - HP + r;
        ss[r] = t >= 0 && t < L ? seq_get(b, t) : -1;
      }
    __syncthreads();
    // step t0 + r: tap j reads row r + HP - H + j (another sequence's token: no tap)
    auto out = [&](int r, int cc) -> float {
      const int row = r + HP - H;
      float z = bsm[cc];
#pragma unroll UNROLL
      for (int j = 0; j < W; j++) {
        if (SEQ && ss[row + j] != ss[r + HP]) continue;
        z += wt(cc, j) * xs[(row + j) * PC + cc];
      }
      return SILU ? z * kiln_cv_sigmoid(z) : z;
    };
    kiln_cv_store<NT, TT, TC, V, Y_CL>(t0, c0, L, D, y_vec, out,
                                       [&](kiln_i64 c, kiln_i64 t, float x) { y_put(b, c, t, x); },
                                       [&](kiln_i64 c, kiln_i64 t, const float *v) { y_putv(b, c, t, v); });
    // final_states: x-bar's last H steps, by the first time tile of each channel tile
    if (FIN && blockIdx.x == 0)
      for (int i = threadIdx.x; i < TC * H; i += NT) {
        const int cc = i % TC, s = i / TC;
        if (c0 + cc < D) fin_put(b, c0 + cc, s, xbar(c0 + cc, L + s - H));
      }
  }
}
