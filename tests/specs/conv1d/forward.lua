-- causal_conv1d graphs covering every option the conv1d engine takes (tests/conv1d.t builds
-- them; tests/gpu/steps/conv1d.sh checks them against the reference at odd sizes): widths 2, 3,
-- 4 (register kernels), 7, 64 and 256 (the general loop); x channel-first and channel-last;
-- bias, silu, seq_idx, initial_states and final_states; bf16, fp16, fp32 x with weight and bias
-- in x's dtype or fp32; D not a multiple of the vector (channel-last: element loads).
local kiln = require "kiln"
-- x [B, D, T]: "cf" row-major (time contiguous), "cl" a [B, T, D] buffer
local function x_of(lay, D, dt)
  if lay == "cl" then return { "B", D, "T", strides = { "T*" .. D, 1, D }, dtype = dt } end
  return { "B", D, "T", dtype = dt }
end
-- The inputs past the body's named ones (x, w) by name: they come sorted by name.
local function rest(inputs, ...)
  local names, args, t = {}, { ... }, {}
  for n in pairs(inputs) do if n ~= "x" and n ~= "w" then names[#names + 1] = n end end
  table.sort(names)
  for i, n in ipairs(names) do t[n] = args[i] end
  return t
end
-- o: name, lay, D, W, dtype, wdt (weight and bias dtype), bias, silu, seq, init, fin
local function graph(o)
  local inputs = { x = x_of(o.lay, o.D, o.dtype), w = { o.D, o.W, dtype = o.wdt or o.dtype } }
  if o.bias then inputs.b = { o.D, dtype = o.wdt or o.dtype } end
  if o.seq then inputs.seq = { "B", "T", dtype = "int32" } end
  if o.init then inputs.h0 = { "B", o.D, o.W - 1, dtype = o.dtype } end
  return kiln.graph(o.name) {
    dims = { B = kiln.dynamic, T = kiln.dynamic }, dtype = o.dtype, inputs = inputs,
    body = function(g, x, w, ...)
      local t = rest(inputs, ...)
      local y, fin = g:causal_conv1d(x, w, t.b, t.seq, t.h0, { activation = o.silu and "silu" or "identity",
                                                              return_final_states = o.fin or false })
      return { y = y, fin = o.fin and fin or nil }
    end,
  }
end
return {
  graph { name = "cl_bf16_w4", lay = "cl", D = 64, W = 4, dtype = "bf16", bias = true, silu = true },
  graph { name = "cf_bf16_w4", lay = "cf", D = 40, W = 4, dtype = "bf16", bias = true, silu = true },
  graph { name = "cf_fp16_w3_states", lay = "cf", D = 36, W = 3, dtype = "fp16", wdt = "fp32", bias = true, init = true, fin = true },
  graph { name = "cl_fp32_w2", lay = "cl", D = 100, W = 2, dtype = "fp32" },
  graph { name = "cl_bf16_w4_seq", lay = "cl", D = 72, W = 4, dtype = "bf16", bias = true, silu = true, seq = true },
  graph { name = "cf_fp32_w4_seq", lay = "cf", D = 20, W = 4, dtype = "fp32", silu = true, seq = true },
  graph { name = "cl_bf16_d36_states", lay = "cl", D = 36, W = 4, dtype = "bf16", bias = true, init = true, fin = true },
  graph { name = "cl_fp16_w3_fin", lay = "cl", D = 48, W = 3, dtype = "fp16", wdt = "fp32", bias = true, silu = true, fin = true },
  graph { name = "cf_bf16_w7", lay = "cf", D = 24, W = 7, dtype = "bf16", bias = true, silu = true },
  graph { name = "cl_bf16_w64_states", lay = "cl", D = 40, W = 64, dtype = "bf16", bias = true, init = true, fin = true },
  graph { name = "cl_fp32_w7_seq", lay = "cl", D = 12, W = 7, dtype = "fp32", bias = true, seq = true },
  graph { name = "cf_bf16_w256_states", lay = "cf", D = 16, W = 256, dtype = "bf16", wdt = "fp32", init = true, fin = true },
}
