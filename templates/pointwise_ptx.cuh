// kiln pointwise engine: ${what}.
extern "C" __global__ void __launch_bounds__(${block}) ${symbol}(${params}) {
${body}
}
