// kiln row engine: ${what}.
extern "C" __global__ void __launch_bounds__(${block}${min_blocks}) ${symbol}(${params}) {
${shared}
${body}
}
