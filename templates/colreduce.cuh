// kiln column reduction: ${what}; one partial row per CTA into the workspace.
extern "C" __global__ void __launch_bounds__(${block}) ${symbol}(${params}) {
${shared}
${body}
}
