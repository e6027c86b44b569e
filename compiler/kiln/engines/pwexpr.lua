-- kiln.engines.pwexpr: the pointwise expression code every engine shares — how each dtype
-- is stored and converted, element offsets under broadcasting, wide vector copies, and the
-- fp32 C statements of a list of pointwise nodes (narrow values rounded where read later).
local render = require "kiln.render"
local shape = require "kiln.shape"
local settings = require "kiln.settings"

local M = {}

-- NVRTC options of the kernels built from these expressions (pointwise, row, colreduce):
-- `-minimal` leaves out the builtin header's texture, device-runtime and launch declarations
-- that header-free sources never use (the same SASS, 2-4 ms less per compile here). The
-- fast_compile setting (rowgen.SETTINGS) min, mid or max adds NVRTC's --Ofast-compile level:
-- docs/MEMORY_BOUND.md has its compile times and the bandwidth measured with it.
function M.options()
  local fast = settings.get("fast_compile")
  if fast == "0" then return { "-minimal" } end
  return { "-minimal", "--Ofast-compile=" .. fast }
end

-- How each dtype is stored, read into fp32 and written back.
M.STORAGE = {
  fp32     = { ctype = "float",     load = "%s",                     store = "%s" },
  bf16     = { ctype = "kiln_u16",  load = "kiln_bf16_to_f32(%s)",   store = "kiln_f32_to_bf16(%s)", snippet = "common/bf16.cuh",
               -- element pairs as 32-bit words (pwexpr.regs; fewer instructions per element)
               word = { lo = "kiln_bf16lo_to_f32(%s)", hi = "kiln_bf16hi_to_f32(%s)", pack = "kiln_f32x2_to_bf16x2(%s, %s)" } },
  fp16     = { ctype = "kiln_u16",  load = "kiln_fp16_to_f32(%s)",   store = "kiln_f32_to_fp16(%s)", snippet = "common/fp16.cuh" },
  fp8_e4m3 = { ctype = "kiln_u8",   load = "kiln_e4m3_to_f32(%s)",   store = "kiln_f32_to_e4m3(%s)", snippet = "common/fp8.cuh" },
  fp8_e5m2 = { ctype = "kiln_u8",   load = "kiln_e5m2_to_f32(%s)",   store = "kiln_f32_to_e5m2(%s)", snippet = "common/fp8.cuh" },
  int32    = { ctype = "int",       load = "(float)(%s)",            store = "(int)(%s)" },
  int64    = { ctype = "kiln_i64",  load = "(float)(%s)",            store = "(kiln_i64)(%s)" },
  bool     = { ctype = "kiln_u8",   load = "(float)(%s)",            store = "(kiln_u8)((%s) != 0.0f)" },
}

-- The dtypes of 16 bits or fewer: an op's value stored in one of them (every read of a narrow
-- value is of the rounded value) may take the op's cheaper `narrow` expression.
M.NARROW = { bf16 = true, fp16 = true, fp8_e4m3 = true, fp8_e5m2 = true }

-- "%s" in pattern replaced by x (x may contain '%').
function M.fmt(pattern, x) return (pattern:gsub("%%s", function() return x end)) end

-- How a vector of V elements of storage st sits in registers: `ctype name[n]`, and
-- read(a) the fp32 value of element j (the loop variable) of array expression a. bf16 with
-- even V: 32-bit words of element pairs.
function M.regs(st, V)
  if st.word and V % 2 == 0 then
    return { ctype = "kiln_u32", n = V // 2, word = true, read = function(a)
      return string.format("((j & 1) ? %s : %s)", M.fmt(st.word.hi, a .. "[j >> 1]"), M.fmt(st.word.lo, a .. "[j >> 1]"))
    end }
  end
  return { ctype = st.ctype, n = V, read = function(a) return M.fmt(st.load, a .. "[j]") end }
end

