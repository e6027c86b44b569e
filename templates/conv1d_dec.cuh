// kiln conv1d engine, short-sequence kernel (the decode update): ${what}.
// A thread a (batch entry, channel): the history (initial_states) and the LS new steps in
// registers, the LS outputs, and the last H steps of x-bar as final_states.
extern "C" __global__ void __launch_bounds__(${NT}) ${symbol}(${params}) {
  constexpr int NT = ${NT}, W = ${W}, H = W - 1, LS = ${LS};
${setup}
  const kiln_i64 i = (kiln_i64)blockIdx.x * NT + threadIdx.x;
  if (i >= B * D) return;
  const kiln_i64 c = i % D, b = i / D;
  float h[H + LS], w[W];
  int sq[LS];
#pragma unroll
  for (int s = 0; s < H; s++) h[s] = INIT ? init_get(b, c, s) : 0.0f;
#pragma unroll
  for (int t = 0; t < LS; t++) {
    h[H + t] = x_get(b, c, t);
    sq[t] = SEQ ? seq_get(b, t) : 0;
  }
#pragma unroll
  for (int j = 0; j < W; j++) w[j] = w_get(c, j);
  const float bias = bias_get(c);
#pragma unroll
  for (int t = 0; t < LS; t++) {
    const float z = kiln_cv_dec_step<W, H, SEQ>(bias, w, sq, t, [&](int i) { return h[i]; });
    y_put(b, c, t, SILU ? z * kiln_cv_sigmoid(z) : z);
  }
  if (FIN) {
#pragma unroll
    for (int s = 0; s < H; s++) fin_put(b, c, s, h[LS + s]);
  }
}
