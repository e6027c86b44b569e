// kiln softmax over a non-last axis: ${what}.
extern "C" __global__ void __launch_bounds__(${block}) ${symbol}(${params}) {
${shared}
${body}
}
