-- rawsets into the k.dynamic sentinel shared with the compiler
local k = require "kiln"
rawset(k.dynamic, "kind", "PWNED")
return k.graph "k_dynamic_rawset" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
