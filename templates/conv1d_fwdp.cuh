// kiln conv1d engine, pipelined forward tile kernel: ${what}.
// A CTA takes TC channels x K consecutive tiles of TT steps of its batch entries (grid: groups
// of K time tiles, channel tiles, batch) and walks its items (batch entry, time tile) in order:
// the next item's x loads are issued (16-byte vectors into registers) as soon as the current
// item's x is in shared memory, so they are in flight during its math and y stores. An item is
// conv1d_fwd.cuh's tile: x-bar over [t0 - HP, t0 + TT) as fp32 (the halo read again from x or
// initial_states), y in vectors along y's contiguous axis.
extern "C" __global__ void __launch_bounds__(${NT}, KILN_CV_MINB(${MINB})) ${symbol}(${params}) {
  constexpr int NT = ${NT}, TC = ${TC}, TT = ${TT}, W = ${W}, H = W - 1, HP = ${HP}, V = ${V}, K = ${K};
  constexpr int ROWS = TT + HP, PC = TC + 1;
  static_assert(W <= 4, "conv1d pipelined forward: the fast widths");
${setup}
  __shared__ float xs[ROWS * PC], wsm[W * TC], bsm[TC];
  __shared__ int ss[SEQ ? ROWS : 1];
  for (int i = threadIdx.x; i < TC * (W + 1); i += NT) {
    const int cc = i % TC, j = i / TC;
    const kiln_i64 c = (kiln_i64)blockIdx.y * TC + cc;
    if (j < W) wsm[j * TC + cc] = c < D ? w_get(c, j) : 0.0f;
    else bsm[cc] = c < D ? bias_get(c) : 0.0f;
  }
  // the CTA's items: nb batch entries x nk time tiles (item i: batch entry blockIdx.z + i / nk
  // strides of gridDim.z, tile blockIdx.x * K + i % nk)
  const kiln_i64 tb = (kiln_i64)blockIdx.x * K, n_tt = (L + TT - 1) / TT;
  const kiln_i64 nk = n_tt - tb < K ? n_tt - tb : K;
  const kiln_i64 nb = B > blockIdx.z ? (B - blockIdx.z + gridDim.z - 1) / gridDim.z : 0;
  const kiln_i64 items = nk > 0 ? nb * nk : 0;
  auto item_b = [&](kiln_i64 i) { return (kiln_i64)blockIdx.z + i / nk * gridDim.z; };
  auto item_t = [&](kiln_i64 i) { return (tb + i % nk) * TT; };
  // x-bar at step t of batch entry b: x, the history before step 0, 0 past either end or D
  auto xbar = [&](kiln_i64 b, kiln_i64 c, kiln_i64 t) -> float {
    if (c >= D || t >= L || t < -H) return 0.0f;
    return t >= 0 ? x_get(b, c, t) : INIT ? init_get(b, c, t + H) : 0.0f;
  };
  kiln_cv_loader<NT, ROWS, TC, X_CL, XT> lx;
  auto issue = [&](kiln_i64 i) {
    const kiln_i64 b = kiln_cv_opaque(item_b(i)), t0 = item_t(i), c0 = (kiln_i64)blockIdx.y * TC;
    lx.issue(t0 - HP, c0, L, D, x_vec, [&](kiln_i64 c, kiln_i64 t) { return x_getr(b, c, t); });
  };
  if (items > 0) issue(0);
#pragma unroll 1
  for (kiln_i64 i = 0; i < items; i++) {
    // the item's place, recomputed (kiln_cv_opaque: no hoisted addresses held across items)
    const kiln_i64 b = kiln_cv_opaque(item_b(i)), t0 = item_t(i), c0 = kiln_cv_opaque((kiln_i64)blockIdx.y * TC);
    __syncthreads();  // the weights are in; the previous item's readers are done
    lx.commit(xs, t0 - HP, c0, [&](kiln_i64 c, kiln_i64 t) { return xbar(b, c, t); });
    if (i + 1 < items) issue(i + 1);
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
#pragma unroll
      for (int j = 0; j < W; j++) {
        if (SEQ && ss[row + j] != ss[r + HP]) continue;
        z += wsm[j * TC + cc] * xs[(row + j) * PC + cc];
      }
      return SILU ? z * kiln_cv_sigmoid(z) : z;
    };
    kiln_cv_store<NT, TT, TC, V, Y_CL>(t0, c0, L, D, y_vec, out,
                                       [&](kiln_i64 c, kiln_i64 t, float x) { y_put(b, c, t, x); },
                                       [&](kiln_i64 c, kiln_i64 t, const float *v) { y_putv(b, c, t, v); });
    // final_states: x-bar's last H steps, by the first time tile of each channel tile
    if (FIN && t0 == 0)
      for (int j = threadIdx.x; j < TC * H; j += NT) {
        const int cc = j % TC, s = j / TC;
        if (c0 + cc < D) fin_put(b, c0 + cc, s, xbar(b, c0 + cc, L + s - H));
      }
  }
  // L = 0 (no items): final_states is the history
  if (FIN && L == 0 && blockIdx.x == 0)
    for (kiln_i64 b = blockIdx.z; b < B; b += gridDim.z)
      for (int j = threadIdx.x; j < TC * H; j += NT) {
        const kiln_i64 c = (kiln_i64)blockIdx.y * TC + j % TC;
        if (c < D) fin_put(b, c, j / TC, xbar(b, c, j / TC - H));
      }
}
