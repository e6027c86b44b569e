-- gdn graphs over every option of the op, each checked on the GPU against the fp64 reference
-- (tests/gpu/steps/gdn.sh: T of 75, 1000 and 2049 tokens in 4 sequences, cu_seqlens drawn as
-- sorted boundaries): head dims 64, 128, 256; GVA ratios 1, 2, 4; GQA with k heads H or HV;
-- initial states fp32 and bf16, per sequence or pool rows by state_indices; final states;
-- the safe gate with and without a_log / dt_bias, the log and the linear gate; beta raw,
-- sigmoid and 2 sigmoid (negative eigenvalues), fp32 or io dtype; g fp32, bf16, fp16;
-- cu_seqlens int32 and int64; fp16 io. kiln run draws normal inputs: where the kernel's own
-- options leave them unstable (raw beta, raw log gate, no L2 norm), pointwise ops before the
-- op make them so (beta = sigmoid(b), g = -softplus(x), k scaled by 1/sqrt(D)).
local kiln = require "kiln"

-- one graph: heads h/hk/hv, head dim d, io dtype, gate and beta dtypes, states, attributes;
-- pre = { beta = true, gate = "log"|"linear", k = true }: the pointwise ops above
local function case(name, o)
  local h, hv, d, io = o.h or 2, o.hv or o.h or 2, o.d or 128, o.io or "bf16"
  local hk, ho = o.hk or h, math.max(h, o.hv or o.h or 2)
  local tok = o.tokens or "T"
  local inputs = {
    q = { tok, h, d }, k = { tok, hk, d }, v = { tok, hv, d },
    g = { tok, ho, dtype = o.gate_dtype or "fp32" }, b = { tok, ho, dtype = o.beta_dtype or "fp32" },
    cu = { 5, dtype = o.cu or "int32" },
  }
  if o.h0 then inputs.h0 = { o.pool and "P" or 4, ho, d, d, dtype = o.h0 } end
  if o.pool then inputs.idx = { 4, dtype = "int32" } end
  if o.a_log then inputs.a_log = { ho, dtype = "fp32" } end
  if o.dt_bias then inputs.dt_bias = { ho, dtype = o.dt_bias_dtype or "fp32" } end
  local dims = { P = o.pool and kiln.dynamic or nil }
  if tok == "T" then dims.T = kiln.dynamic end
  return kiln.graph(name) {
    dims = dims, dtype = io, inputs = inputs,
    body = function(gr, q, k, v, g, b, cu, ...)
      -- the optional inputs follow in name order
      local opt, names = {}, {}
      for n in pairs(inputs) do if not ({ q = 1, k = 1, v = 1, g = 1, b = 1, cu = 1 })[n] then names[#names + 1] = n end end
      table.sort(names)
      for i, n in ipairs(names) do opt[n] = select(i, ...) end
      local h0, idx, a_log, dt_bias = opt.h0, opt.idx, opt.a_log, opt.dt_bias
      local pre = o.pre or {}
      if pre.k then k = gr:mul(k, 1 / math.sqrt(d), { dtype = io }) end
      if pre.beta then b = gr:sigmoid(b, { dtype = o.beta_dtype or "fp32" }) end
      if pre.gate == "log" then g = gr:neg(gr:softplus(g), { dtype = o.gate_dtype or "fp32" }) end
      if pre.gate == "linear" then g = gr:sigmoid(g, { dtype = o.gate_dtype or "fp32" }) end
      local attrs = { initial_state = h0, state_indices = idx, a_log = a_log, dt_bias = dt_bias,
                      output_final_state = o.final ~= false, use_qk_l2norm = o.l2 ~= false,
                      safe_gate = pre.gate == nil, use_beta_sigmoid = not pre.beta }
      for a, x in pairs(o.attrs or {}) do attrs[a] = x end
      local out, ht = gr:gdn(q, k, v, g, b, cu, attrs)
      return { o = out, final_state = attrs.output_final_state and ht or nil }
    end,
  }
end

return {
  case("gdn_mha_d128", { h = 4, h0 = "fp32", a_log = true, dt_bias = true }),
  case("gdn_gva2_d128", { h = 2, hv = 4, dt_bias = true, beta_dtype = "bf16" }),
  case("gdn_gva4_d64", { h = 1, hv = 4, d = 64, a_log = true, gate_dtype = "bf16", cu = "int64",
                         attrs = { allow_neg_eigval = true } }),
  case("gdn_gqa_hk_hv", { h = 4, hk = 2, hv = 2, h0 = "bf16", a_log = true, dt_bias = true }),
  case("gdn_gqa_hk_h_d64", { h = 4, hv = 2, d = 64, h0 = "fp32", final = false }),
  case("gdn_fp16", { io = "fp16", h = 2, gate_dtype = "fp16", beta_dtype = "fp16", dt_bias = true,
                     dt_bias_dtype = "fp16", h0 = "fp32", attrs = { scale = 0.05 } }),
  case("gdn_pool", { h = 2, hv = 4, h0 = "fp32", pool = true, a_log = true, dt_bias = true }),
  case("gdn_raw_d64", { h = 2, d = 64, l2 = false, h0 = "fp32", pre = { k = true, beta = true, gate = "log" } }),
  case("gdn_linear_gate", { h = 2, hv = 4, pre = { gate = "linear" }, attrs = { gate_domain = "linear" } }),
  case("gdn_d256", { h = 1, d = 256, h0 = "fp32", a_log = true }),
}
