// kiln conv1d engine, short-sequence kernel in vectors (the decode update): ${what}.
// A thread a (batch entry, V channels): the history (initial_states) and the LS new steps of its
// channels in registers, the LS outputs, and the last H steps of x-bar as final_states. Each
// tensor moves in 16-byte vectors where its block of the thread's channels is contiguous and
// aligned (x channel-last; y at LS = 1; the states [B, D, H] row-major), else element by element.
extern "C" __global__ void __launch_bounds__(${NT}) ${symbol}(${params}) {
  constexpr int NT = ${NT}, W = ${W}, H = W - 1, LS = ${LS}, V = ${V};
${setup}
  const kiln_i64 ng = (D + V - 1) / V;
  // the grid covers B D / V threads: the last ones go round again where D is not a multiple of V
#pragma unroll 1
  for (kiln_i64 i = (kiln_i64)blockIdx.x * NT + threadIdx.x; i < B * ng; i += (kiln_i64)gridDim.x * NT) {
    const kiln_i64 b = i / ng, c0 = i % ng * V;
    const bool whole = c0 + V <= D;
    float h[V][H + LS];
    // the history: channel-major blocks of H steps (element e of the block: channel e / H, step e % H)
    if (INIT && whole && init_blk) {
#pragma unroll
      for (int k = 0; k < V * H / init_BV; k++) {
        float v[init_BV];
        init_BT::cvt(init_blkr(b, c0, k), v);
#pragma unroll
        for (int e = 0; e < init_BV; e++) h[(k * init_BV + e) / H][(k * init_BV + e) % H] = v[e];
      }
    } else {
#pragma unroll
      for (int cc = 0; cc < V; cc++)
#pragma unroll
        for (int s = 0; s < H; s++) h[cc][s] = INIT && c0 + cc < D ? init_get(b, c0 + cc, s) : 0.0f;
    }
#pragma unroll
    for (int t = 0; t < LS; t++) {
      if (X_CL && x_vec && whole) {
        float v[V];
        XT::cvt(x_getr(b, c0, t), v);
#pragma unroll
        for (int cc = 0; cc < V; cc++) h[cc][H + t] = v[cc];
      } else {
#pragma unroll
        for (int cc = 0; cc < V; cc++) h[cc][H + t] = c0 + cc < D ? x_get(b, c0 + cc, t) : 0.0f;
      }
    }
    int sq[LS];
#pragma unroll
    for (int t = 0; t < LS; t++) sq[t] = SEQ ? seq_get(b, t) : 0;
    float y[V][LS];
#pragma unroll
    for (int cc = 0; cc < V; cc++) {
      const kiln_i64 c = c0 + cc < D ? c0 + cc : D - 1;  // past D: computed, not stored
      float w[W];
#pragma unroll
      for (int j = 0; j < W; j++) w[j] = w_get(c, j);
      const float bias = bias_get(c);
#pragma unroll
      for (int t = 0; t < LS; t++) {
        const float z = kiln_cv_dec_step<W, H, SEQ>(bias, w, sq, t, [&](int i) { return h[cc][i]; });
        y[cc][t] = SILU ? z * kiln_cv_sigmoid(z) : z;
      }
    }
    if (LS == 1 && y_blk && whole) {
      float v[V];
#pragma unroll
      for (int cc = 0; cc < V; cc++) v[cc] = y[cc][0];
      y_blkw(b, c0, 0, v);
    } else {
#pragma unroll
      for (int cc = 0; cc < V; cc++)
#pragma unroll
        for (int t = 0; t < LS; t++)
          if (c0 + cc < D) y_put(b, c0 + cc, t, y[cc][t]);
    }
    if (FIN) {
      if (whole && fin_blk) {
#pragma unroll
        for (int k = 0; k < V * H / fin_BV; k++) {
          float v[fin_BV];
#pragma unroll
          for (int e = 0; e < fin_BV; e++) v[e] = h[(k * fin_BV + e) / H][LS + (k * fin_BV + e) % H];
          fin_blkw(b, c0, k, v);
        }
      } else {
#pragma unroll
        for (int cc = 0; cc < V; cc++)
#pragma unroll
          for (int s = 0; s < H; s++)
            if (c0 + cc < D) fin_put(b, c0 + cc, s, h[cc][LS + s]);
      }
    }
  }
}
