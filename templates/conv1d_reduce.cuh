// kiln conv1d engine, backward: the NCH chunks' sums of ${what} added in chunk order (a thread a
// (channel, tap); tap W is dbias), written as dweight and dbias.
extern "C" __global__ void __launch_bounds__(256) ${symbol}(${params}) {
  constexpr int W = ${W}, NCH = ${NCH};
${setup}
  const kiln_i64 p = (kiln_i64)blockIdx.x * 256 + threadIdx.x, n = D * (W + 1);
  if (p >= n) return;
  float s = 0.0f;
#pragma unroll 4
  for (int k = 0; k < NCH; k++) s += ws[k * n + p];
  const kiln_i64 c = p / (W + 1);
  const int j = (int)(p % (W + 1));
  if (j < W) dw_put(c, j, s);
  else if (DBIAS) dbias_put(c, s);
}
