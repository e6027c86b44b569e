-- kiln.engines.gdn.problem: what a gdn group asks of the GDN kernels (docs/OPS.md §8.3), or
-- the reason they decline it. Fields (the recurrent and the chunked kernels read these):
--   node, dtype ("bf16"|"fp16": q, k, v, O); the tensors q k v g beta cu h0 idx alog dtb (g.by_uid
--   entries, nil when absent) and O final (final nil unless asked); T (number or dim name), N
--   (number or nil), H HK HV HO K V (static numbers); gate_dtype beta_dtype state_dtype; scale;
--   the booleans l2 beta_sigmoid neg_eigval safe_gate linear_gate overwrite cu_int64.
-- Head map: state head ho in [0, HO) reads q head ho / (HO/H), v head ho / (HO/HV), k head the
-- q head's where HK == H, else the v head's. Every tensor THD and contiguous.
local shape = require "kiln.shape"

local M = {}

-- Head dims (K and V each) the kernels are built for.
M.DIMS = { [64] = true, [128] = true, [256] = true }

local IO = { bf16 = true, fp16 = true }

local function fail(f, ...) return nil, string.format(f, ...) end

local function static(x) return math.type(x) == "integer" end

-- Returns the problem of a gdn group, or nil and why it is declined.
function M.of(group, g)
  local a = group.anchor or group.nodes[1]
  if group.family ~= "gdn" then return fail("group is a %s op (%s), not gdn", group.family, a.op) end
  if a.op == "gdn_bwd" then return fail("gdn_bwd has no kiln kernel yet") end
  if a.op ~= "gdn" then return fail("%s has no kiln kernel yet", a.op) end
  if #group.nodes ~= 1 then return fail("ops fused around gdn are not taken yet (%d nodes in the group)", #group.nodes) end
  local ins, outs, at, by = a.inputs, a.outputs, a.attrs, g.by_uid
  if outs.state_checkpoints then
    return fail("state_checkpoints (checkpoint_every_n_tokens = %d) are not emitted by kiln's GDN kernels",
      at.checkpoint_every_n_tokens)
  end
  local function t(uid) return uid and by[uid] or nil end
  local P = { node = a, q = t(ins.q), k = t(ins.k), v = t(ins.v), g = t(ins.g), beta = t(ins.beta),
              cu = t(ins.cu_seqlens), h0 = t(ins.initial_state), idx = t(ins.state_indices), alog = t(ins.a_log),
              dtb = t(ins.dt_bias), O = t(outs.O), final = t(outs.final_state) }
  P.dtype = P.q.dtype
  if not IO[P.dtype] then return fail("q is %s: the GDN kernels take bf16 or fp16", tostring(P.dtype)) end
  if P.O.dtype ~= P.dtype then return fail("O is %s but q is %s: O must have q's dtype", P.O.dtype, P.dtype) end
  P.T, P.H, P.K = P.q.dims[1], P.q.dims[2], P.q.dims[3]
  P.HK, P.HV, P.V = P.k.dims[2], P.v.dims[2], P.v.dims[3]
  P.HO = P.O.dims[2]
  for _, n in ipairs { "H", "HK", "HV", "HO", "K", "V" } do
    if not static(P[n]) then return fail("%s (%s) must be specialized (compile-time)", n, tostring(P[n])) end
  end
  if not (M.DIMS[P.K] and M.DIMS[P.V]) then
    return fail("head dims K %d, V %d are not built: the GDN kernels take 64, 128 and 256", P.K, P.V)
  end
  for _, n in ipairs { "q", "k", "v", "g", "beta", "cu", "h0", "idx", "alog", "dtb", "O", "final" } do
    local x = P[n]
    if x and not shape.is_row_major(x.dims, x.strides) then
      return fail("%s ('%s') is not contiguous: the GDN kernels take packed THD tensors and states", n, x.name)
    end
  end
  local cu_n = P.cu.dims[1]
  P.N = static(cu_n) and cu_n - 1 or (P.idx and static(P.idx.dims[1]) and P.idx.dims[1])
    or (P.h0 and not P.idx and static(P.h0.dims[1]) and P.h0.dims[1]) or nil
  P.gate_dtype, P.beta_dtype = P.g.dtype, P.beta.dtype
  P.state_dtype = P.h0 and P.h0.dtype or "fp32"
  if P.final and P.final.dtype ~= P.state_dtype then
    return fail("final_state is %s but the state is %s: they must match", P.final.dtype, P.state_dtype)
  end
  P.scale = at.scale or 1 / math.sqrt(P.K)
  P.l2, P.beta_sigmoid, P.neg_eigval = at.use_qk_l2norm, at.use_beta_sigmoid, at.allow_neg_eigval
  P.safe_gate, P.linear_gate = at.safe_gate, at.gate_domain == "linear"
  P.overwrite = at.overwrite_initial_state
  P.cu_int64 = P.cu.dtype == "int64"
  return P
end

-- One line for the kernel's comment: the options.
function M.describe(P)
  local parts = { string.format("%s q/k/v heads %d/%d/%d -> %d, K %d, V %d, state %s", P.dtype, P.H, P.HK, P.HV,
    P.HO, P.K, P.V, P.state_dtype) }
  for _, f in ipairs { "l2", "beta_sigmoid", "neg_eigval", "safe_gate", "linear_gate", "overwrite" } do
    if P[f] then parts[#parts + 1] = f end
  end
  if P.h0 then parts[#parts + 1] = P.idx and "pool rows" or "initial state" end
  if P.final then parts[#parts + 1] = "final state" end
  return table.concat(parts, ", ")
end

return M
