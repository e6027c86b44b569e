-- The backward norms over the dtypes and layouts of the staged kernel (its PTX body and the
-- CUDA form it falls back to): fp16 and fp32 rows, mixed scale dtypes, dbias, narrow rows
-- (two threads' groups per warp), a ragged row and one past the staged kernel's reach, and rows
-- whose column sums fit no CTA (dx and the sums in kernels of their own: rowbwd_colsum.lua),
-- one of them with a partial last column tile.
local k = require "kiln"
local function norm_bwd(name, dtype, H, opts)
  opts = opts or {}
  local ln = opts.layernorm
  return k.graph(name) {
    dims = { T = k.dynamic, H = H }, dtype = dtype,
    inputs = ln and { dy = { "T", "H" }, x = { "T", "H" }, w = { "H", dtype = opts.w },
                      mean = { "T", 1, dtype = "fp32" }, rstd = { "T", 1, dtype = "fp32" } }
      or { dy = { "T", "H" }, x = { "T", "H" }, w = { "H", dtype = opts.w }, rstd = { "T", 1, dtype = "fp32" } },
    body = ln and function(g, dy, x, w, mean, rstd)
      local dx, dw, db = g:layernorm_backward(dy, x, w, mean, rstd)
      return { dx = dx, dw = dw, db = db }
    end or function(g, dy, x, w, rstd)
      local dx, dw, db = g:rmsnorm_backward(dy, x, w, rstd, { has_dbias = opts.dbias })
      return { dx = dx, dw = dw, db = opts.dbias and db or nil }
    end,
  }
end
return {
  norm_bwd("layernorm_bwd_fp16", "fp16", { 1024, 4096 }, { layernorm = true }),
  norm_bwd("layernorm_bwd_fp32", "fp32", { 2048 }, { layernorm = true, w = "bf16" }),
  norm_bwd("layernorm_bwd_narrow", "bf16", { 128, 256 }, { layernorm = true }),
  norm_bwd("layernorm_bwd_ragged", "bf16", { 1000 }, { layernorm = true }),
  norm_bwd("layernorm_bwd_wide", "bf16", { 16384 }, { layernorm = true }),
  norm_bwd("rmsnorm_bwd_fp32_dbias", "fp32", { 4096 }, { dbias = true }),
  norm_bwd("rmsnorm_bwd_fp16_wfp32", "fp16", { 8192 }, { w = "fp32" }),
  norm_bwd("layernorm_bwd_split", "bf16", { 32768 }, { layernorm = true }),
  norm_bwd("layernorm_bwd_split_tail", "fp16", { 40000 }, { layernorm = true, w = "fp32" }),
  norm_bwd("rmsnorm_bwd_split_dbias", "bf16", { 65536 }, { dbias = true }),
}
