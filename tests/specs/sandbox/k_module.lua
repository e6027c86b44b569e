-- rewrites the kiln module table (k.graph, k.dynamic) for later specs
local k = require "kiln"
k.dynamic = "PWNED"
rawset(k, "fp32", "PWNED")
local real_graph = k.graph
k.graph = function(n) return real_graph(n) end
return k.graph "k_module" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
