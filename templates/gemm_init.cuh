// kiln gemm engine: runs before the GEMM kernel. Zeroes the per-tensor amax outputs it raises
// with atomicMax and the stream-K flags at the start of the workspace (kernels must not assume
// a zeroed workspace). The GEMM starts at once (pdl) and waits for these zeros only before it
// uses them. This kernel starts early too (pdl at entry): it lets the GEMM go only once what
// ran before is complete, since the GEMM reads its operands before it waits.
extern "C" __global__ void __launch_bounds__(${THREADS}) ${symbol}(${params}) {
  kiln_pdl_entry();
${body}
}
