-- kiln.ops.conv1d: causal depthwise conv1d and its backward (OPS.md §9, Dao's causal_conv1d
-- names). x [B, D, L] (channel-last is a matter of strides), weight [D, W] with W in 2..256
-- (cuDNN's range; the fast kernels take 2..4), bias [D], initial_states [B, D, W-1].
local util = require "kiln.ops.util"

local FLOATS = util.FLOATS
local W_MIN, W_MAX = 2, 256

-- Shapes and dtypes of x, weight, bias, seq_idx, initial_states; returns B, D, L, W.
local function check(ctx, ins, attrs)
  local x, w = ins.x, ins.weight
  util.dtype_in(ctx, "x", x, FLOATS)
  util.rank_is(ctx, "x", x, 3, "[B, D, L]")
  local B, D, L = x.dims[1], x.dims[2], x.dims[3]
  util.rank_is(ctx, "weight", w, 2, "[D, W]")
  if not ctx:same_dim(w.dims[1], D) then
    ctx:fail("E_SHAPE", "channel mismatch: x is %s but weight is %s (weight's dim 0 must be x's D)",
      util.fmt(x.dims), util.fmt(w.dims))
  end
  local W = w.dims[2]
  if not util.is_static(W) or W < W_MIN or W > W_MAX then
    ctx:fail("E_SHAPE", "weight %s has width %s; the width must be static and in %d..%d",
      util.fmt(w.dims), tostring(W), W_MIN, W_MAX)
  end
  -- weight and bias: fp32 or x's dtype (the reference computes in weight's dtype)
  for _, p in ipairs { "weight", "bias" } do
    local t = ins[p]
    if t then
      util.dtype_in(ctx, p, t, FLOATS)
      if t.dtype ~= nil and x.dtype ~= nil and t.dtype ~= "fp32" and t.dtype ~= x.dtype then
        ctx:fail("E_DTYPE", "%s has dtype %s; it must be fp32 or x's dtype %s", p, t.dtype, x.dtype)
      end
    end
  end
  if ins.bias then util.dims_are(ctx, "bias", ins.bias, { D }, "[D]") end
  if ins.seq_idx then
    util.dtype_in(ctx, "seq_idx", ins.seq_idx, { "int32" })
    util.dims_are(ctx, "seq_idx", ins.seq_idx, { B, L }, "[B, L] sequence index per token")
    if ins.initial_states then
      ctx:fail("E_PORT", "seq_idx (packed sequences) cannot be combined with initial_states")
    end
    if attrs.return_final_states then
      ctx:fail("E_ATTR", "seq_idx (packed sequences) cannot be combined with return_final_states")
    end
  end
  if ins.initial_states then
    util.same_dtype(ctx, "initial_states", ins.initial_states, "x", x)
    util.dims_are(ctx, "initial_states", ins.initial_states, { B, D, W - 1 }, "[B, D, W-1]")
  end
  return B, D, L, W
end

local ACTIVATION = { type = "string", enum = { "identity", "silu", "swish" }, default = "identity" }

local forward = {
  name = "causal_conv1d", family = "conv1d", mode = "CAUSAL_CONV1D",
  inputs = { "x", "weight", { "bias", optional = true }, { "seq_idx", optional = true },
             { "initial_states", optional = true } },
  outputs = { "y", { "final_states", optional = true } },
  aliases = {},
  attrs = { activation = ACTIVATION, return_final_states = { type = "boolean", default = false } },
  infer = function(ctx, ins, attrs)
    local B, D, L, W = check(ctx, ins, attrs)
    local out = { y = { dims = { B, D, L }, dtype = ins.x.dtype } }
    if attrs.return_final_states then out.final_states = { dims = { B, D, W - 1 }, dtype = ins.x.dtype } end
    return out
  end,
}

-- dout = dy; dfinal_states = the gradient flowing into final_states (optional).
local backward = {
  name = "causal_conv1d_backward", family = "conv1d", mode = "CAUSAL_CONV1D_BWD",
  inputs = { "x", "weight", "dout", { "bias", optional = true }, { "seq_idx", optional = true },
             { "initial_states", optional = true }, { "dfinal_states", optional = true } },
  outputs = { "dx", "dweight", { "dbias", optional = true }, { "dinitial_states", optional = true } },
  aliases = {},
  attrs = { activation = ACTIVATION, return_dinitial_states = { type = "boolean", default = false } },
  infer = function(ctx, ins, attrs)
    local B, D, L, W = check(ctx, ins, attrs)
    util.same_dtype(ctx, "dout", ins.dout, "x", ins.x)
    util.dims_are(ctx, "dout", ins.dout, { B, D, L }, "x's dims")
    if ins.dfinal_states then
      if ins.seq_idx then ctx:fail("E_PORT", "seq_idx (packed sequences) cannot be combined with dfinal_states") end
      util.dims_are(ctx, "dfinal_states", ins.dfinal_states, { B, D, W - 1 }, "[B, D, W-1]")
    end
    if attrs.return_dinitial_states and not ins.initial_states then
      ctx:fail("E_ATTR", "return_dinitial_states needs initial_states")
    end
    local out = {
      dx = { dims = { B, D, L }, dtype = ins.x.dtype },
      dweight = { dims = util.copy(ins.weight.dims), dtype = ins.weight.dtype },
    }
    if ins.bias then out.dbias = { dims = { D }, dtype = ins.bias.dtype } end
    if attrs.return_dinitial_states then
      out.dinitial_states = { dims = { B, D, W - 1 }, dtype = ins.initial_states.dtype }
    end
    return out
  end,
}

return { forward, backward }
