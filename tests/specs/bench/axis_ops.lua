-- Ops over other axes for bench/axis_ops.py: instance norm of an NCHW activation, adaptive layer
-- norm (a diffusion transformer's modulated norm), softmax over channels (a segmentation head)
-- and over the middle axis of [B, S, H].
local k = require "kiln"
local function instancenorm(name, C, HW)
  return k.graph(name) {
    dims = { N = k.dynamic, C = { C }, HW = { HW } }, dtype = "bf16",
    inputs = { x = { "N", "C", "HW" }, g = { 1, "C", 1 }, b = { 1, "C", 1 } },
    body = function(G, x, g, b) return { y = G:instancenorm(x, g, b, { epsilon = 1e-5 }) } end,
  }
end
local function adaln(name, S, D)
  return k.graph(name) {
    dims = { B = k.dynamic, S = { S }, D = { D } }, dtype = "bf16",
    inputs = { x = { "B", "S", "D" }, g = { "B", 1, "D" }, b = { "B", 1, "D" } },
    body = function(G, x, g, b) return { y = G:adalayernorm(x, g, b, { epsilon = 1e-6 }) } end,
  }
end
local function softmax(name, R, Ki)
  return k.graph(name) {
    dims = { N = k.dynamic, R = { R }, K = { Ki } }, dtype = "bf16",
    inputs = { x = { "N", "R", "K" } },
    body = function(G, x) return { y = G:softmax(x, { axis = 1 }) } end,
  }
end
return {
  softmax("softmax_21x65536", 21, 65536),
  softmax("softmax_512x1024", 512, 1024),
  instancenorm("inorm_64x3136", 64, 3136),
  instancenorm("inorm_320x4096", 320, 4096),
  adaln("adaln_256x1152", 256, 1152),
  adaln("adaln_4096x3072", 4096, 3072),
}
