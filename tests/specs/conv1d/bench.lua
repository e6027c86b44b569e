-- The conv1d cases of bench/bench_conv1d.py: width 4, bf16, D = 8192, x (and dout) channel-last
-- as FLA takes them ([B, T, D] buffers), silu, bias; the forward, the backward, and the decode
-- update (one token a sequence, the conv state in and out).
local kiln = require "kiln"
local D = 8192
local cl = { "B", D, "T", strides = { "T*" .. D, 1, D } }
return {
  kiln.graph "conv1d_fwd" {
    dims = { B = kiln.dynamic, T = kiln.dynamic }, dtype = "bf16",
    inputs = { x = cl, w = { D, 4 }, b = { D } },
    body = function(g, x, w, b) return { y = g:causal_conv1d(x, w, b, { activation = "silu" }) } end,
  },
  kiln.graph "conv1d_bwd" {
    dims = { B = kiln.dynamic, T = kiln.dynamic }, dtype = "bf16",
    inputs = { x = cl, w = { D, 4 }, b = { D }, dy = cl },
    body = function(g, x, w, b, dy)
      local dx, dw, db = g:causal_conv1d_backward(x, w, dy, b, { activation = "silu" })
      return { dx = dx, dw = dw, db = db }
    end,
  },
  kiln.graph "conv1d_update" {
    dims = { B = kiln.dynamic }, dtype = "bf16",
    inputs = { x = { "B", D, 1, strides = { D, 1, D } }, w = { D, 4 }, b = { D }, h0 = { "B", D, 3 } },
    body = function(g, x, w, b, h0)
      local y, fin = g:causal_conv1d(x, w, b, nil, h0, { activation = "silu", return_final_states = true })
      return { y = y, fin = fin }
    end,
  },
}
