// kiln: zeroes the per-tensor amax outputs that the next kernel raises with atomicMax (that
// kernel starts at once, pdl, and waits for these zeros only before its atomics). This kernel
// starts early too (pdl at entry): it lets the next one go only once what ran before is complete.
extern "C" __global__ void __launch_bounds__(32) ${symbol}(${params}) {
  kiln_pdl_entry();
  if (threadIdx.x == 0) {
${body}
  }
}
