// kiln: ${what} from the per-CTA partial rows ws[G][${C}] of the previous kernel, added in a
// fixed order (8 strided slices per column, then the slices in order): deterministic.
extern "C" __global__ void __launch_bounds__(256) ${symbol}(${params}) {
  __shared__ float part_[8][32];
  const int lane = threadIdx.x & 31, sl = threadIdx.x >> 5;
  const int col = blockIdx.x * 32 + lane;
  kiln_i64 G = (${rows} + ${div} - 1) / ${div};  // the previous kernel's grid
  if (G > ${max}) G = ${max};
  float a = ${init};
  if (col < ${C}) {
#pragma unroll 4
    for (kiln_i64 gi = sl; gi < G; gi += 8) { const float b = ws[gi * ${C}LL + col]; ${comb} }
  }
  part_[sl][lane] = a;
  __syncthreads();
  if (sl == 0 && col < ${C}) {
#pragma unroll
    for (int s = 1; s < 8; s++) { const float b = part_[s][lane]; ${comb} }
${tail}
  }
${after}
}
