-- The backward of the causal GQA prefill (specs/sdpa_prefill.lua's training graph: 32 q heads
-- over 8 k/v heads, head dim 128, BHSD bf16, the scale 1/sqrt(128)): dQ, dK and dV from q, k,
-- v, the forward's O and Stats, and dO; and the same with bitwise reproducible sums
-- (use_deterministic_algorithm). A pre-pass, the mma.sync main kernel and a dQ pass.
local kiln = require "kiln"
local function backward(name, deterministic)
  return kiln.graph(name) {
    doc = "backward of causal GQA attention, 32/8 heads, d128" .. (deterministic and ", deterministic" or ""),
    dims = { B = kiln.dynamic, S = kiln.dynamic },
    dtype = "bf16",
    inputs = { q = { "B", 32, "S", 128 }, k = { "B", 8, "S", 128 }, v = { "B", 8, "S", 128 },
               o = { "B", 32, "S", 128 }, dO = { "B", 32, "S", 128 }, stats = { "B", 32, "S", 1, dtype = "fp32" } },
    body = function(g, q, k, v, o, dO, stats)
      local dq, dk, dv = g:sdpa_backward(q, k, v, o, dO, stats, { attn_scale = 1 / math.sqrt(128), use_causal_mask = true,
                                                                   use_deterministic_algorithm = deterministic })
      return { dq = dq, dk = dk, dv = dv }
    end,
  }
end
return { backward("sdpa_prefill_backward", false), backward("sdpa_prefill_backward_det", true) }
