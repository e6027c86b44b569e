-- softmax without generate_stats = true does not generate Stats: returning it is an error
local k = require "kiln"
return k.graph "absent_stats" {
  dims = { T = k.dynamic, H = 2048 }, dtype = "bf16",
  inputs = { x = { "T", "H" } },
  body = function(g, x)
    local y, stats = g:softmax(x)
    return { y = y, stats = stats }
  end,
}
