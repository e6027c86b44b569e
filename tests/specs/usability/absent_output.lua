-- inv is not generated without phase = "training": returning it is an error, not a lost output
local k = require "kiln"
return k.graph "absent_output" {
  dims = { T = k.dynamic, H = 1024 }, dtype = "bf16",
  inputs = { x = { "T", "H" }, w = { "H" } },
  body = function(g, x, w)
    local y, inv = g:rmsnorm(x, w, { epsilon = 1e-6 })
    return { y = y, inv = inv }
  end,
}
