-- kiln.ops.norm: layernorm, rmsnorm, batchnorm, batchnorm_inference, instancenorm,
-- adalayernorm and their backwards (OPS.md §4).
--
-- epsilon (and batchnorm's momentum) is either the attribute of that name (a number) or a
-- scalar input of that name, exactly one of them: there is no default. `phase` =
-- "inference" (Y only, the default) | "training" (also MEAN / INV_VARIANCE).
-- The normalized axes are those where `scale` has an extent other than 1; a scale of lower
-- rank than the input is right-aligned (a [H] scale on a [T, H] input normalizes H).
local util = require "kiln.ops.util"
local shape = require "kiln.shape"

local FLOATS = util.FLOATS
local STATS = { "fp32" }
local PHASE = { type = "string", enum = { "inference", "training" }, default = "inference" }

-- epsilon / momentum: the attribute or the scalar input of that name, exactly one.
local function scalar_param(ctx, ins, attrs, name, lo, hi, range)
  local t, v = ins[name], attrs[name]
  if t and v ~= nil then
    ctx:fail("E_ATTR", "%s is given twice, as the attribute and as the input; give one", name)
  end
  if not t and v == nil then
    ctx:fail("E_ATTR", "%s is required (attribute %s = <number>, or a scalar input); there is no default", name, name)
  end
  if t then
    util.scalar(ctx, name, t)
    util.dtype_in(ctx, name, t, FLOATS)
  elseif not (v >= lo and v <= hi) then
    ctx:fail("E_ATTR", "attribute %s = %s must be %s", name, tostring(v), range)
  end
end

-- scale-like port against the input: right-aligned, each extent 1 or the input's.
local function aligned(ctx, port, t, x)
  local r, n = #t.dims, #x.dims
  if r > n then
    ctx:fail("E_SHAPE", "%s %s has a higher rank than input %s", port, util.fmt(t.dims), util.fmt(x.dims))
  end
  local out = {}
  for i = 1, n do
    local d = t.dims[i - (n - r)] or 1
    if d ~= 1 and not ctx:same_dim(d, x.dims[i]) then
      ctx:fail("E_SHAPE", "%s %s does not fit input %s: axis %d is %s, must be 1 or %s",
        port, util.fmt(t.dims), util.fmt(x.dims), i - 1, tostring(d), tostring(x.dims[i]))
    end
    out[i] = d
  end
  return out
end

-- Stats dims of a layer/rms norm: input dims with 1 where the scale extent is not 1.
local function row_stats(ctx, x, scale)
  local s = aligned(ctx, "scale", scale, x)
  local stats, any = {}, false
  for i, d in ipairs(x.dims) do
    if s[i] ~= 1 then stats[i] = 1; any = true else stats[i] = d end
  end
  if not any then
    ctx:fail("E_SHAPE", "scale %s has extent 1 on every axis of input %s, so no axis is normalized",
      util.fmt(scale.dims), util.fmt(x.dims))
  end
  return stats, s
end

local function bias_like_scale(ctx, ins, x, s_aligned)
  local b = ins.bias
  if not b then return end
  util.dtype_in(ctx, "bias", b, FLOATS)
  local ba = aligned(ctx, "bias", b, x)
  if not util.same_dims(ctx, ba, s_aligned) then
    local hint = ""
    if b.role == "constant" or b.role == "scalar" then
      hint = " (a number in bias's position? pass epsilon as the attribute `epsilon`)"
    end
    ctx:fail("E_SHAPE", "bias %s must have scale's dims %s%s", util.fmt(b.dims), util.fmt(ins.scale.dims), hint)
  end
end

local function stats_input(ctx, port, t, want)
  util.dtype_in(ctx, port, t, STATS)
  if not util.same_dims(ctx, t.dims, want) then
    ctx:fail("E_SHAPE", "%s must be %s (the input's dims with 1 on the normalized axes), got %s",
      port, util.fmt(want), util.fmt(t.dims))
  end
end

local function forward_checks(ctx, ins)
  util.dtype_in(ctx, "input", ins.input, FLOATS)
  util.dtype_in(ctx, "scale", ins.scale, FLOATS)
  util.rank_at_least(ctx, "input", ins.input, 1)
end

local function grad_like_input(ctx, ins)
  util.dtype_in(ctx, "grad", ins.grad, FLOATS)
  util.dtype_in(ctx, "input", ins.input, FLOATS)
  util.dtype_in(ctx, "scale", ins.scale, FLOATS)
  if not util.same_dims(ctx, ins.grad.dims, ins.input.dims) then
    ctx:fail("E_SHAPE", "grad %s must have input's dims %s", util.fmt(ins.grad.dims), util.fmt(ins.input.dims))
  end
end

local function grads(ins)
  return {
    DX = { dims = util.copy(ins.input.dims) },
    DSCALE = { dims = util.copy(ins.scale.dims), dtype = ins.scale.dtype },
    DBIAS = { dims = util.copy(ins.scale.dims), dtype = ins.scale.dtype },
  }
end

-- Per-channel parameters of batch/instance norm: [1, C, 1, ...] at the input's rank.
local function channel_dims(x)
  local d = {}
  for i = 1, #x.dims do d[i] = i == 2 and x.dims[2] or 1 end
  return d
end

local function channel_param(ctx, port, t, x, dtypes)
  util.dtype_in(ctx, port, t, dtypes or FLOATS)
  util.dims_are(ctx, port, t, channel_dims(x), "per channel: 1 except the input's axis 1")
end

-- adalayernorm: scale [B|1, 1|S, D] at the input's rank; axis 0 is the sample, the other
-- axes where scale is not 1 are normalized.
local function ada_stats(ctx, x, scale)
  util.rank_at_least(ctx, "input", x, 2, "[B, ..., D]")
  util.rank_is(ctx, "scale", scale, #x.dims, "per sample: [B, 1, D] for a [B, S, D] input")
  local s = aligned(ctx, "scale", scale, x)
  local stats, any = { x.dims[1] }, false
  for i = 2, #x.dims do
    if s[i] ~= 1 then stats[i] = 1; any = true else stats[i] = x.dims[i] end
  end
  if not any then
    ctx:fail("E_SHAPE", "scale %s has extent 1 on every non-batch axis of input %s, so no axis is normalized",
      util.fmt(scale.dims), util.fmt(x.dims))
  end
  return stats, s
end

-- The elements of `dims` each element of `rows` (dims with 1 on the reduced axes) stands for,
-- where every reduced axis is compile-time (a number or a specialized dim); else nil and the
-- first dynamic one's name.
local function static_count(G, dims, rows)
  local n = 1
  for i, d in ipairs(dims) do
    if rows[i] == 1 and d ~= 1 then
      local v = type(d) == "number" and d or (G.dims[d] or {}).value
      if not v then return nil, d end
      n = n * v
    end
  end
  return n
end

-- The backward of a norm whose statistics `rows` (mean and r = inv_variance per stats
-- element) normalize x, from reductions and pointwise ops (decompose.lua): with x_hat = (x -
-- mean) * r and g = dy * scale, dx = r * (g - <g> - x_hat * <g * x_hat>) (<> the mean over a
-- statistic's elements), dscale and dbias the sums of dy * x_hat and dy to scale's dims. A
-- scale constant over each statistic's elements (per channel: batch and instance norm) leaves
-- the means of dy and dy * x_hat: `scale_in_row`.
local function backward_parts(G, ins, rows, scale_in_row)
  local x, dy, scale, r = ins.input, ins.grad, ins.scale, ins.inv_variance
  local xhat = (x - ins.mean) * r
  local g = scale_in_row and dy or dy * scale
  local gx = g * xhat
  local mg = G:reduction(g, { mode = "avg", dims = rows })
  local mgx = G:reduction(gx, { mode = "avg", dims = rows })
  -- (the per-channel factors last: each node joins the element chain's kernel)
  local dx = (g - mg - xhat * mgx) * r
  if scale_in_row then dx = dx * scale end
  local sums = { mode = "add", dims = util.copy(scale.dims), dtype = scale.dtype }
  local m = scale_in_row and static_count(G, x.dims, rows)
  if m and shape.format(rows) ~= shape.format(scale.dims) then
    -- (per-row statistics inside a channel, their element count m fixed: instance norm) the
    -- channel's sums are m times the sums of its rows' means, which dx needs anyway: x and dy
    -- are not read a third time
    return { DX = dx, DSCALE = G:reduction(mgx * m, sums), DBIAS = G:reduction(mg * m, sums) }
  end
  return { DX = dx, DSCALE = G:reduction(scale_in_row and gx or dy * xhat, sums), DBIAS = G:reduction(dy, sums) }
end

local function phase_outputs(attrs, y_dims, stats, with_mean)
  local out = { Y = { dims = util.copy(y_dims) } }
  if attrs.phase == "training" then
    if with_mean then out.MEAN = { dims = util.copy(stats), dtype = "fp32" } end
    out.INV_VARIANCE = { dims = util.copy(stats), dtype = "fp32" }
  end
  return out
end

return {
  {
    name = "layernorm", family = "norm", mode = "LAYERNORM",
    inputs = { "input", "scale", "bias", { "epsilon", optional = true } },
    outputs = { "Y", { "MEAN", optional = true }, { "INV_VARIANCE", optional = true } },
    aliases = {},
    attrs = { phase = PHASE, epsilon = { type = "number" } },
    infer = function(ctx, ins, attrs)
      forward_checks(ctx, ins)
      local stats, s = row_stats(ctx, ins.input, ins.scale)
      bias_like_scale(ctx, ins, ins.input, s)
      scalar_param(ctx, ins, attrs, "epsilon", 0, util.FLT_MAX, ">= 0 and finite")
      return phase_outputs(attrs, ins.input.dims, stats, true)
    end,
  },
  {
    name = "rmsnorm", family = "norm", mode = "RMSNORM",
    inputs = { "input", "scale", { "bias", optional = true }, { "epsilon", optional = true } },
    outputs = { "Y", { "INV_VARIANCE", optional = true } },
    aliases = {},
    attrs = { phase = PHASE, epsilon = { type = "number" } },
    infer = function(ctx, ins, attrs)
      forward_checks(ctx, ins)
      local stats, s = row_stats(ctx, ins.input, ins.scale)
      bias_like_scale(ctx, ins, ins.input, s)
      scalar_param(ctx, ins, attrs, "epsilon", 0, util.FLT_MAX, ">= 0 and finite")
      return phase_outputs(attrs, ins.input.dims, stats, false)
    end,
  },
  {
    name = "layernorm_backward", family = "norm", mode = "DLN",
    inputs = { "grad", "input", "scale", "mean", "inv_variance" },
    outputs = { "DX", "DSCALE", "DBIAS" },
    aliases = {}, attrs = {},
    infer = function(ctx, ins)
      grad_like_input(ctx, ins)
      local stats = row_stats(ctx, ins.input, ins.scale)
      stats_input(ctx, "mean", ins.mean, stats)
      stats_input(ctx, "inv_variance", ins.inv_variance, stats)
      return grads(ins)
    end,
  },
  {
    name = "rmsnorm_backward", family = "norm", mode = "DRMSNORM",
    inputs = { "grad", "input", "scale", "inv_variance" },
    outputs = { "DX", "DSCALE", { "DBIAS", optional = true } },
    aliases = {},
    attrs = { has_dbias = { type = "boolean", default = false } },
    infer = function(ctx, ins, attrs)
      grad_like_input(ctx, ins)
      local stats = row_stats(ctx, ins.input, ins.scale)
      stats_input(ctx, "inv_variance", ins.inv_variance, stats)
      local out = grads(ins)
      if not attrs.has_dbias then out.DBIAS = nil end
      return out
    end,
  },
  {
    name = "batchnorm", family = "norm", mode = "BATCHNORM",
    inputs = { "input", "scale", "bias", { "in_running_mean", optional = true }, { "in_running_var", optional = true },
               { "epsilon", optional = true }, { "momentum", optional = true } },
    outputs = { "Y", "MEAN", "INV_VARIANCE", { "NEXT_RUNNING_MEAN", optional = true },
                { "NEXT_RUNNING_VAR", optional = true } },
    aliases = {},
    attrs = { epsilon = { type = "number" }, momentum = { type = "number" } },
    infer = function(ctx, ins, attrs)
      local x = ins.input
      util.dtype_in(ctx, "input", x, FLOATS)
      util.rank_at_least(ctx, "input", x, 2, "[N, C, ...]")
      channel_param(ctx, "scale", ins.scale, x)
      channel_param(ctx, "bias", ins.bias, x)
      scalar_param(ctx, ins, attrs, "epsilon", 0, util.FLT_MAX, ">= 0 and finite")
      local c = channel_dims(x)
      local out = { Y = { dims = util.copy(x.dims) }, MEAN = { dims = c, dtype = "fp32" },
                    INV_VARIANCE = { dims = util.copy(c), dtype = "fp32" } }
      local rm, rv = ins.in_running_mean, ins.in_running_var
      if (rm == nil) ~= (rv == nil) then
        ctx:fail("E_PORT", "in_running_mean and in_running_var go together: give both or neither")
      end
      if rm then
        channel_param(ctx, "in_running_mean", rm, x, STATS)
        channel_param(ctx, "in_running_var", rv, x, STATS)
        scalar_param(ctx, ins, attrs, "momentum", 0, 1, "in [0, 1]")
        out.NEXT_RUNNING_MEAN = { dims = util.copy(c), dtype = "fp32" }
        out.NEXT_RUNNING_VAR = { dims = util.copy(c), dtype = "fp32" }
      elseif ins.momentum or attrs.momentum ~= nil then
        ctx:fail("E_ATTR", "momentum is given but there are no running statistics (in_running_mean, in_running_var)")
      end
      return out
    end,
    -- Kernels (decompose.lua): the per-channel mean, the biased variance of x - mean (two
    -- per-channel reductions), then y = (x - mean) * r * scale + bias with r = 1 / sqrt(var +
    -- epsilon); the running statistics move toward the batch's by momentum, the variance's
    -- unbiased (n / (n - 1), n the elements a channel has: fixed at build time).
    decompose = function(G, ins, attrs)
      local x = ins.input
      local c = channel_dims(x)
      local mean = G:reduction(x, { mode = "avg", dims = c })
      local d = x - mean
      local var = G:reduction(d * d, { mode = "avg", dims = c })
      local r = G:rsqrt(var + (ins.epsilon or attrs.epsilon))
      local out = { Y = d * r * ins.scale + ins.bias, MEAN = mean, INV_VARIANCE = r }
      if ins.in_running_mean then
        local n, dynamic = static_count(G, x.dims, c)
        if not n then
          return nil, string.format("running statistics need the elements a channel has (n / (n - 1) corrects the variance), but dim %s is dynamic: specialize it", dynamic)
        end
        local m = ins.momentum or attrs.momentum
        out.NEXT_RUNNING_MEAN = ins.in_running_mean * (1 - m) + mean * m
        out.NEXT_RUNNING_VAR = ins.in_running_var * (1 - m) + var * (m * n / math.max(n - 1, 1))
      end
      return out
    end,
  },
  {
    name = "batchnorm_inference", family = "norm", mode = "BATCHNORM_INFERENCE",
    inputs = { "input", "mean", "inv_variance", "scale", "bias" },
    outputs = { "Y" },
    aliases = {}, attrs = {},
    -- an elementwise op over broadcast per-channel operands: kernels fuse it as a pointwise op
    elementwise = true, cexpr = "(a - b) * c * d + e",
    infer = function(ctx, ins)
      local x = ins.input
      util.dtype_in(ctx, "input", x, FLOATS)
      util.rank_at_least(ctx, "input", x, 2, "[N, C, ...]")
      channel_param(ctx, "mean", ins.mean, x, STATS)
      channel_param(ctx, "inv_variance", ins.inv_variance, x, STATS)
      channel_param(ctx, "scale", ins.scale, x)
      channel_param(ctx, "bias", ins.bias, x)
      return { Y = { dims = util.copy(x.dims) } }
    end,
  },
  {
    name = "batchnorm_backward", family = "norm", mode = "DBN",
    inputs = { "grad", "input", "scale", "mean", "inv_variance" },
    outputs = { "DX", "DSCALE", "DBIAS" },
    aliases = {}, attrs = {},
    infer = function(ctx, ins)
      grad_like_input(ctx, ins)
      util.rank_at_least(ctx, "input", ins.input, 2, "[N, C, ...]")
      channel_param(ctx, "scale", ins.scale, ins.input)
      channel_param(ctx, "mean", ins.mean, ins.input, STATS)
      channel_param(ctx, "inv_variance", ins.inv_variance, ins.input, STATS)
      return grads(ins)
    end,
    -- Kernels (decompose.lua): the per-channel sums and means of dy and dy * x_hat (one kernel:
    -- sibling reductions), then dx per element.
    decompose = function(G, ins)
      return backward_parts(G, ins, channel_dims(ins.input), true)
    end,
  },
  {
    name = "instancenorm", family = "norm", mode = "INSTANCENORM",
    inputs = { "input", "scale", "bias", { "epsilon", optional = true } },
    outputs = { "Y", { "MEAN", optional = true }, { "INV_VARIANCE", optional = true } },
    aliases = {},
    attrs = { phase = PHASE, epsilon = { type = "number" } },
    infer = function(ctx, ins, attrs)
      local x = ins.input
      util.dtype_in(ctx, "input", x, FLOATS)
      util.rank_at_least(ctx, "input", x, 3, "[N, C, spatial...]")
      channel_param(ctx, "scale", ins.scale, x)
      channel_param(ctx, "bias", ins.bias, x)
      scalar_param(ctx, ins, attrs, "epsilon", 0, util.FLT_MAX, ">= 0 and finite")
      local stats = { x.dims[1], x.dims[2] }
      for i = 3, #x.dims do stats[i] = 1 end
      return phase_outputs(attrs, x.dims, stats, true)
    end,
  },
  {
    name = "instancenorm_backward", family = "norm", mode = "DIN",
    inputs = { "grad", "input", "scale", { "mean", optional = true }, { "inv_variance", optional = true } },
    outputs = { "DX", "DSCALE", "DBIAS" },
    aliases = {}, attrs = {},
    infer = function(ctx, ins)
      grad_like_input(ctx, ins)
      local x = ins.input
      util.rank_at_least(ctx, "input", x, 3, "[N, C, spatial...]")
      channel_param(ctx, "scale", ins.scale, x)
      if (ins.mean == nil) ~= (ins.inv_variance == nil) then
        ctx:fail("E_PORT", "mean and inv_variance go together: give both (saved statistics) or neither (recomputed)")
      end
      if ins.mean then
        local stats = { x.dims[1], x.dims[2] }
        for i = 3, #x.dims do stats[i] = 1 end
        stats_input(ctx, "mean", ins.mean, stats)
        stats_input(ctx, "inv_variance", ins.inv_variance, stats)
      end
      return grads(ins)
    end,
    -- Kernels (decompose.lua): the means of dy and dy * x_hat over each (sample, channel)'s
    -- spatial elements, the per-channel sums (one kernel), then dx per element.
    decompose = function(G, ins)
      if not ins.mean then
        return nil, "statistics recomputed in the backward (no mean and inv_variance) are not built: pass the forward's MEAN and INV_VARIANCE"
      end
      return backward_parts(G, ins, util.copy(ins.mean.dims), true)
    end,
  },
  {
    name = "adalayernorm", family = "norm", mode = "ADALAYERNORM",
    inputs = { "input", "scale", { "bias", optional = true }, { "epsilon", optional = true } },
    outputs = { "Y", { "MEAN", optional = true }, { "INV_VARIANCE", optional = true } },
    aliases = {},
    attrs = { phase = PHASE, epsilon = { type = "number" } },
    infer = function(ctx, ins, attrs)
      forward_checks(ctx, ins)
      local stats, s = ada_stats(ctx, ins.input, ins.scale)
      bias_like_scale(ctx, ins, ins.input, s)
      scalar_param(ctx, ins, attrs, "epsilon", 0, util.FLT_MAX, ">= 0 and finite")
      return phase_outputs(attrs, ins.input.dims, stats, true)
    end,
  },
  {
    name = "adalayernorm_backward", family = "norm", mode = "DADALN",
    inputs = { "grad", "input", "scale", "mean", "inv_variance" },
    outputs = { "DX", "DSCALE", "DBIAS" },
    aliases = {}, attrs = {},
    infer = function(ctx, ins)
      grad_like_input(ctx, ins)
      local stats = ada_stats(ctx, ins.input, ins.scale)
      stats_input(ctx, "mean", ins.mean, stats)
      stats_input(ctx, "inv_variance", ins.inv_variance, stats)
      return grads(ins)
    end,
    -- Kernels (decompose.lua): the per-row means of g and g * x_hat (g = dy * the sample's
    -- scale), the per-sample sums of dy * x_hat and dy (one kernel), then dx per element.
    decompose = function(G, ins)
      return backward_parts(G, ins, util.copy(ins.mean.dims), false)
    end,
  },
}
