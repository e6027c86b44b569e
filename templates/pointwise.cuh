// kiln pointwise engine: one fused kernel for a DAG of pointwise ops. Each thread owns
// ${vec} consecutive elements of the flattened output; full-size operands move with
// 16-byte vector loads and stores, broadcast operands are loaded once per vector.
extern "C" __global__ void __launch_bounds__(${block}) ${symbol}(${params}) {
  kiln_pdl_wait();  // launched early (pdl at entry): what ran before is complete past this point
  kiln_pdl_launch_dependents();  // the next kernel may take SMs as this grid's last CTAs finish
  const kiln_i64 n = ${numel};
  const kiln_i64 i0 = ((kiln_i64)blockIdx.x * ${block} + threadIdx.x) * ${vec};
  if (i0 >= n) return;
${prologue}
#pragma unroll
  for (int j = 0; j < ${vec}; j++) {
${body}
  }
${epilogue}
}
