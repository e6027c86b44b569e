-- Two graphs: one every engine set builds, one no engine takes (an sdpa with an additive
-- bias): check, explain and build must name the second and (build) still pack the first.
local k = require "kiln"
return {
  k.graph "fine" { dims = { T = k.dynamic, H = { 256, 512 } }, dtype = "bf16", inputs = { x = { "T", "H" } },
    body = function(g, x) return { y = g:relu(x) } end },
  k.graph "nokernel" { dims = { B = k.dynamic, S = k.dynamic }, dtype = "bf16",
    inputs = { q = { "B", 4, "S", 128 }, kk = { "B", 4, "S", 128 }, v = { "B", 4, "S", 128 }, bias = { 1, 4, "S", "S" } },
    body = function(g, q, kk, v, bias) return { o = g:sdpa(q, kk, v, nil, bias, { attn_scale = 0.088, generate_stats = false }) } end },
}
