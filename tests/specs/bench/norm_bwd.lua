-- The backwards of batch norm, instance norm and adaptive layer norm for bench/norm_bwd.py:
-- a ResNet stage's NCHW activations (bf16, fp32 parameters and statistics) and a diffusion
-- transformer's modulated norm.
local k = require "kiln"
local function per_channel(name, op, C, HW)
  return k.graph(name) {
    dims = { N = k.dynamic, C = { C }, HW = { HW } }, dtype = "bf16",
    inputs = { dy = { "N", "C", "HW" }, x = { "N", "C", "HW" }, g = { 1, "C", 1, dtype = "fp32" },
               mean = op == "batchnorm_backward" and { 1, "C", 1, dtype = "fp32" } or { "N", "C", 1, dtype = "fp32" },
               rstd = op == "batchnorm_backward" and { 1, "C", 1, dtype = "fp32" } or { "N", "C", 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, rstd)
      local dx, dg, db = G[op](G, dy, x, g, mean, rstd)
      return { dx = dx, dg = dg, db = db }
    end,
  }
end
local function adaln(name, S, D)
  return k.graph(name) {
    dims = { B = k.dynamic, S = { S }, D = { D } }, dtype = "bf16",
    inputs = { dy = { "B", "S", "D" }, x = { "B", "S", "D" }, g = { "B", 1, "D", dtype = "fp32" },
               mean = { "B", "S", 1, dtype = "fp32" }, rstd = { "B", "S", 1, dtype = "fp32" } },
    body = function(G, dy, x, g, mean, rstd)
      local dx, dg, db = G:adalayernorm_backward(dy, x, g, mean, rstd)
      return { dx = dx, dg = dg, db = db }
    end,
  }
end
return {
  per_channel("bn_bwd_64x3136", "batchnorm_backward", 64, 3136),
  per_channel("bn_bwd_256x784", "batchnorm_backward", 256, 784),
  per_channel("in_bwd_64x3136", "instancenorm_backward", 64, 3136),
  adaln("adaln_bwd_256x1152", 256, 1152),
  adaln("adaln_bwd_4096x3072", 4096, 3072),
}
