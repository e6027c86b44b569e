// kiln pointwise engine: one fused kernel for a DAG of pointwise ops. Each thread owns
// ${vec} consecutive elements of the flattened output; full-size operands move with
// 16-byte vector loads and stores, broadcast operands are loaded once per vector.
extern "C" __global__ void __launch_bounds__(${block}) ${symbol}(${params}) {
  kiln_pdl_entry();  // launched early: what ran before is complete past this point
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
