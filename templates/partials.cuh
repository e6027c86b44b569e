// kiln: ${what} from the per-CTA partial rows ws[G][${C}] of the previous kernel, added in a
// fixed order (8 strided slices per column, then the slices in order): deterministic. A
// slice loads its first ${per} partials before it adds them (one memory latency: all of them
// on the GPUs kiln targets), then any more (a larger GPU's) one at a time.
extern "C" __global__ void __launch_bounds__(256) ${symbol}(${params}) {
  constexpr int PER = ${per};  // partial rows a slice loads at once
  __shared__ float part_[8][32];
  const int lane = threadIdx.x & 31, sl = threadIdx.x >> 5;
  const int col = blockIdx.x * 32 + lane;
  kiln_i64 G = (${rows} + ${div} - 1) / ${div};  // the previous kernel's grid, capped by the SMs
  const kiln_i64 cap = ${cap};
  if (G > cap) G = cap;
  float a = ${init};
  kiln_pdl_wait();  // launched early (pdl): the partial rows are complete past this point
  kiln_pdl_launch_dependents();  // the stream's next kernel may start as this one's CTAs finish
  if (col < ${C}) {
    float v_[PER];  // the missing rows past G read as the neutral ${init}
#pragma unroll
    for (int i = 0; i < PER; i++) { const kiln_i64 gi = sl + 8 * i; v_[i] = gi < G ? ws[gi * ${C}LL + col] : ${init}; }
#pragma unroll
    for (int i = 0; i < PER; i++) { const float b = v_[i]; ${comb} }
#pragma unroll 1
    for (kiln_i64 gi = sl + 8 * PER; gi < G; gi += 8) { const float b = ws[gi * ${C}LL + col]; ${comb} }
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
