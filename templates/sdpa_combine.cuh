// kiln attention engine, decode path: the key splits of ${what} combined. A warp a query row
// (batch, q head, position): the splits' maxima and sums (workspace, score units) give the
// row's max and sum, O is the splits' O scaled to that max, then the row's end (statistics,
// sink, O's factor). Batch entries whose keys fit one split were finished by the split kernel.
${splits}

extern "C" __global__ void __launch_bounds__(128) ${symbol}(${params}) {
  constexpr int BM = ${BM}, D = ${D}, DV = ${DV}, BN = ${BN}, SQR = ${SQ};
${setup}
  constexpr int G = HQ / HK, ROWS = G * SQR;
  kiln_pdl_wait();  // launched early (pdl): the splits' partials are complete past this point
  const int lane = threadIdx.x & 31;
  const kiln_i64 q = (kiln_i64)blockIdx.x * 4 + (threadIdx.x >> 5);
  if (q >= B * HQ * SQR) return;
  const int s = (int)(q % SQR), hq = (int)(q / SQR % HQ), b = (int)(q / SQR / HQ);
  int lq, lk, delta, jlo, jhi, per, n_split;
  lengths(b, lq, lk, delta);
  kv_blocks(0, lq, lk, delta, BN, jlo, jhi);
  const kiln_i64 ns = kiln_decode_splits(B, SKV, sms);
  kiln_decode_deal(jhi - jlo, ns, per, n_split);
  if (n_split == 1) return;
  const float NEG_INF = -__int_as_float(0x7f800000);
  const int hk = hq / G, row = (hq % G) * SQR + s;
  const kiln_i64 pitch = (kiln_i64)ROWS * (DV + 2);  // an item's partials: its rows of O, max, sum
  const float *p = ws + ((kiln_i64)b * HK + hk) * ns * pitch + (kiln_i64)row * (DV + 2);
  float mf = NEG_INF;
  for (int i = lane; i < n_split; i += 32) mf = fmaxf(mf, p[i * pitch + DV]);
#pragma unroll
  for (int x = 16; x > 0; x >>= 1) mf = fmaxf(mf, __shfl_xor_sync(0xffffffffu, mf, x));
  const float mfs = mf == NEG_INF ? 0.0f : mf * sl2;
  float l = 0.0f;
  for (int i = lane; i < n_split; i += 32) l += p[i * pitch + DV + 1] * kiln_exp2(p[i * pitch + DV] * sl2 - mfs);
#pragma unroll
  for (int x = 16; x > 0; x >>= 1) l += __shfl_xor_sync(0xffffffffu, l, x);
  float f = 0.0f;
  if (lane == 0) f = row_end(b, hq, s, mf, l, s >= lq);
  f = __shfl_sync(0xffffffffu, f, 0);
  for (int col = 2 * lane; col < DV; col += 64) {
    float v0 = 0.0f, v1 = 0.0f;
    for (int i = 0; i < n_split; i++) {
      const float w = kiln_exp2(p[i * pitch + DV] * sl2 - mfs);
      v0 += p[i * pitch + col] * w;
      v1 += p[i * pitch + col + 1] * w;
    }
    store_o(b, hq, s, col, v0 * f, v1 * f);
  }
}
