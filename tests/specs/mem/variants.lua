-- Variants the memory-bound engines must get right: statistics outputs, sinks, biases,
-- backward with dbias, fp32 and fp16 tensors, an fp32 prologue value held across passes, a
-- ragged fp32 softmax, softmax, log_softmax and softmax's backward with fused ops.
local k = require "kiln"
local dims = { T = k.dynamic, H = { 1024 } }
return {
  k.graph "softmax_stats_sink" {
    dims = dims, dtype = "bf16",
    inputs = { x = { "T", "H" }, sink = { "T", 1, dtype = "fp32" } },
    body = function(g, x, sink)
      local y, lse, mx, se = g:softmax(x, sink, { generate_stats = true, generate_max = true, generate_sum_exp = true })
      return { y = y, lse = lse, mx = mx, se = se }
    end,
  },
  k.graph "log_softmax_log2" {
    dims = dims, dtype = "fp16",
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, lse = g:log_softmax(x, { generate_stats = true, stats_use_log2 = true })
      return { y = y, lse2 = lse }
    end,
  },
  k.graph "rmsnorm_bias_fp32" {
    dims = dims, dtype = "fp32",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" }, eps = { scalar = true } },
    body = function(g, x, w, b, eps)
      local y, r = g:rmsnorm(x, w, b, eps, { phase = "training" })
      return { y = y, r = r }
    end,
  },
  k.graph "rmsnorm_bwd_dbias" {
    dims = dims, dtype = "bf16",
    inputs = { dy = { "T", "H" }, x = { "T", "H" }, w = { "H", dtype = "fp32" }, rstd = { "T", 1, dtype = "fp32" } },
    body = function(g, dy, x, w, rstd)
      local dx, dw, db = g:rmsnorm_backward(dy, x, w, rstd, { has_dbias = true })
      return { dx = dx, dw = dw, db = db }
    end,
  },
  k.graph "layernorm_fp32_gelu" {
    dims = dims, dtype = "bf16",
    inputs = { x = { "T", "H", dtype = "fp32" }, w = { "H" }, b = { "H" }, r = { "T", "H" } },
    body = function(g, x, w, b, r)
      local y = g:layernorm(x * 2.0 + r, w, b, { epsilon = 1e-5 })
      return { y = g:gelu(y) }
    end,
  },
  -- softmax with fused ops: a prologue whose output is also written, an epilogue that alone
  -- reads y (y not an output); held (1000 ragged, 4096) and re-read (32768) rows
  k.graph "softmax_fused" {
    dims = { T = k.dynamic, H = { 1000, 4096, 32768 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, s = { scalar = true, dtype = "fp32" } },
    body = function(g, x, r, s)
      local h = x * s + r
      return { h = h, z = g:softmax(h) * 0.5 + 0.25 }
    end,
  },
  k.graph "log_softmax_fused_fp32" {
    dims = { T = k.dynamic, H = { 2048, 32768 } }, dtype = "fp32",
    inputs = { x = { "T", "H" }, m = { "T", "H", dtype = "bf16" } },
    body = function(g, x, m)
      local y = g:log_softmax(g:max(x, m) - 1.5)
      return { y = y, e = g:exp(y) }
    end,
  },
  k.graph "softmax_bwd_fused" {
    dims = { T = k.dynamic, H = { 1000, 4096 } }, dtype = "bf16",
    inputs = { dy = { "T", "H" }, y = { "T", "H" }, m = { "T", "H" } },
    body = function(g, dy, y, m)
      local dx = g:softmax_backward(dy * m, y)
      -- q from dx as stored, bf16 as dx: the reference's dx may round one bf16 ulp apart
      -- (fp32 against fp64 sums), more than an fp32 or fp16 tolerance allows (1-42 elements of
      -- 10^4-10^6 on the H200, 2026-12-03)
      return { dx = dx, q = g:cast(dx * 4.0, "bf16") }
    end,
  },
  k.graph "softmax_fp32_ragged" {
    dims = { T = k.dynamic, H = { 1000 } }, dtype = "fp32",
    inputs = { x = { "T", "H" } },
    body = function(g, x) return { y = g:softmax(x) } end,
  },
  k.graph "softmax_bwd_residual" {
    dims = dims, dtype = "bf16",
    inputs = { dy = { "T", "H" }, y = { "T", "H" }, g2 = { "T", "H" } },
    body = function(g, dy, y, g2)
      return { dx = g:softmax_backward(dy, y) + g2 }
    end,
  },
}
