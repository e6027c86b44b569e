-- Rows too wide for one CTA's registers: split over a cluster of CTAs on sm_90+ where the kernel
-- meets its cluster once (row.lua, rowptx.lua: each CTA holds its part of the row, the CTAs'
-- reductions meet in distributed shared memory), else re-read from L2; KILN_PLAN=row.cluster=8
-- splits every one (tests/gpu/run checks both). The norms (inference, training, fused residual
-- and per-row fp8 quantize), softmax (staged in bf16 and fp16; with a sink and every statistic),
-- log_softmax, and the softmax backward, in bf16, fp16 and fp32; and rows 1024 threads hold (H = 24576, 32768: bf16
-- RMSNorm at two CTAs an SM, the fp16 layernorm and log_softmax re-read, the bf16 log-softmax
-- backward over a cluster of 4).
local k = require "kiln"
-- softmax with its log-sum-exp over rows of 65536 (staged over a cluster in 16-bit dtypes)
local function softmax_lse(name, dtype)
  return k.graph(name) {
    dims = { T = k.dynamic, H = { 65536 } }, dtype = dtype,
    inputs = { x = { "T", "H" } },
    body = function(g, x)
      local y, stats = g:softmax(x, { generate_stats = true })
      return { y = y, lse = stats }
    end,
  }
end
return {
  k.graph "wide_rmsnorm_residual_fp8_rowwise" {
    dims = { T = k.dynamic, H = { 24576, 65536 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
    body = function(g, x, r, w)
      local h = x + r
      local t = g:rmsnorm(h, w, { epsilon = 1e-6 })
      local am = g:reduction(t, { mode = "amax", dims = { "T", 1 }, dtype = "fp32" })
      local s = g:cast(g:max(am, 1e-12) * (1.0 / 448.0), "fp32")
      return { y = g:cast(t / s, "fp8_e4m3"), h = h, scale = s }
    end,
  },
  k.graph "wide_layernorm_train" {
    dims = { T = k.dynamic, H = { 32768, 65536 } }, dtype = "fp16",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b)
      local y, mean, inv = g:layernorm(x, w, b, { epsilon = 1e-5, phase = "training" })
      return { y = y, mean = mean, inv_var = inv }
    end,
  },
  k.graph "wide_layernorm_fp32" {
    dims = { T = k.dynamic, H = { 40960, 65536 } }, dtype = "fp32",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b)
      return { y = g:layernorm(x, w, b, { epsilon = 1e-5 }) }
    end,
  },
  k.graph "wide_rmsnorm_train" {
    dims = { T = k.dynamic, H = { 65536 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      local y, inv = g:rmsnorm(x, w, { epsilon = 1e-6, phase = "training" })
      return { y = y, inv_rms = inv }
    end,
  },
  k.graph "wide_rmsnorm_two_ctas" {
    dims = { T = k.dynamic, H = { 24576, 32768 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end,
  },
  k.graph "wide_log_softmax_bwd_bf16" {
    dims = { T = k.dynamic, H = { 24576 } }, dtype = "bf16",
    inputs = { dy = { "T", "H" }, y = { "T", "H" } },
    body = function(g, dy, y) return { dx = g:log_softmax_backward(dy, y) } end,
  },
  k.graph "wide_rmsnorm_fp32" {
    dims = { T = k.dynamic, H = { 32768 } }, dtype = "fp32",
    inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end,
  },
  softmax_lse("wide_softmax", "bf16"),
  softmax_lse("wide_softmax_fp16", "fp16"),
  k.graph "wide_softmax_sink_stats" {
    dims = { T = k.dynamic, H = { 65536 } }, dtype = "fp16",
    inputs = { x = { "T", "H" }, sink = { "T", 1, dtype = "fp32" } },
    body = function(g, x, sink)
      local y, lse, mx, se = g:softmax(x, sink, { generate_stats = true, generate_max = true, generate_sum_exp = true })
      return { y = y, lse = lse, mx = mx, se = se }
    end,
  },
  k.graph "wide_log_softmax" {
    dims = { T = k.dynamic, H = { 32768, 65536 } }, dtype = "fp16",
    inputs = { x = { "T", "H" } },
    body = function(g, x) return { y = g:log_softmax(x) } end,
  },
  k.graph "wide_log_softmax_bwd" {
    dims = { T = k.dynamic, H = { 65536 } }, dtype = "fp32",
    inputs = { dy = { "T", "H" }, y = { "T", "H" } },
    body = function(g, dy, y) return { dx = g:log_softmax_backward(dy, y) } end,
  },
  k.graph "wide_softmax_bwd" {
    dims = { T = k.dynamic, H = { 65536 } }, dtype = "bf16",
    inputs = { dy = { "T", "H" }, y = { "T", "H" } },
    body = function(g, dy, y) return { dx = g:softmax_backward(dy, y) } end,
  },
}
