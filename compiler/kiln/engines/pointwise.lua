-- kiln.engines.pointwise: fuses a DAG of pointwise ops (broadcast, casts) into one kernel
-- with 16-byte vector loads and stores where shapes and alignment allow.
local render = require "kiln.render"
local shape = require "kiln.shape"
local dtypes = require "kiln.dtypes"

local E = { id = "pointwise", version = 1 }

-- How each dtype is stored, read into fp32 and written back.
local STORAGE = {
  fp32     = { ctype = "float",     load = "%s",                     store = "%s" },
  bf16     = { ctype = "kiln_u16",  load = "kiln_bf16_to_f32(%s)",   store = "kiln_f32_to_bf16(%s)", snippet = "common/bf16.cuh" },
  fp16     = { ctype = "kiln_u16",  load = "kiln_fp16_to_f32(%s)",   store = "kiln_f32_to_fp16(%s)", snippet = "common/fp16.cuh" },
  fp8_e4m3 = { ctype = "kiln_u8",   load = "kiln_e4m3_to_f32(%s)",   store = "kiln_f32_to_e4m3(%s)", snippet = "common/fp8.cuh" },
  fp8_e5m2 = { ctype = "kiln_u8",   load = "kiln_e5m2_to_f32(%s)",   store = "kiln_f32_to_e5m2(%s)", snippet = "common/fp8.cuh" },
  int32    = { ctype = "int",       load = "(float)(%s)",            store = "(int)(%s)" },
  int64    = { ctype = "kiln_i64",  load = "(float)(%s)",            store = "(kiln_i64)(%s)" },
  bool     = { ctype = "kiln_u8",   load = "(float)(%s)",            store = "(kiln_u8)((%s) != 0.0f)" },
}
E.STORAGE = STORAGE

local BLOCK = 256

local function fmt(pattern, x) return (pattern:gsub("%%s", function() return x end)) end

-- A C expression for a dim or stride entry (integer, dynamic dim name, or "T*64").
local function cdim(d)
  if type(d) == "number" then return string.format("%dLL", d) end
  return "(" .. d:gsub("[%a_][%w_]*", "dim_%0") .. ")"
end

local function dims_equal(a, b) return shape.format(a) == shape.format(b) end

-- The integer factor of a stride (for alignment reasoning): 4096 -> 4096, "T*64" -> 64.
local function const_factor(s)
  if type(s) == "number" then return s end
  local f = 1
  for part in s:gmatch("[^*]+") do if part:match("^%d+$") then f = f * tonumber(part) end end
  return f
end