-- How V output elements of storage st are staged in registers before one vector store, in
-- array `name`: decl (its declaration), set(v) (element j's value), pack (after the element
-- loop, or nil). bf16 with even V: the values stay fp32 and are rounded in pairs into 32-bit
-- words (one instruction per pair instead of a rounding and a packing per element).
function M.out_regs(st, V, name, align)
  align = align or 16
  if st.word and V % 2 == 0 then
    return {
      decl = string.format("float %s_f[%d]; alignas(%d) kiln_u32 %s[%d];", name, V, align, name, V // 2),
      set = function(v) return string.format("%s_f[j] = %s;", name, v) end,
      pack = string.format("for (int j = 0; j < %d; j++) %s[j] = %s;", V // 2, name,
                           string.format(st.word.pack, name .. "_f[2 * j]", name .. "_f[2 * j + 1]")),
    }
  end
  return {
    decl = string.format("alignas(%d) %s %s[%d];", align, st.ctype, name, V),
    set = function(v) return string.format("%s[j] = %s;", name, M.fmt(st.store, v)) end,
  }
end

-- The storage of dtype dt, its helper snippet added to src.
function M.storage(src, dt)
  local st = M.STORAGE[dt]
  if st.snippet then src:need(st.snippet) end
  return st
end

-- How a block scale of dtype dt is read: fp32 and e4m3 as any tensor, e8m0 (which no pointwise
-- expression reads or writes) through common/fp8.cuh's decoder.
function M.scale_storage(src, dt)
  if dt ~= "fp8_e8m0" then return M.storage(src, dt) end
  src:need("common/fp8.cuh")
  return { ctype = "kiln_u8", load = "kiln_e8m0_to_f32(%s)" }
end

-- A C expression for a dim or stride entry (integer, dynamic dim name, or "T*64").
function M.cdim(d)
  if type(d) == "number" then return string.format("%dLL", d) end
  return "(" .. d:gsub("[%a_][%w_]*", "dim_%0") .. ")"
end

function M.dims_equal(a, b) return shape.format(a) == shape.format(b) end

-- The integer factor of a stride (for alignment reasoning): 4096 -> 4096, "T*64" -> 64.
function M.const_factor(s)
  if type(s) == "number" then return s end
  local f = 1
  for part in s:gmatch("[^*]+") do if part:match("^%d+$") then f = f * tonumber(part) end end
  return f
end

-- Offset of element `iv` of the iteration space inside tensor t (broadcast strides are 0).
-- Returns the expression and whether it is the constant 0.
function M.offset_expr(t, space, iv)
  local R = #space
  local pad = R - #t.dims
  local terms = {}
  for k = 1, R do
    local d = t.dims[k - pad]
    local s = t.strides[k - pad]
    if d ~= nil and not (d == 1 and space[k] ~= 1) and space[k] ~= 1 then
      local names, const = shape.product(space, k + 1, R)
      local inner = shape.product_value(names, const)
      local coord = iv
      if inner ~= 1 then coord = string.format("(%s / %s)", coord, M.cdim(inner)) end
      if k > 1 then coord = string.format("(%s %% %s)", coord, M.cdim(space[k])) end
      terms[#terms + 1] = s == 1 and coord or string.format("%s * %s", coord, M.cdim(s))
    end
  end
  if #terms == 0 then return "0", true end
  return table.concat(terms, " + "), false
end

-- How a tensor is read for one thread's vector: "full", "row" (contiguous along the last
-- axis), "once" (same element for the whole vector), "gather" (one load per element).
function M.access(t, space, vec)
  local R = #space
  if M.dims_equal(t.dims, space) and shape.is_row_major(t.dims, t.strides) then return "full" end
  local pad = R - #t.dims
  local last_d, last_s = t.dims[R - pad], t.strides[R - pad]
  local bcast_last = last_d == nil or (last_d == 1 and space[R] ~= 1)
  if bcast_last then
    -- one element a vector where each axis t varies along has a multiple of vec elements of the
    -- output after it (a per-channel or per-row value: no offset per element)
    for k = 1, #t.dims do
      if not (t.dims[k] == 1 and space[k + pad] ~= 1) and space[k + pad] ~= 1
          and select(2, shape.product(space, k + pad + 1, R)) % vec ~= 0 then
        return "gather"
      end
    end
    return "once"
  end
  for k = 1, #t.dims - 1 do
    local d = t.dims[k]
    if not (d == 1 and space[k + pad] ~= 1) and M.const_factor(t.strides[k]) % vec ~= 0 then return "gather" end
  end
  if last_s == 1 then return "row" end
  return "gather"
end

local function chunk_type(bytes)
  if bytes >= 16 then return "uint4", bytes // 16 end
  if bytes == 8 then return "uint2", 1 end
  if bytes == 4 then return "unsigned int", 1 end
  if bytes == 2 then return "kiln_u16", 1 end
  return "kiln_u8", 1
end

-- Copies `vec` elements between a register array and global memory with wide accesses.
function M.vector_copy(dst, src, ctype, vec, elem, indent)
  local ty, n = chunk_type(vec * elem)
  indent = indent or "  "
  -- straight-line copies: each loop, even of one trip, costs NVVM time
  local copies = {}
  for i = 0, n - 1 do copies[#copies + 1] = string.format("d_[%d] = s_[%d];", i, i) end
  return string.format("%s{ const %s *s_ = reinterpret_cast<const %s *>(%s); %s *d_ = reinterpret_cast<%s *>(%s);\n" ..
    "%s  %s }", indent, ty, ty, src, ty, ty, dst, indent, table.concat(copies, " "))
end

-- The op's cexpr with attributes pasted in and operands replaced by `args[port]`.
function M.substitute(def, expr, args, attrs)
  expr = expr:gsub("@([%w_]+)@", function(name)
    local v = attrs[name]
    if type(v) == "boolean" then v = v and 1 or 0 end
    return render.float_literal(tonumber(v) or 0)
  end)
  local names = { "a", "b", "c", "d", "e" }
  for i, p in ipairs(def.input_ports) do
    local v = args[p.name] or "0.0f"
    expr = expr:gsub("%f[%w_]" .. names[i] .. "%f[^%w_]", "(" .. v .. ")")
  end
  return expr
end

-- Whether every node of the list has a device expression; else nil and the reason.
function M.supported(nodes, g)
  for _, node in ipairs(nodes) do
    if not node.def.cexpr and node.def.special ~= "gen_index" then
      return nil, string.format("op %s has no device expression", node.op)
    end
    for _, uid in pairs(node.outputs) do
      if not M.STORAGE[g.by_uid[uid].dtype] then return nil, "dtype " .. g.by_uid[uid].dtype .. " is not supported" end
    end
  end
  return true
end

-- The uids some node of the list reads.
function M.read_set(nodes)
  local read = {}
  for _, node in ipairs(nodes) do
    for _, uid in pairs(node.inputs) do read[uid] = true end
  end
  return read
end

-- Appends to `lines` the statements computing each node's output as `float v<uid>`, reading
-- operands from value[uid] and recording the new values there. A narrow output read later
-- (read_later[uid]) is rounded to its dtype first. `index` is the C expression of the
-- element's flat index in `space` (for gen_index). opts.reciprocal[uid]: a C expression of
-- 1 / value[uid], which a division by that value multiplies by (rowgen.row_divisors).
function M.emit_nodes(nodes, value, lines, opts)
  local g, src, space, index = opts.g, opts.src, opts.space, opts.index or "(i0 + j)"
  local indent, read_later = opts.indent or "    ", opts.read_later or {}
  for _, node in ipairs(nodes) do
    local def = node.def
    local args = {}
    for _, p in ipairs(def.input_ports) do
      local uid = node.inputs[p.name]
      if uid then args[p.name] = value[uid] end
    end
    local out_uid = node.outputs.OUT_0 or select(2, next(node.outputs))
    local t = g.by_uid[out_uid]
    local expr
    if def.special == "gen_index" then
      local axis = node.attrs.axis or -1
      local R, r = #space, #t.dims
      if axis < 0 then axis = axis + r end
      local k = axis + 1 + (R - r)
      if t.dims[axis + 1] == 1 then expr = "0.0f"
      else
        local names, const = shape.product(space, k + 1, R)
        local inner = shape.product_value(names, const)
        expr = string.format("(float)((%s / %s) %% %s)", index, M.cdim(inner), M.cdim(space[k]))
      end
    elseif def.name == "div" and opts.reciprocal and opts.reciprocal[node.inputs.b] then
      expr = string.format("((%s) * %s)", args.a, opts.reciprocal[node.inputs.b])
    elseif def.narrow and M.NARROW[t.dtype] then
      for _, sn in ipairs(def.narrow.snippets) do src:need(sn) end
      expr = M.substitute(def, def.narrow.cexpr, args, node.attrs)
    else
      expr = M.substitute(def, def.cexpr, args, node.attrs)
    end
    local v = "v" .. out_uid
    lines[#lines + 1] = string.format("%sfloat %s = %s;", indent, v, expr)
    if t.dtype ~= "fp32" and read_later[out_uid] then
      local st = M.storage(src, t.dtype)
      lines[#lines + 1] = string.format("%s%s = %s;", indent, v, M.fmt(st.load, M.fmt(st.store, v)))
    end
    value[out_uid] = v
  end
end

return M
