-- Softmax and log_softmax backward over the last axis from the forward's output:
-- dx = y * (dy - sum(dy * y)) and dx = dy - exp(y) * sum(dy).
local k = require "kiln"
local dims = { T = k.dynamic, H = { 2048, 4096, 8192 } }
return {
  k.graph "softmax_bwd" {
    doc = "softmax backward: dx from dy and the forward output y",
    dims = dims,
    dtype = "bf16",
    inputs = { dy = { "T", "H" }, y = { "T", "H" } },
    body = function(g, dy, y)
      return { dx = g:softmax_backward(dy, y) }
    end,
  },
  k.graph "log_softmax_bwd" {
    doc = "log_softmax backward: dx from dy and the forward output (log-probabilities)",
    dims = dims,
    dtype = "bf16",
    inputs = { dy = { "T", "H" }, y = { "T", "H" } },
    body = function(g, dy, y)
      return { dx = g:log_softmax_backward(dy, y) }
    end,
  },
}
