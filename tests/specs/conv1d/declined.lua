-- conv1d graphs the conv1d engine declines, each by name in `kiln explain` (tests/conv1d.t):
-- x (and dout) with neither the time axis nor the channel axis contiguous.
local kiln = require "kiln"
local dims = { B = kiln.dynamic, T = kiln.dynamic }
local strided = { "B", 64, "T", strides = { "T*128", 2, 128 } }
return {
  kiln.graph "strided_x" {
    dims = dims, dtype = "bf16", inputs = { x = strided, w = { 64, 4 } },
    body = function(g, x, w) return { y = g:causal_conv1d(x, w) } end,
  },
  kiln.graph "strided_dout" {
    dims = dims, dtype = "bf16", inputs = { x = { "B", 64, "T" }, w = { 64, 4 }, dy = strided },
    body = function(g, x, w, dy)
      local dx, dw = g:causal_conv1d_backward(x, w, dy)
      return { dx = dx, dw = dw }
    end,
  },
}
