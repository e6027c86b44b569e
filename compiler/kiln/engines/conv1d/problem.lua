-- kiln.engines.conv1d.problem: what a causal_conv1d / causal_conv1d_backward group asks of the
-- conv1d kernels (docs/OPS.md §9, docs/CONV1D.md), or the reason they decline it. x, y, dout and
-- dx are [B, D, L] with either the time axis contiguous ("cf", channel-first) or the channel
-- axis ("cl", channel-last: a [B, L, D] buffer); the other strides are free. The small tensors
-- (weight, bias, states, seq_idx) are read and written through their strides as they are.
local M = {}

local function fail(f, ...) return nil, string.format(f, ...) end

local MAIN = { fp32 = true, bf16 = true, fp16 = true }

-- "cf" (time contiguous) or "cl" (channels contiguous) for a [B, D, L] tensor, or nil and why.
function M.layout(t, port)
  local s = t.strides
  if s[3] == 1 then return "cf" end
  if s[2] == 1 then return "cl" end
  return fail("%s's strides {%s} have neither the time axis nor the channel axis contiguous", port,
    table.concat((function() local o = {} for i, x in ipairs(s) do o[i] = tostring(x) end return o end)(), ", "))
end

-- Returns the problem of a conv1d group, or nil and why it is declined.
function M.of(group, g)
  local a = group.anchor
  if not a or group.family ~= "conv1d" then
    return fail("group is a %s op (%s), not conv1d", group.family, (group.anchor or group.nodes[1]).op)
  end
  if #group.nodes ~= 1 then
    return fail("ops fused around %s are not taken (%d nodes in the group)", a.op, #group.nodes)
  end
  local by, ins, outs = g.by_uid, a.inputs, a.outputs
  local function t_in(p) return ins[p] and by[ins[p]] end
  local function t_out(p) return outs[p] and by[outs[p]] end
  local x, w = t_in("x"), t_in("weight")
  if not MAIN[x.dtype] then return fail("x is %s: the kernels take fp32, bf16 or fp16", x.dtype) end
  local P = {
    node = a, bwd = a.op == "causal_conv1d_backward", dtype = x.dtype, x = x, weight = w,
    bias = t_in("bias"), seq = t_in("seq_idx"), init = t_in("initial_states"),
    B = x.dims[1], D = x.dims[2], L = x.dims[3], W = w.dims[2],
    silu = a.attrs.activation == "silu" or a.attrs.activation == "swish",
  }
  P.H = P.W - 1
  local main = { { "x", x } }
  if P.bwd then
    P.dy, P.dx, P.dweight = t_in("dout"), t_out("dx"), t_out("dweight")
    P.dbias, P.dinit, P.dfin = t_out("dbias"), t_out("dinitial_states"), t_in("dfinal_states")
    main[#main + 1] = { "dout", P.dy }
    main[#main + 1] = { "dx", P.dx }
  else
    P.y, P.fin = t_out("y"), t_out("final_states")
    main[#main + 1] = { "y", P.y }
  end
  P.layouts = {}
  for _, m in ipairs(main) do
    local lay, why = M.layout(m[2], m[1])
    if not lay then return nil, why end
    if m[2].dtype ~= x.dtype then return fail("%s is %s but x is %s", m[1], m[2].dtype, x.dtype) end
    P.layouts[m[1]] = lay
  end
  return P
end

return M
