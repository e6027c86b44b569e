-- a deeply nested table as an op attribute
local k = require "kiln"
return k.graph "nested_attr_table" { inputs = { x = { 4 } },
  body = function(g, x)
      local t = {}
      for i = 1, 100000 do t = { t } end
      return { y = g:relu(x, { negative_slope = t }) }
  end }
