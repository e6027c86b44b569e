-- kiln.ops.quantize: block_scale_quantize and block_scale_dequantize (OPS.md §10.2).
-- Per-tensor fp8 is no op of its own: mul by the scale, identity cast, reduction amax.
-- Quantize outputs default to MXFP8 (Y fp8_e4m3, scale fp8_e8m0); declare others with
-- dtypes = {Y = ..., scale = ...} within out_dtypes (scale fp32: the 1x128 / 128x128 recipes).
local util = require "kiln.ops.util"

local quantize = {
  name = "block_scale_quantize", family = "quantize", mode = "BLOCK_SCALE_QUANTIZE",
  inputs = { "input" },
  outputs = { "Y", "scale" },
  aliases = {},
  attrs = {
    block_size = { type = "integer", required = true },
    axis = { type = "integer" },                     -- absent: the last axis
    transpose = { type = "boolean", default = false },
  },
  out_dtypes = { Y = { "fp8_e4m3", "fp8_e5m2" }, scale = { "fp8_e8m0", "fp8_e4m3", "fp32" } },
  infer = function(ctx, ins, attrs)
    local x = ins.input
    util.dtype_in(ctx, "input", x, util.FLOATS)
    util.rank_at_least(ctx, "input", x, 1)
    local bs = attrs.block_size
    if bs < 1 then ctx:fail("E_ATTR", "block_size = %d must be >= 1 (32 for MXFP8)", bs) end
    local axis = util.axis(ctx, "axis", attrs.axis == nil and -1 or attrs.axis, #x.dims, "input")
    local d = x.dims[axis]
    if not util.is_static(d) or d % bs ~= 0 then
      ctx:fail("E_SHAPE", "input %s: axis %d has extent %s, which must be a static multiple of block_size %d",
        util.fmt(x.dims), axis - 1, tostring(d), bs)
    end
    local sdims = util.copy(x.dims)
    sdims[axis] = d // bs
    local y = { dims = util.copy(x.dims), dtype = "fp8_e4m3" }
    if attrs.transpose then y.strides = util.strides_axis_innermost(x.dims, axis) end
    return { Y = y, scale = { dims = sdims, dtype = "fp8_e8m0" } }
  end,
}

-- block_size: one block extent per trailing dim, e.g. {1, 32} for A [M, K] along K.
local dequantize = {
  name = "block_scale_dequantize", family = "quantize", mode = "BLOCK_SCALE_DEQUANTIZE",
  inputs = { "input", "descale" },
  outputs = { "Y" },
  aliases = {},
  attrs = {
    block_size = { type = "list", required = true },
    is_negative_scale = { type = "boolean", default = false },
  },
  infer = function(ctx, ins, attrs)
    local x, s = ins.input, ins.descale
    util.dtype_in(ctx, "input", x, { "fp8_e4m3", "fp8_e5m2" })
    util.dtype_in(ctx, "descale", s, { "fp8_e8m0", "fp8_e4m3", "fp32" })
    local bsl, n = attrs.block_size, #x.dims
    if #bsl == 0 or #bsl > n then
      ctx:fail("E_ATTR", "block_size has %d entries; it needs 1..%d (one per trailing dim of input %s)",
        #bsl, n, util.fmt(x.dims))
    end
    local want = {}
    for i = 1, n do
      local b = bsl[i - (n - #bsl)] or 1
      if math.type(b) ~= "integer" or b < 1 then
        ctx:fail("E_ATTR", "block_size entries must be integers >= 1, got %s", tostring(b))
      end
      local d = x.dims[i]
      if b == 1 then want[i] = d
      elseif util.is_static(d) and d % b == 0 then want[i] = d // b
      else
        ctx:fail("E_SHAPE", "input %s: axis %d has extent %s, which must be a static multiple of its block %d",
          util.fmt(x.dims), i - 1, tostring(d), b)
      end
    end
    util.dims_are(ctx, "descale", s, want, "input's dims divided by block_size")
    return { Y = { dims = util.copy(x.dims) } }
  end,
}

return { quantize, dequantize }
