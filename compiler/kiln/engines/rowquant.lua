-- kiln.engines.rowquant: block-scale quantize and dequantize along the row (docs/OPS.md §10.2)
-- for the row engine (row.lua): standalone (the anchor of its own kernel, a pointwise prologue
-- or epilogue fused) and as a forward norm's epilogue (lower.lua's quant role: RMSNorm -> 1x128
-- fp8 with fp32 scales in one kernel). CUDA form only: the per-block amax is a few xor shuffles
-- and the stores are plain vectors, which the PTX builder would need new ops for
-- (docs/MEMORY_BOUND.md, "Block quantize").
--
-- A block of B elements is B / V consecutive vectors: with vector k of lane l at column
-- (l + k P) V, G = B / V consecutive lanes hold it in the same k (P a multiple of G). Each lane
-- folds its vector's |v| bits, G lanes fold theirs by xor shuffles within the group, every
-- lane of the group derives the same scale, stores its V fp8 values, and the group's first
-- lane stores the scale.
local pw = require "kiln.engines.pwexpr"
local shape = require "kiln.shape"
local render = require "kiln.render"
local lower = require "kiln.lower"

local M = {}

-- Y's largest finite value and, for e8m0 scales, its exponent (both are 1.75 * 2^e).
local VMAX = { fp8_e4m3 = { 448, 8 }, fp8_e5m2 = { 57344, 15 } }
-- Y's pair converts (common/fp8.cuh).
local PACK = { fp8_e4m3 = "kiln_f32x2_to_e4m3x2", fp8_e5m2 = "kiln_f32x2_to_e5m2x2" }
-- The scale dtypes the kernels write.
local SCALES = { fp32 = true, fp8_e8m0 = true, fp8_e4m3 = true }

local function fail(fmt_, ...) return string.format(fmt_, ...) end

-- The axis (0-based) a quantize node blocks.
local function q_axis(q, x)
  local axis = q.attrs.axis == nil and -1 or q.attrs.axis
  return axis < 0 and axis + #x.dims or axis
end

-- Why the row engine does not build block quantize q (nil: it does): along the last axis,
-- Y row-major, scales row-major [..., H / B].
function M.declines(q, g)
  local x, y, s = g.by_uid[q.inputs.input], g.by_uid[q.outputs.Y], g.by_uid[q.outputs.scale]
  local axis = q_axis(q, x)
  if axis ~= #x.dims - 1 then
    return fail("block_scale_quantize '%s' along axis %d, not the last axis (the row engine quantizes along rows)", q.name, axis)
  end
  if q.attrs.transpose then return fail("block_scale_quantize '%s' with transpose (a Y not row-major)", q.name) end
  if not VMAX[y.dtype] then return fail("block_scale_quantize '%s': Y %s, not fp8_e4m3 or fp8_e5m2", q.name, y.dtype) end
  if not SCALES[s.dtype] then return fail("block_scale_quantize '%s': scale %s is not fp32, fp8_e8m0 or fp8_e4m3", q.name, s.dtype) end
  if not shape.is_row_major(y.dims, y.strides) or not shape.is_row_major(s.dims, s.strides) then
    return fail("block_scale_quantize '%s': Y or scale not row-major", q.name)
  end
  return nil
end

