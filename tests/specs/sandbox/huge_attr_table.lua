-- a huge table as an op attribute
local k = require "kiln"
return k.graph "huge_attr_table" { inputs = { x = { 4 } },
  body = function(g, x)
      local t = {}
      for i = 1, 200000 do t[i] = i end
      return { y = g:relu(x, { negative_slope = t }) }
  end }
