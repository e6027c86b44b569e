-- softmax and log_softmax over the last axis, single pass with the row in registers; the
-- softmax graph also returns the log-sum-exp per row (what a backward or a loss needs).
local k = require "kiln"
local dims = { T = k.dynamic, H = { 2048, 4096, 8192 } }
return {
  k.graph "softmax" {
    doc = "y = softmax(x) over the last axis; lse = log(sum(exp(x))) per row (fp32)",
    dims = dims,
    dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, lse = g:softmax(x, { generate_stats = true })
      return { y = y, lse = lse }
    end,
  },
  k.graph "log_softmax" {
    doc = "y = log_softmax(x) over the last axis",
    dims = dims,
    dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      return { y = g:log_softmax(x) }
    end,
  },
}
