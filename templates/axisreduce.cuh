// kiln reduction over several axes: ${what}.
extern "C" __global__ void __launch_bounds__(${block}${minb}) ${symbol}(${params}) {
${shared}
${body}
}
