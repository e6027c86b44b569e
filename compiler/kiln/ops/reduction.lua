-- kiln.ops.reduction: graph.reduction(input, mode) -> Y (OPS.md §3).
-- The output keeps the input's rank with 1 on every reduced axis; the reduced axes come from
-- exactly one of the attributes `dims` (the output dims, as cuDNN takes them) or `axes`
-- (axis indices, negative from the end).
local util = require "kiln.ops.util"

local MODES = { "add", "mul", "min", "max", "amax", "avg", "norm1", "norm2", "mul_no_zeros" }

local function dims_from_dims(ctx, x, want)
  if #want ~= #x.dims then
    ctx:fail("E_SHAPE", "attribute 'dims' %s has %d entries but input is %s (rank %d); the output keeps the rank",
      util.fmt(want), #want, util.fmt(x.dims), #x.dims)
  end
  local out = {}
  for i, d in ipairs(want) do
    d = ctx:dim(math.tointeger(d) or d)
    if not util.is_dim(d) then
      ctx:fail("E_ATTR", "attribute 'dims' entry %d is %s; entries are positive integers or dim names",
        i, tostring(d))
    end
    if d ~= 1 and not ctx:same_dim(d, x.dims[i]) then
      ctx:fail("E_SHAPE", "attribute 'dims' %s does not fit input %s: axis %d is %s, must be 1 (reduced) or %s (kept)",
        util.fmt(want), util.fmt(x.dims), i - 1, tostring(d), tostring(x.dims[i]))
    end
    out[i] = d
  end
  return out
end

local function dims_from_axes(ctx, x, axes)
  if #axes == 0 then ctx:fail("E_ATTR", "attribute 'axes' is empty; name at least one axis to reduce") end
  local out, seen = util.copy(x.dims), {}
  for _, a in ipairs(axes) do
    local i = util.axis(ctx, "axes", a, #x.dims, "input")
    if seen[i] then ctx:fail("E_ATTR", "attribute 'axes' names axis %d twice", i - 1) end
    seen[i] = true
    out[i] = 1
  end
  return out
end

return {
  {
    name = "reduction", family = "reduction", mode = "REDUCTION",
    inputs = { "input" }, outputs = { "Y" }, aliases = {},
    attrs = {
      mode = { type = "string", enum = MODES, required = true },
      dims = { type = "list" },   -- output dims: 1 on reduced axes, the input's extent elsewhere
      axes = { type = "list" },   -- or: the axes to reduce (integers, negative from the end)
    },
    infer = function(ctx, ins, attrs)
      local x = ins.input
      util.dtype_in(ctx, "input", x, util.FLOATS_FP8)
      if (attrs.dims == nil) == (attrs.axes == nil) then
        ctx:fail("E_ATTR", "give exactly one of 'dims' (output dims, 1 on reduced axes) or 'axes' (axes to reduce)")
      end
      local dims = attrs.dims and dims_from_dims(ctx, x, attrs.dims) or dims_from_axes(ctx, x, attrs.axes)
      return { Y = { dims = dims } }
    end,
  },
}
