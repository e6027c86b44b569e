-- gdn graphs kiln's GDN kernels decline, each by name in `kiln explain` (tests/gdn.t): state
-- checkpoints, the backward, a head dim that is not built, a q that is not contiguous.
local kiln = require "kiln"
local function graph(name, inputs, body)
  return kiln.graph(name) { dims = { T = kiln.dynamic }, dtype = "bf16", inputs = inputs, body = body }
end
local function ins(d, extra, T)
  T = T or "T"
  local t = { q = { T, 2, d }, k = { T, 2, d }, v = { T, 2, d }, g = { T, 2, dtype = "fp32" },
              b = { T, 2, dtype = "fp32" }, cu = { 3, dtype = "int32" } }
  for n, x in pairs(extra or {}) do t[n] = x end
  return t
end
local attrs = { use_qk_l2norm = true, safe_gate = true, use_beta_sigmoid = true }
local function with(extra)
  local a = {}
  for n, x in pairs(attrs) do a[n] = x end
  for n, x in pairs(extra) do a[n] = x end
  return a
end
return {
  graph("checkpoints", ins(128, nil, 256), function(gr, q, k, v, g, b, cu)
    local o, ck = gr:gdn(q, k, v, g, b, cu, with { checkpoint_every_n_tokens = 64 })
    return { o = o, ck = ck }
  end),
  graph("backward", ins(128, { dO = { "T", 2, 128 } }), function(gr, q, k, v, g, b, cu, dO)
    local dq, dk, dv, dg, db = gr:gdn_bwd(q, k, v, g, b, cu, dO, attrs)
    return { dq = dq, dk = dk, dv = dv, dg = dg, db = db }
  end),
  graph("head_dim_96", ins(96), function(gr, q, k, v, g, b, cu)
    return { o = gr:gdn(q, k, v, g, b, cu, attrs) }
  end),
  graph("strided_q", ins(128, { q = { "T", 2, 128, strides = { 512, 128, 1 } } }), function(gr, q, k, v, g, b, cu)
    return { o = gr:gdn(q, k, v, g, b, cu, attrs) }
  end),
}
