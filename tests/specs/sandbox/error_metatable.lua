-- rewrites the shared kiln error metatable through a caught error
local k = require "kiln"
local ok, e = pcall(function() error({}) end)
local ok2, e2 = pcall(require("kiln").graph, 1)
pcall(function() getmetatable(e2).__tostring = function() return "PWNED" end end)
rawset(e2, "msg", "PWNED")
return k.graph "error_metatable" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