function E.propose(group, g, target)
  if group.family ~= "pointwise" then
    return nil, string.format("group is a %s op (%s), not pointwise", group.family, group.nodes[1].op)
  end
  if #group.spills > 0 then
    local t = g.by_uid[group.spills[1]]
    return nil, string.format("virtual tensor '%s' is consumed by another kernel group (needs a workspace buffer)", t.name)
  end
  if #group.outputs == 0 then return nil, "the group writes no output" end
  local space = g.by_uid[group.outputs[1]].dims
  local tensors = {}
  for _, uid in ipairs(group.outputs) do
    local t = g.by_uid[uid]
    if not dims_equal(t.dims, space) then
      return nil, string.format("outputs '%s' %s and '%s' %s differ in shape", g.by_uid[group.outputs[1]].name,
        shape.format(space), t.name, shape.format(t.dims))
    end
    tensors[#tensors + 1] = t
  end
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    local b = shape.broadcast(t.dims, space)
    if not b or not dims_equal(b, space) then
      return nil, string.format("input '%s' %s does not broadcast to the output shape %s", t.name, shape.format(t.dims), shape.format(space))
    end
    if t.role ~= "constant" then tensors[#tensors + 1] = t end
  end
  for _, node in ipairs(group.nodes) do
    if not node.def.cexpr and node.def.special ~= "gen_index" then
      return nil, string.format("op %s has no device expression", node.op)
    end
    for _, uid in pairs(node.outputs) do
      if not STORAGE[g.by_uid[uid].dtype] then return nil, "dtype " .. g.by_uid[uid].dtype .. " is not supported" end
    end
  end
  local min_size = 16
  for _, t in ipairs(tensors) do
    if not STORAGE[t.dtype] then return nil, "dtype " .. t.dtype .. " is not supported" end
    min_size = math.min(min_size, dtypes.size(t.dtype))
  end
  local last = space[#space]
  local vec = math.min(16 // min_size, 8)
  if type(last) ~= "number" then vec = 1 end
  while vec > 1 and last % vec ~= 0 do vec = vec // 2 end
  local plans = { { id = string.format("pointwise:v%d:vec%d:b%d", E.version, vec, BLOCK), knobs = { vec = vec, block = BLOCK }, rank = vec } }
  if vec > 1 then
    plans[2] = { id = string.format("pointwise:v%d:vec1:b%d", E.version, BLOCK), knobs = { vec = 1, block = BLOCK }, rank = 0 }
  end
  return plans
end

-- Offset of element `iv` of the iteration space inside tensor t (broadcast strides are 0).
local function offset_expr(t, space, iv)
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
      if inner ~= 1 then coord = string.format("(%s / %s)", coord, cdim(inner)) end
      if k > 1 then coord = string.format("(%s %% %s)", coord, cdim(space[k])) end
      terms[#terms + 1] = s == 1 and coord or string.format("%s * %s", coord, cdim(s))
    end
  end
  if #terms == 0 then return "0", true end
  return table.concat(terms, " + "), false
end

-- How a tensor is read for one thread's vector: "full", "row" (contiguous along the last
-- axis), "once" (same element for the whole vector), "gather" (one load per element).
local function access(t, space, vec)
  local R = #space
  if dims_equal(t.dims, space) and shape.is_row_major(t.dims, t.strides) then return "full" end
  local pad = R - #t.dims
  local last_d, last_s = t.dims[R - pad], t.strides[R - pad]
  local bcast_last = last_d == nil or (last_d == 1 and space[R] ~= 1)
  for k = 1, #t.dims - 1 do
    local d = t.dims[k]
    if not (d == 1 and space[k + pad] ~= 1) and const_factor(t.strides[k]) % vec ~= 0 then return "gather" end
  end
  if bcast_last then return "once" end
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
local function vector_copy(dst, src, ctype, vec, elem)
  local ty, n = chunk_type(vec * elem)
  return string.format("  { const %s *s_ = reinterpret_cast<const %s *>(%s); %s *d_ = reinterpret_cast<%s *>(%s);\n" ..
    "    for (int c_ = 0; c_ < %d; c_++) d_[c_] = s_[c_]; }", ty, ty, src, ty, ty, dst, n)
end

local function substitute(def, expr, args, attrs)
  expr = expr:gsub("@([%w_]+)@", function(name)
    local v = attrs[name]
    if type(v) == "boolean" then v = v and 1 or 0 end
    return render.float_literal(tonumber(v) or 0)
  end)
  local names = { "a", "b", "c" }
  for i, p in ipairs(def.input_ports) do
    local v = args[p.name] or "0.0f"
    expr = expr:gsub("%f[%w_]" .. names[i] .. "%f[^%w_]", "(" .. v .. ")")
  end
  return expr
end

function E.build(plan, group, g, target, symbol)
  local vec, block = plan.knobs.vec, plan.knobs.block
  local space = g.by_uid[group.outputs[1]].dims
  local src = render.source()
  src:need("common/prelude.cuh")
  local params, manifest_params, align = {}, {}, {}
  local prologue, body, epilogue = {}, {}, {}
  local dyn = {}
  local function note_dyn(list)
    for _, d in ipairs(list) do
      if type(d) == "string" then for n in d:gmatch("[%a_][%w_]*") do dyn[n] = true end end
    end
  end
  note_dyn(space)
  local function storage(dt)
    local st = STORAGE[dt]
    if st.snippet then src:need(st.snippet) end
    return st
  end
  local value = {}
  -- inputs
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    local v = "v" .. uid
    if t.role == "constant" then
      value[uid] = render.float_literal(t.value)
    elseif t.role == "scalar" then
      params[#params + 1] = "float s" .. uid
      manifest_params[#manifest_params + 1] = { kind = "scalar", uid = uid }
      value[uid] = "s" .. uid
    else
      note_dyn(t.dims); note_dyn(t.strides)
      local st = storage(t.dtype)
      local size = dtypes.size(t.dtype)
      params[#params + 1] = string.format("const %s *__restrict__ p%d", st.ctype, uid)
      manifest_params[#manifest_params + 1] = { kind = "tensor", uid = uid }
      local how = access(t, space, vec)
      if vec == 1 and how ~= "full" then how = "gather" end
      align[uid] = size
      if how == "full" or how == "row" then
        local off = how == "full" and "i0" or offset_expr(t, space, "i0")
        prologue[#prologue + 1] = string.format("  alignas(16) %s r%d[%d];", st.ctype, uid, vec)
        prologue[#prologue + 1] = vector_copy("r" .. uid, string.format("p%d + (%s)", uid, off), st.ctype, vec, size)
        body[#body + 1] = string.format("    const float %s = %s;", v, fmt(st.load, string.format("r%d[j]", uid)))
        align[uid] = math.min(16, vec * size)
      elseif how == "once" then
        local off = offset_expr(t, space, "i0")
        prologue[#prologue + 1] = string.format("  const float %s = %s;", v, fmt(st.load, string.format("p%d[%s]", uid, off)))
      else
        local off = offset_expr(t, space, "(i0 + j)")
        body[#body + 1] = string.format("    const float %s = %s;", v, fmt(st.load, string.format("p%d[%s]", uid, off)))
      end
      value[uid] = v
    end
  end
  -- nodes; a narrow intermediate is rounded only where later nodes read it
  local read_later = {}
  for _, node in ipairs(group.nodes) do
    for _, uid in pairs(node.inputs) do read_later[uid] = true end
  end
  for _, node in ipairs(group.nodes) do
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
        expr = string.format("(float)(((i0 + j) / %s) %% %s)", cdim(inner), cdim(space[k]))
      end
    else
      expr = substitute(def, def.cexpr, args, node.attrs)
    end
    local v = "v" .. out_uid
    body[#body + 1] = string.format("    float %s = %s;", v, expr)
    if t.dtype ~= "fp32" and read_later[out_uid] then
      local st = storage(t.dtype)
      body[#body + 1] = string.format("    %s = %s;", v, fmt(st.load, fmt(st.store, v)))
    end
    value[out_uid] = v
  end
  -- outputs: full-size, row-major, written as vectors
  for _, uid in ipairs(group.outputs) do
    local t = g.by_uid[uid]
    local st = storage(t.dtype)
    local size = dtypes.size(t.dtype)
    params[#params + 1] = string.format("%s *__restrict__ p%d", st.ctype, uid)
    manifest_params[#manifest_params + 1] = { kind = "tensor", uid = uid }
    prologue[#prologue + 1] = string.format("  alignas(16) %s w%d[%d];", st.ctype, uid, vec)
    body[#body + 1] = string.format("    w%d[j] = %s;", uid, fmt(st.store, value[uid]))
    epilogue[#epilogue + 1] = vector_copy(string.format("p%d + i0", uid), "w" .. uid, st.ctype, vec, size)
    align[uid] = math.min(16, vec * size)
  end
  local dyn_names = {}
  for n in pairs(dyn) do dyn_names[#dyn_names + 1] = n end
  table.sort(dyn_names)
  for _, n in ipairs(dyn_names) do
    params[#params + 1] = "kiln_i64 dim_" .. n
    manifest_params[#manifest_params + 1] = { kind = "dim", name = n }
  end
  local names, const = shape.product(space)
  local numel = cdim(shape.product_value(names, const))
  src:add(render.fill(render.template("pointwise.cuh"), {
    vec = vec, block = block, symbol = symbol, params = table.concat(params, ", "), numel = numel,
    prologue = table.concat(prologue, "\n"), body = table.concat(body, "\n"), epilogue = table.concat(epilogue, "\n"),
  }, "pointwise.cuh"))
  local factors = {}
  for _, n in ipairs(names) do factors[#factors + 1] = n end
  factors[#factors + 1] = const
  return {
    symbol = symbol, engine = E.id, plan_id = plan.id, source = src:text(), options = {},
    block = { block, 1, 1 }, grid = { { mul = factors, div = block * vec, max = 0 }, 1, 1 },
    smem = 0, cluster = { 1, 1, 1 }, params = manifest_params, align = align,
  }
end

return E
