local k = require "kiln"
return k.graph "loop_in_body" {
  inputs = { x = { 4 } },
  body = function(g, x)
    while true do pcall(function() end) end
  end,
}
