-- causal_conv1d with a short static L (the conv-state update of decode: initial_states in,
-- final_states out), taken by the short-sequence kernel (widths 2..4, L <= 16) or, wider, by
-- the tile kernel; x channel-last or channel-first, bf16 / fp16 / fp32, seq_idx.
local kiln = require "kiln"
local function rest(inputs, ...)
  local names, args, t = {}, { ... }, {}
  for n in pairs(inputs) do if n ~= "x" and n ~= "w" then names[#names + 1] = n end end
  table.sort(names)
  for i, n in ipairs(names) do t[n] = args[i] end
  return t
end
-- o: name, lay, L, D, W, dtype, wdt, bias, silu, seq, init, fin
local function graph(o)
  local x = o.lay == "cl" and { "B", o.D, o.L, strides = { o.L * o.D, 1, o.D } } or { "B", o.D, o.L }
  local inputs = { x = x, w = { o.D, o.W, dtype = o.wdt or o.dtype } }
  if o.bias then inputs.b = { o.D, dtype = o.wdt or o.dtype } end
  if o.seq then inputs.seq = { "B", o.L, dtype = "int32" } end
  if o.init then inputs.h0 = { "B", o.D, o.W - 1 } end
  return kiln.graph(o.name) {
    dims = { B = kiln.dynamic }, dtype = o.dtype, inputs = inputs,
    body = function(g, x, w, ...)
      local t = rest(inputs, ...)
      local y, fin = g:causal_conv1d(x, w, t.b, t.seq, t.h0, { activation = o.silu and "silu" or "identity",
                                                              return_final_states = o.fin or false })
      return { y = y, fin = o.fin and fin or nil }
    end,
  }
end
return {
  graph { name = "cl_bf16_w4_l1", lay = "cl", L = 1, D = 72, W = 4, dtype = "bf16", bias = true, silu = true, init = true, fin = true },
  graph { name = "cf_bf16_w4_l4", lay = "cf", L = 4, D = 40, W = 4, dtype = "bf16", bias = true, silu = true, init = true, fin = true },
  graph { name = "cl_fp32_w2_l16", lay = "cl", L = 16, D = 36, W = 2, dtype = "fp32", init = true, fin = true },
  graph { name = "cl_fp16_w3_l2", lay = "cl", L = 2, D = 48, W = 3, dtype = "fp16", wdt = "fp32", bias = true, init = true, fin = true },
  graph { name = "cl_bf16_w4_l3_fin", lay = "cl", L = 3, D = 24, W = 4, dtype = "bf16", bias = true, fin = true },
  graph { name = "cf_bf16_w4_l8_seq", lay = "cf", L = 8, D = 24, W = 4, dtype = "bf16", silu = true, seq = true },
  graph { name = "cl_bf16_w7_l1", lay = "cl", L = 1, D = 40, W = 7, dtype = "bf16", bias = true, silu = true, init = true, fin = true },
}
