// kiln attention engine, backward: the pre-pass of ${what}. Half a warp a query row (b, q head,
// i): Dsum = sum(dO o O) over the head dim, L2 = the forward's Stats in log2 units (+inf where the
// row takes no gradient: past seq_len_q, or no key and no sink), the sink's term of its gradient
// -e^(sink - Stats) Dsum, the row's fp32 dQ sums zeroed, and under DETERMINISTIC the counter of
// its block of BM rows.
extern "C" __global__ void __launch_bounds__(256) ${symbol}(${params}) {
  constexpr int BM = ${BM}, D = ${D};
  constexpr bool DETERMINISTIC = ${DETERMINISTIC};
${setup}
  const kiln_i64 rows = B * HQ * SQ, row = (kiln_i64)blockIdx.x * 16 + (threadIdx.x >> 4);
  const int c = threadIdx.x & 15;  // 8 elements of the row a lane, D / 8 lanes
  if (row >= rows) return;  // a whole half warp
  const int i = (int)(row % SQ), hq = (int)(row / SQ % HQ), b = (int)(row / SQ / HQ);
  float acc = 0.0f;
  if (c < D / 8) {
    const uint4 o = *reinterpret_cast<const uint4 *>(go + (kiln_i64)b * o_sb + (kiln_i64)hq * o_sh + (kiln_i64)i * o_ss + c * 8);
    const uint4 d = *reinterpret_cast<const uint4 *>(gdo + (kiln_i64)b * do_sb + (kiln_i64)hq * do_sh + (kiln_i64)i * do_ss + c * 8);
    const kiln_u32 ow[4] = { o.x, o.y, o.z, o.w }, dw[4] = { d.x, d.y, d.z, d.w };
#pragma unroll
    for (int e = 0; e < 4; e++)
      acc += ${TO_F32}((kiln_u16)(ow[e] & 0xffffu)) * ${TO_F32}((kiln_u16)(dw[e] & 0xffffu)) +
             ${TO_F32}((kiln_u16)(ow[e] >> 16)) * ${TO_F32}((kiln_u16)(dw[e] >> 16));
  }
#pragma unroll
  for (int x = 8; x > 0; x >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, x);
  float4 *dq = reinterpret_cast<float4 *>(ws + row * D);
  for (int x = c; x < D / 4; x += 16) dq[x] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (c == 0) {
    int lq, lk, delta;
    lengths(b, lq, lk, delta);
    const float L = stats_at(b, hq, i);
    const bool live = i < lq && L > -__int_as_float(0x7f800000);
    ws[rows * D + row] = live ? L * ${LOG2E} : __int_as_float(0x7f800000);
    ws[rows * (D + 1) + row] = live ? acc : 0.0f;
    ws[rows * (D + 2) + row] = live ? sink_term(hq, L, acc) : 0.0f;
    if (DETERMINISTIC && i % BM == 0)
      reinterpret_cast<kiln_u32 *>(ws + rows * (D + 3))[((kiln_i64)b * HQ + hq) * ((SQ + BM - 1) / BM) + i / BM] = 0u;
  }
}
