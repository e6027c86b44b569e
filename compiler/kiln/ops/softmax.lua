-- kiln.ops.softmax: softmax, log_softmax and their backwards with PyTorch semantics (OPS.md §5).
-- cuDNN has no Python op; ports use the C++ node's names (P, SINK -> S, Stats, Max, Sum_exp).
-- The optional statistics outputs are asked for with the boolean attributes generate_stats
-- (Stats = log-sum-exp), generate_max (Max) and generate_sum_exp (Sum_exp).
local util = require "kiln.ops.util"

local FLOATS = util.FLOATS

-- Input dims with 1 on the softmax axis.
local function row_dims(ctx, p, axis)
  util.rank_at_least(ctx, "P", p, 1)
  local i = util.axis(ctx, "axis", axis, #p.dims, "P")
  local d = util.copy(p.dims)
  d[i] = 1
  return d
end

local function check_sink(ctx, sink, rows)
  if not sink then return end
  util.dtype_in(ctx, "SINK", sink, FLOATS)
  local r, n = #sink.dims, #rows
  local ok = r <= n
  for i = 1, n do
    if not ok then break end
    local d = sink.dims[i - (n - r)] or 1
    if d ~= 1 and not ctx:same_dim(d, rows[i]) then ok = false end
  end
  if not ok then
    ctx:fail("E_SHAPE", "SINK %s must broadcast to the row statistics %s (one logit per row, 1 on the softmax axis)",
      util.fmt(sink.dims), util.fmt(rows))
  end
end

local function forward(name, mode)
  return {
    name = name, family = "softmax", mode = mode,
    inputs = { "P", { "SINK", optional = true } },
    outputs = { "S", { "Stats", optional = true }, { "Max", optional = true }, { "Sum_exp", optional = true } },
    aliases = {},
    attrs = {
      axis = { type = "integer", default = -1 },
      generate_stats = { type = "boolean", default = false },
      generate_max = { type = "boolean", default = false },
      generate_sum_exp = { type = "boolean", default = false },
      stats_use_log2 = { type = "boolean", default = false },
    },
    infer = function(ctx, ins, attrs)
      util.dtype_in(ctx, "P", ins.P, FLOATS)
      local rows = row_dims(ctx, ins.P, attrs.axis)
      check_sink(ctx, ins.SINK, rows)
      if attrs.stats_use_log2 and not attrs.generate_stats then
        ctx:fail("E_ATTR", "stats_use_log2 needs generate_stats = true")
      end
      local out = { S = { dims = util.copy(ins.P.dims) } }
      if attrs.generate_stats then out.Stats = { dims = util.copy(rows), dtype = "fp32" } end
      if attrs.generate_max then out.Max = { dims = util.copy(rows), dtype = "fp32" } end
      if attrs.generate_sum_exp then out.Sum_exp = { dims = util.copy(rows), dtype = "fp32" } end
      return out
    end,
  }
end

-- grad = dy, output = the forward's result (y for softmax, log-probabilities for log_softmax).
local function backward(name, mode)
  return {
    name = name, family = "softmax", mode = mode,
    inputs = { "grad", "output" },
    outputs = { "DX" },
    aliases = {},
    attrs = { axis = { type = "integer", default = -1 } },
    infer = function(ctx, ins, attrs)
      util.dtype_in(ctx, "grad", ins.grad, FLOATS)
      util.dtype_in(ctx, "output", ins.output, FLOATS)
      util.rank_at_least(ctx, "output", ins.output, 1)
      util.axis(ctx, "axis", attrs.axis, #ins.output.dims, "output")
      if not util.same_dims(ctx, ins.grad.dims, ins.output.dims) then
        ctx:fail("E_SHAPE", "grad %s must have output's dims %s", util.fmt(ins.grad.dims), util.fmt(ins.output.dims))
      end
      return { DX = { dims = util.copy(ins.output.dims) } }
    end,
  }
end

return {
  forward("softmax", "SOFTMAX"),
  forward("log_softmax", "LOG_SOFTMAX"),
  backward("softmax_backward", "SOFTMAX_BWD"),
  backward("log_softmax_backward", "LOG_SOFTMAX_BWD"),
}
