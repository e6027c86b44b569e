-- a cyclic table as an op attribute
local k = require "kiln"
return k.graph "cyclic_attr_table" { inputs = { x = { 4 } },
  body = function(g, x)
      local t = {}
      t[1] = t
      return { y = g:relu(x, { negative_slope = t }) }
  end }
