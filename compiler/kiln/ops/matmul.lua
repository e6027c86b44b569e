-- kiln.ops.matmul: graph.matmul(A, B, padding) -> C (OPS.md §6).
-- C[..., m, n] = sum_k A[..., m, k] B[..., k, n]; rank >= 2; the leading (batch) dims
-- broadcast numpy-style (a lower-rank operand gets leading 1s). Transposes are strides.
local util = require "kiln.ops.util"

local IO = util.FLOATS_FP8

local function override(ctx, port, t, c_dims)
  if not t then return end
  util.dtype_in(ctx, port, t, util.INTS)
  local ok = #t.dims <= #c_dims
  for i, d in ipairs(t.dims) do
    if not ok then break end
    if d ~= 1 and not (i == 1 and #c_dims > 2 and ctx:same_dim(d, c_dims[1])) then ok = false end
  end
  if not ok then
    ctx:fail("E_SHAPE", "%s %s must be one value per batch: [B, 1, ..., 1] with B = 1 or C's first dim (C is %s)",
      port, util.fmt(t.dims), util.fmt(c_dims))
  end
end

-- moe_grouped_matmul (cuDNN's MoE grouped matmul, mode none): the tokens sorted by expert,
-- expert e's rows [first_token_offset[e], first_token_offset[e + 1]) (the last's end: T)
-- times weight[e]; offsets are taken as a running maximum clamped to [0, T], and rows before
-- the first expert's get 0 (OPS.md §6).
local grouped = {
  name = "moe_grouped_matmul", family = "matmul", mode = "MOE_GROUPED_MATMUL",
  inputs = { "token", "weight", "first_token_offset" },
  outputs = { "Y" },
  aliases = {},
  attrs = { mode = { type = "string", default = "none" }, top_k = { type = "integer", default = 0 } },
  infer = function(ctx, ins, attrs)
    if attrs.mode ~= "none" then
      ctx:fail("E_ATTR", "mode '%s': the gather and scatter forms are not supported (mode none: tokens sorted by expert)",
        tostring(attrs.mode))
    end
    local x, w, off = ins.token, ins.weight, ins.first_token_offset
    util.dtype_in(ctx, "token", x, IO)
    util.dtype_in(ctx, "weight", w, IO)
    if x.dtype ~= nil and w.dtype ~= nil and x.dtype ~= w.dtype and not (util.is_fp8(x.dtype) and util.is_fp8(w.dtype)) then
      ctx:fail("E_DTYPE", "token is %s but weight is %s: they must have the same dtype (or both fp8)", x.dtype, w.dtype)
    end
    util.rank_is(ctx, "token", x, 2, "[T, K] tokens sorted by expert")
    util.rank_is(ctx, "weight", w, 3, "[E, K, N] one matrix an expert")
    util.dtype_in(ctx, "first_token_offset", off, { "int32" })
    util.dims_are(ctx, "first_token_offset", off, { w.dims[1] }, "[E]: one offset an expert")
    if not ctx:same_dim(x.dims[2], w.dims[2]) then
      ctx:fail("E_SHAPE", "K mismatch: token is %s but weight is %s", util.fmt(x.dims), util.fmt(w.dims))
    end
    return { Y = { dims = { x.dims[1], w.dims[3] } } }
  end,
}

return {
  {
    name = "matmul", family = "matmul", mode = "MATMUL",
    inputs = { "A", "B", { "M_override", optional = true }, { "N_override", optional = true },
               { "K_override", optional = true } },
    outputs = { "C" },
    aliases = {},
    attrs = { padding = { type = "number", default = 0.0 } },
    infer = function(ctx, ins)
      local a, b = ins.A, ins.B
      util.dtype_in(ctx, "A", a, IO)
      util.dtype_in(ctx, "B", b, IO)
      local fa, fb = util.is_fp8(a.dtype), util.is_fp8(b.dtype)
      if fa or fb then
        if a.dtype ~= nil and b.dtype ~= nil and fa ~= fb then
          ctx:fail("E_DTYPE", "A is %s but B is %s: an fp8 operand needs an fp8 partner", a.dtype, b.dtype)
        end
        if ctx.compute_dtype ~= "fp32" then
          ctx:fail("E_DTYPE", "fp8 operands need compute_data_type fp32 (fp32 accumulation), got %s",
            tostring(ctx.compute_dtype))
        end
      elseif a.dtype ~= nil and b.dtype ~= nil and a.dtype ~= b.dtype then
        ctx:fail("E_DTYPE", "A is %s but B is %s: A and B must have the same dtype (cast one with identity)",
          a.dtype, b.dtype)
      end
      util.rank_at_least(ctx, "A", a, 2, "[..., M, K]")
      util.rank_at_least(ctx, "B", b, 2, "[..., K, N]")
      local ra, rb = #a.dims, #b.dims
      if not ctx:same_dim(a.dims[ra], b.dims[rb - 1]) then
        ctx:fail("E_SHAPE", "K mismatch: A is %s but B is %s (A's last dim must equal B's second-to-last)",
          util.fmt(a.dims), util.fmt(b.dims))
      end
      local ba, bb = {}, {}
      for i = 1, ra - 2 do ba[i] = a.dims[i] end
      for i = 1, rb - 2 do bb[i] = b.dims[i] end
      local c = util.broadcast(ctx, { { "A's batch dims", ba }, { "B's batch dims", bb } })
      c[#c + 1] = a.dims[ra - 1]
      c[#c + 1] = b.dims[rb]
      override(ctx, "M_override", ins.M_override, c)
      override(ctx, "N_override", ins.N_override, c)
      override(ctx, "K_override", ins.K_override, c)
      return { C = { dims = c } }
    end,
  },
  grouped,
}