-- Why the row engine does not build block dequantize a (nil: it does): blocks along the last
-- axis only, descale row-major, no negative scale.
function M.dequant_declines(a, g)
  local x, s = g.by_uid[a.inputs.input], g.by_uid[a.inputs.descale]
  local bs = a.attrs.block_size
  local n = #x.dims
  for i = 1, #bs - 1 do
    if bs[i] ~= 1 then
      return fail("block_scale_dequantize '%s' with blocks %s: blocks along axis %d, not only the last (the row engine dequantizes along rows)",
        a.name, shape.format(bs), n - #bs + i - 1)
    end
  end
  if a.attrs.is_negative_scale then return fail("block_scale_dequantize '%s' with is_negative_scale", a.name) end
  if not shape.is_row_major(s.dims, s.strides) then return fail("block_scale_dequantize '%s': descale not row-major", a.name) end
  if not pw.STORAGE[s.dtype] and s.dtype ~= "fp8_e8m0" then
    return fail("block_scale_dequantize '%s': descale dtype %s", a.name, s.dtype)
  end
  return nil
end

-- The block length of a quantize node or (a list) a dequantize node.
function M.block(node)
  local b = node.attrs.block_size
  return type(b) == "table" and b[#b] or b
end

-- Whether forward norm `norm` may take quantize q in its epilogue (lower's quantize
-- epilogue): the row engine builds q there, the row compile-time.
function M.fuses(norm, q, g)
  local x = g.by_uid[q.inputs.input]
  return M.declines(q, g) == nil and type(x.dims[#x.dims]) == "number"
end

-- The vector width (elements) at most V that divides every block of `nodes`.
function M.vector(V, nodes)
  for _, n in ipairs(nodes) do
    while V > 1 and M.block(n) % V ~= 0 do V = V // 2 end
  end
  return V
end

-- Why layout L cannot hold the blocks of `nodes` (nil: it can): each block G = B / V lanes
-- of one vector index, G a power of two within a warp dividing P.
function M.fits(L, nodes)
  for _, n in ipairs(nodes) do
    local B = M.block(n)
    local G = B // L.V
    if B % L.V ~= 0 or G & (G - 1) ~= 0 then
      return fail("a block of %d elements is not a power-of-two number of %d-element vectors", B, L.V)
    end
    if G > 32 then return fail("a block of %d elements spans %d lanes, more than a warp", B, G) end
    if L.P % G ~= 0 then return fail("a block of %d elements spans %d lanes, more than the row's %d", B, G, L.P) end
  end
  return nil
end

-- The shuffle mask of a thread's group of G lanes (once a kernel).
local function mask_line(K, G)
  local name = "qmask" .. G .. "_"
  if not K.qmask then K.qmask = {} end
  if not K.qmask[G] then
    K.qmask[G] = true
    K:add("  const unsigned %s = %s;", name, G == 32 and "0xffffffffu"
      or string.format("0x%xu << ((threadIdx.x & 31) & ~%du)", (1 << G) - 1, G - 1))
  end
  return name
end

-- The element-loop hooks of the quantize nodes `nodes` for one pass (row.lua's output pass):
-- pre(lines) per vector, body(lines, value) per element (value: the pass's values), post(lines)
-- per vector: the block scales and the stores. `clamp`: stores guarded by `valid`.
function M.hooks(K, info, nodes, g, clamp)
  local L, src = info.L, K.src
  local H, V = L.H, L.V
  src:need("common/fp8.cuh")
  src:need("common/quant.cuh")
  local masks = {}
  for i, q in ipairs(nodes) do
    local G = M.block(q) // V
    if G > 1 then masks[i] = mask_line(K, G) end
  end
  local h = {}
  function h.pre(lines)
    for i in ipairs(nodes) do lines[#lines + 1] = string.format("      float qv%d_[%d];", i - 1, V) end
  end
  function h.body(lines, value)
    for i, q in ipairs(nodes) do lines[#lines + 1] = string.format("        qv%d_[j] = %s;", i - 1, value[q.inputs.input]) end
  end
  function h.post(lines)
    for i, q in ipairs(nodes) do
      local B = M.block(q)
      local G, NB = B // V, H // B
      local y, s = g.by_uid[q.outputs.Y], g.by_uid[q.outputs.scale]
      local vmax, vexp = VMAX[y.dtype][1], VMAX[y.dtype][2]
      local store = pw.STORAGE[y.dtype].store
      local qv = string.format("qv%d_", i - 1)
      local function add(fmt_, ...) lines[#lines + 1] = "      " .. string.format(fmt_, ...) end
      add("{ kiln_u32 qa_ = 0u;")
      add("#pragma unroll\n        for (int j = 0; j < %d; j++) qa_ = max(qa_, __float_as_uint(fabsf(%s[j])));", V, qv)
      if G > 1 then
        add("#pragma unroll\n        for (int o_ = %d; o_ > 0; o_ >>= 1) qa_ = max(qa_, __shfl_xor_sync(%s, qa_, o_));", G // 2, masks[i])
      end
      local y_of
      if s.dtype == "fp32" then
        add("  float qm_; const float qs_ = kiln_bq_fp32(qa_, %s, &qm_);", render.float_literal(vmax))
        y_of = function(v) return string.format("%s * qm_", v) end
      elseif s.dtype == "fp8_e8m0" then
        add("  float qm_; const kiln_u8 qs_ = kiln_bq_e8m0(qa_, %d, &qm_);", vexp)
        y_of = function(v) return string.format("%s * qm_", v) end
      else
        add("  kiln_u8 qs_; const float qd_ = kiln_bq_e4m3(qa_, %s, &qs_);", render.float_literal(vmax))
        y_of = function(v) return string.format("(qd_ == 0.0f ? 0.0f : __fdiv_rn(%s, qd_))", v) end
      end
      local written = lower.written
      if written(y) then
        add("  alignas(%d) kiln_u8 qy_[%d];", math.min(16, V), V)
        if V % 2 == 0 then
          -- element pairs in one convert (cvt.rn.satfinite.*x2 on sm_89+)
          add("#pragma unroll\n        for (int j = 0; j < %d; j++) reinterpret_cast<kiln_u16 *>(qy_)[j] = %s(%s, %s);", V // 2,
            PACK[y.dtype], y_of(qv .. "[2 * j]"), y_of(qv .. "[2 * j + 1]"))
        else
          add("#pragma unroll\n        for (int j = 0; j < %d; j++) qy_[j] = %s;", V, pw.fmt(store, y_of(qv .. "[j]")))
        end
        if clamp then add("  if (valid)") end
        lines[#lines + 1] = pw.vector_copy(string.format("%s + row * %dLL + c", K:ptr(y.uid, true), H), "qy_", "kiln_u8", V, 1,
          "        ")
        K:need_align(y.uid, math.min(16, V))
      end
      if written(s) then
        local first = G > 1 and string.format("(lane & %d) == 0", G - 1) or nil
        local guard = {}
        if clamp then guard[#guard + 1] = "valid" end
        if first then guard[#guard + 1] = first end
        add("  %s%s[row * %dLL + c / %d] = qs_;", #guard > 0 and ("if (" .. table.concat(guard, " && ") .. ") ") or "",
          K:ptr(s.uid, true), NB, B)
      end
      add("}")
    end
  end
  return h
end

-- A descale value of dequantize node a, one per vector (V divides B): its load, per vector.
function M.descale_line(K, info, a, g)
  local s = g.by_uid[a.inputs.descale]
  local B = M.block(a)
  local load = pw.scale_storage(K.src, s.dtype).load
  return string.format("      const float qd_ = %s;", pw.fmt(load, string.format("%s[row * %dLL + c / %d]", K:ptr(s.uid),
    info.L.H // B, B)))
end

return M
