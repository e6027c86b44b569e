-- Softmax, log_softmax and their backwards over an axis that is not the last (axissoftmax.lua):
-- over channels (staged in shared memory) and over a long middle axis (x read again), in every
-- dtype, a column count that is odd (one element a thread) or holds the dynamic dim, with the
-- statistics outputs, a fused prologue and epilogue (an epilogue reading memory: read again).
local k = require "kiln"
return {
  k.graph "softmax_mid_bf16" {
    dims = { T = k.dynamic, S = 300, H = 64 }, dtype = "bf16",
    inputs = { x = { "T", "S", "H" } },
    body = function(G, x) return { y = G:softmax(x, { axis = 1 }) } end,
  },
  k.graph "log_softmax_chan_odd_fp32" {
    dims = { T = k.dynamic, C = 21, H = 7, W = 9 }, dtype = "fp32",
    inputs = { x = { "T", "C", "H", "W" } },
    body = function(G, x) return { y = G:log_softmax(x, { axis = 1 }) } end,
  },
  k.graph "softmax_axis0_fp16" {
    dims = { S = 37, T = k.dynamic, H = 40 }, dtype = "fp16",
    inputs = { x = { "S", "T", "H" } },
    body = function(G, x) return { y = G:softmax(x, { axis = 0 }) } end,
  },
  k.graph "softmax_stats_bf16" {
    dims = { T = k.dynamic, S = 16, H = 128 }, dtype = "bf16",
    inputs = { x = { "T", "S", "H" } },
    body = function(G, x)
      local y, lse, mx, se = G:softmax(x, { axis = -2, generate_stats = true, generate_max = true, generate_sum_exp = true })
      return { y = y, lse = lse, mx = mx, se = se }
    end,
  },
  k.graph "softmax_fused_bf16" {
    dims = { T = k.dynamic, C = 19, HW = 256 }, dtype = "bf16",
    inputs = { x = { "T", "C", "HW" }, bias = { 1, "C", 1 }, mask = { "T", 1, "HW" } },
    body = function(G, x, bias, mask)
      local p = G:softmax(G:add(G:mul(x, 0.5), bias), { axis = 1 })
      return { y = G:cast(G:mul(p, mask), "fp32") }
    end,
  },
  -- y stored and read by the epilogue as stored (bf16; z = 4 y is exact in bf16 either way)
  k.graph "softmax_out_read_bf16" {
    dims = { T = k.dynamic, C = 24, HW = 64 }, dtype = "bf16",
    inputs = { x = { "T", "C", "HW" } },
    body = function(G, x)
      local y = G:softmax(x, { axis = 1 })
      return { y = y, z = G:cast(G:mul(y, 4.0), "bf16") }
    end,
  },
  k.graph "softmax_bwd_chan_fp32" {
    dims = { T = k.dynamic, C = 21, HW = 1000 }, dtype = "fp32",
    inputs = { dy = { "T", "C", "HW" }, y = { "T", "C", "HW" } },
    body = function(G, dy, y) return { dx = G:softmax_backward(dy, y, { axis = 1 }) } end,
  },
  k.graph "log_softmax_bwd_mid_bf16" {
    dims = { T = k.dynamic, S = 300, H = 64 }, dtype = "bf16",
    inputs = { dy = { "T", "S", "H" }, y = { "T", "S", "H" } },
    body = function(G, dy, y) return { dx = G:log_softmax_backward(dy, y, { axis = 1 }) } end,
  },
}
