-- string methods on literals still work inside a spec: ("%s"):format, s:rep, s:upper
local k = require "kiln"
local n = ("sm_%s"):format(("a"):rep(2):upper())
assert(n == "sm_AA" and ("x").len == string.len)
return k.graph "string_method" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
