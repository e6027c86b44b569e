-- Softmax, log_softmax and their backward for the special-values test (tests/gpu/row_forms.t):
-- rows held in registers (H = 2048), ragged (H = 1000) and re-read (H = 65536).
local k = require "kiln"
local dims = { T = k.dynamic, H = { 1000, 2048, 65536 } }
return {
  k.graph "softmax" {
    dims = dims, dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, lse, mx, se = g:softmax(x, { generate_stats = true, generate_max = true, generate_sum_exp = true })
      return { y = y, lse = lse, mx = mx, se = se }
    end,
  },
  k.graph "log_softmax" {
    dims = dims, dtype = "bf16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, lse = g:log_softmax(x, { generate_stats = true })
      return { y = y, lse = lse }
    end,
  },
  k.graph "softmax_bwd" {
    dims = dims, dtype = "bf16",
    inputs = { dy = { "T", "H" }, y = { "T", "H" } },
    body = function(g, dy, y) return { dx = g:softmax_backward(dy, y) } end,
  },
  k.graph "log_softmax_bwd" {
    dims = dims, dtype = "bf16",
    inputs = { dy = { "T", "H" }, y = { "T", "H" } },
    body = function(g, dy, y) return { dx = g:log_softmax_backward(dy, y) } end,
  },
}
