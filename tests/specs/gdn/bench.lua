-- gdn forward graphs of bench/bench_gdn.py, inputs as FlashQLA's benchmark draws them (q and
-- k L2-normalized beforehand, g log-space fp32, beta already a sigmoid): K = V = 128, bf16,
-- fp32 initial and final states, T dynamic (32768 in the bench) in 1 or 4 sequences, heads
-- (q/k over v) 16/64, 16/32 and 2/8. The decode case is specs/gdn_decode.lua.
local kiln = require "kiln"

local function fwd(h, hv, n)
  return kiln.graph(string.format("gdn_fwd_%d_%d_n%d", h, hv, n)) {
    dims = { T = kiln.dynamic }, dtype = "bf16",
    inputs = { q = { "T", h, 128 }, k = { "T", h, 128 }, v = { "T", hv, 128 }, g = { "T", hv, dtype = "fp32" },
               b = { "T", hv }, cu = { n + 1, dtype = "int32" }, h0 = { n, hv, 128, 128, dtype = "fp32" } },
    body = function(gr, q, k, v, g, b, cu, h0)
      local o, ht = gr:gdn(q, k, v, g, b, cu, { initial_state = h0, output_final_state = true })
      return { o = o, final_state = ht }
    end,
  }
end

local graphs = {}
for _, hh in ipairs { { 16, 64 }, { 16, 32 }, { 2, 8 } } do
  for _, n in ipairs { 1, 4 } do graphs[#graphs + 1] = fwd(hh[1], hh[2], n) end
end
return graphs
