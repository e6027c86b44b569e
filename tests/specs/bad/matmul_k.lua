local k = require "kiln"
return k.graph "matmul_k" {
  dims = { M = k.dynamic },
  dtype = "bf16",
  inputs = { a = { "M", 4096 }, b = { 1024, 512 } },
  body = function(g, a, b) return { c = g:matmul(a, b) } end,
}
