-- The forward norms over the dtypes, layouts and fused ops of their PTX form (and the CUDA
-- form it falls back to): fp16 and fp32 rows, statistics outputs, a runtime epsilon, narrow
-- rows (several rows per warp), rows re-read from L2 (H = 65536), a per-row and a
-- per-tensor input, the ops with a PTX form, an fp8 e5m2 output with amax, a norm of another
-- kernel's output; and in the CUDA form a ragged row (H = 1000) and a gelu epilogue.
local k = require "kiln"
return {
  k.graph "layernorm_fp16_train" {
    dims = { T = k.dynamic, H = { 256, 1024, 65536 } }, dtype = "fp16",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H", dtype = "fp32" } },
    body = function(g, x, w, b)
      local y, mean, inv_std = g:layernorm(x, w, b, { epsilon = 1e-5, phase = "training" })
      return { y = y, mean = mean, inv_std = inv_std }
    end,
  },
  k.graph "rmsnorm_fp32_eps" {
    dims = { T = k.dynamic, H = { 2048 } }, dtype = "fp32",
    inputs = { x = { "T", "H" }, w = { "H", dtype = "bf16" }, eps = { scalar = true } },
    body = function(g, x, w, eps)
      local y, r = g:rmsnorm(x, w, nil, eps, { phase = "training" })
      return { y = y, r = r }
    end,
  },
  k.graph "layernorm_narrow" {
    dims = { T = k.dynamic, H = { 128 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b) return { y = g:layernorm(x, w, b, { epsilon = 1e-5 }) } end,
  },
  k.graph "rmsnorm_ops_e5m2" {
    dims = { T = k.dynamic, H = { 4096, 65536 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" }, gate = { "T", "H" },
               rs = { "T", 1, dtype = "fp32" }, s = { 1, dtype = "fp32" } },
    body = function(g, x, r, w, gate, rs, s)
      local h = g:add_square(x, r)
      local y = g:rmsnorm(h, w, { epsilon = 1e-6 })
      local z = g:sigmoid(y) * g:exp(gate * 0.25) + g:abs(g:neg(y)) / 3.0 * rs
      return {
        h = h,
        q = g:cast(g:min(g:max(z * s, y - 1.0), y * 2.0), "fp8_e5m2"),
        amax = g:reduction(y, { mode = "amax", dims = { 1, 1 }, dtype = "fp32" }),
      }
    end,
  },
  k.graph "rmsnorm_after_kernel" {
    dims = { T = k.dynamic, H = { 2048 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
    body = function(g, x, r, w)
      local h = g:max(x - r, x * 0.5)  -- not fused (two nodes): the norm reads what another kernel wrote
      return { h = h, y = g:rmsnorm(h, w, { epsilon = 1e-6 }) }
    end,
  },
  k.graph "rmsnorm_ragged" {
    dims = { T = k.dynamic, H = { 1000 } }, dtype = "fp16",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b) return { y = g:rmsnorm(x, w, b, { epsilon = 1e-6 }) } end,
  },
  k.graph "layernorm_gelu" {
    dims = { T = k.dynamic, H = { 1024 } }, dtype = "bf16",
    inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b) return { y = g:gelu(g:layernorm(x, w, b, { epsilon = 1e-5 })) } end,
  },
}
