local k = require "kiln"
local lfs = require "lfs"
return k.graph "require_other" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
