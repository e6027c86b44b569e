-- An infinite constant deep in the graph: `kiln check` accepts it, but graph JSON has no
-- infinity, so `check --json` must fail with E_JSON (and free the half-built document).
local k = require "kiln"
return k.graph "inf_constant" {
  dims = { T = { 8 } }, dtype = "fp32",
  inputs = { x = { "T" } },
  body = function(g, x) return { y = x * (1.0 / 0) } end,
}
