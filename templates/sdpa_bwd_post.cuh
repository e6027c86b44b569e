// kiln attention engine, backward: the post-pass of ${what}. dQ = the fp32 sums times the
// scale, 8 elements a thread; the CTAs past dQ's (one a q head, under SINK) sum the sink's
// per-row terms over batch entries and rows in a fixed order into its gradient.
extern "C" __global__ void __launch_bounds__(256) ${symbol}(${params}) {
  constexpr int D = ${D};
${setup}
  const kiln_i64 rows = B * HQ * SQ, n_dq = (rows * (D / 8) + 255) / 256;
  if ((kiln_i64)blockIdx.x < n_dq) {
    const kiln_i64 x = (kiln_i64)blockIdx.x * 256 + threadIdx.x, row = x / (D / 8);
    const int c = (int)(x % (D / 8));
    if (row >= rows) return;
    const int i = (int)(row % SQ), hq = (int)(row / SQ % HQ), b = (int)(row / SQ / HQ);
    const float4 *a = reinterpret_cast<const float4 *>(ws + row * D + c * 8);
    const float4 u = a[0], v = a[1];
    uint4 r;
    r.x = ${PACK}(u.x * scale, u.y * scale);
    r.y = ${PACK}(u.z * scale, u.w * scale);
    r.z = ${PACK}(v.x * scale, v.y * scale);
    r.w = ${PACK}(v.z * scale, v.w * scale);
    *reinterpret_cast<uint4 *>(gdq + (kiln_i64)b * dq_sb + (kiln_i64)hq * dq_sh + (kiln_i64)i * dq_ss + c * 8) = r;
    return;
  }
#if ${SINK}  // the sink's gradient
  {
    __shared__ float part[256];
    const int hq = (int)(blockIdx.x - n_dq);
    const float *term = ws + rows * (D + 2);
    float s = 0.0f;
    for (kiln_i64 x = threadIdx.x; x < B * SQ; x += 256) s += term[((x / SQ) * HQ + hq) * SQ + x % SQ];
    part[threadIdx.x] = s;
    __syncthreads();
#pragma unroll
    for (int w = 128; w > 0; w >>= 1) {
      if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0) dsink_at(hq) = part[0];
  }
#endif
}
