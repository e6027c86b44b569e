-- causal_conv1d_backward graphs covering every option the conv1d engine takes (tests/conv1d.t
-- builds them; tests/gpu/steps/conv1d.sh checks them against the reference at odd sizes):
-- widths 2, 3, 4 (register sums), 7, 64 (the general loop); x and dout channel-first or
-- channel-last; bias (dbias), silu (z recomputed), seq_idx, initial_states with
-- dinitial_states, dfinal_states; bf16, fp16, fp32 with weight and bias in x's dtype or fp32;
-- D not a multiple of the vector.
local kiln = require "kiln"
local function main_of(lay, D, dt)
  if lay == "cl" then return { "B", D, "T", strides = { "T*" .. D, 1, D }, dtype = dt } end
  return { "B", D, "T", dtype = dt }
end
local function rest(inputs, ...)
  local names, args, t = {}, { ... }, {}
  for n in pairs(inputs) do if n ~= "x" and n ~= "w" and n ~= "dy" then names[#names + 1] = n end end
  table.sort(names)
  for i, n in ipairs(names) do t[n] = args[i] end
  return t
end
-- o: name, lay (x), dlay (dout), D, W, dtype, wdt, bias, silu, seq, init (with dinitial_states), dfin
local function graph(o)
  local inputs = { x = main_of(o.lay, o.D, o.dtype), dy = main_of(o.dlay or o.lay, o.D, o.dtype),
                   w = { o.D, o.W, dtype = o.wdt or o.dtype } }
  if o.bias then inputs.b = { o.D, dtype = o.wdt or o.dtype } end
  if o.seq then inputs.seq = { "B", "T", dtype = "int32" } end
  if o.init then inputs.h0 = { "B", o.D, o.W - 1, dtype = o.dtype } end
  if o.dfin then inputs.dfin = { "B", o.D, o.W - 1, dtype = o.dtype } end
  return kiln.graph(o.name) {
    dims = { B = kiln.dynamic, T = kiln.dynamic }, dtype = o.dtype, inputs = inputs,
    body = function(g, x, w, dy, ...)
      local t = rest(inputs, ...)
      local dx, dw, db, dh0 = g:causal_conv1d_backward(x, w, dy, t.b, t.seq, t.h0, t.dfin, {
        activation = o.silu and "silu" or "identity", return_dinitial_states = o.init or false })
      if not o.bias then dh0, db = db, nil end
      if not o.init then dh0 = nil end
      return { dx = dx, dw = dw, db = db, dh0 = dh0 }
    end,
  }
end
return {
  graph { name = "cl_bf16_w4", lay = "cl", D = 64, W = 4, dtype = "bf16", bias = true, silu = true },
  graph { name = "cf_bf16_w4", lay = "cf", D = 40, W = 4, dtype = "bf16", bias = true, silu = true },
  graph { name = "cl_x_cf_dy_bf16_w4", lay = "cl", dlay = "cf", D = 64, W = 4, dtype = "bf16", bias = true, silu = true },
  graph { name = "cf_fp16_w3_states", lay = "cf", D = 36, W = 3, dtype = "fp16", wdt = "fp32", bias = true, init = true, dfin = true },
  graph { name = "cl_fp32_w2", lay = "cl", D = 100, W = 2, dtype = "fp32" },
  graph { name = "cl_bf16_w4_seq", lay = "cl", D = 72, W = 4, dtype = "bf16", bias = true, silu = true, seq = true },
  graph { name = "cf_fp32_w4_seq", lay = "cf", D = 20, W = 4, dtype = "fp32", silu = true, seq = true },
  graph { name = "cl_bf16_d36_states", lay = "cl", D = 36, W = 4, dtype = "bf16", bias = true, silu = true, init = true, dfin = true },
  graph { name = "cl_fp16_w3_dfin", lay = "cl", D = 48, W = 3, dtype = "fp16", wdt = "fp32", bias = true, silu = true, dfin = true },
  graph { name = "cf_bf16_w7", lay = "cf", D = 24, W = 7, dtype = "bf16", bias = true, silu = true },
  graph { name = "cl_bf16_w64_states", lay = "cl", D = 40, W = 64, dtype = "bf16", bias = true, init = true, dfin = true },
  graph { name = "cl_fp32_w7_seq", lay = "cl", D = 12, W = 7, dtype = "fp32", bias = true, silu = true, seq = true },
}
