-- an attribute table whose metamethods loop if the compiler ever touches them
local k = require "kiln"
return k.graph "evil_attr_metatable" { inputs = { x = { 4 } },
  body = function(g, x)
      local loop = function() while true do end end
      local a = setmetatable({ name = "evil_attr" }, { __index = loop, __pairs = loop, __len = loop })
      return { y = g:relu(x, a) }
  end }
