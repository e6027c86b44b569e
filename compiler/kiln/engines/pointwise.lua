-- kiln.engines.pointwise: fuses a DAG of pointwise ops (broadcast, casts) into one kernel
-- with 16-byte vector loads and stores where shapes and alignment allow.
local render = require "kiln.render"
local shape = require "kiln.shape"
local dtypes = require "kiln.dtypes"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local pointwise_ptx = require "kiln.engines.pointwise_ptx"

local E = { id = "pointwise", version = 1 }
-- The row code's settings its PTX forms read (kiln.settings, rowgen.SETTINGS, rowptx.SETTINGS),
-- and repeat: inputs repeating along the leading dims (a bias) in the PTX form (ptx) or the CUDA
-- form (cuda; pointwise_ptx.accepts).
E.settings = rowgen.settings(rowgen.SETTINGS, rowptx.SETTINGS, { ["repeat"] = { "ptx", "cuda" } })

local STORAGE = pw.STORAGE
E.STORAGE = STORAGE

local BLOCK = 256

local fmt, cdim, dims_equal = pw.fmt, pw.cdim, pw.dims_equal
local offset_expr, access, vector_copy = pw.offset_expr, pw.access, pw.vector_copy

function E.propose(group, g, target)
  if group.family ~= "pointwise" then
    return nil, string.format("group is a %s op (%s), not pointwise", group.family, (group.anchor or group.nodes[1]).op)
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
  local ok, why = pw.supported(group.nodes, g)
  if not ok then return nil, why end
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

-- The launch grid: one thread for each `vec` elements of `space`, `block` threads a CTA.
local function grid_of(space, block, vec)
  local names, const = shape.product(space)
  local factors = {}
  for _, n in ipairs(names) do factors[#factors + 1] = n end
  factors[#factors + 1] = const
  return { { mul = factors, div = block * vec, max = 0 }, 1, 1 }
end

-- The kernel with its body in PTX (pointwise_ptx.lua): its CUDA form is the PTX wrapped in a
-- kernel, and where PTX modules are wanted its module compiles without NVRTC.
local function build_ptx(plan, group, g, target, symbol, space)
  local vec, block = plan.knobs.vec, plan.knobs.block
  local K = rowgen.kernel(g, symbol)
  K.target = target
  pointwise_ptx.emit(K, group, g, vec, block, space)
  K.src:add(render.fill(render.template("pointwise_ptx.cuh"), {
    block = block, symbol = symbol, params = K:finish_params(), body = table.concat(K.lines, "\n"),
    what = string.format("%d elements a thread, %d threads a CTA, body in PTX", vec, block),
  }, "pointwise_ptx.cuh"))
  return rowgen.with_source({
    symbol = symbol, engine = E.id, plan_id = plan.id, options = pw.options(),
    block = { block, 1, 1 }, grid = grid_of(space, block, vec),
    smem = 0, cluster = { 1, 1, 1 }, params = K.mparams, align = K.align, pdl_entry = true,
  }, K, K.src:text())
end

function E.build(plan, group, g, target, symbol)
  local vec, block = plan.knobs.vec, plan.knobs.block
  local space = g.by_uid[group.outputs[1]].dims
  local ptx_ok, cuda_why = pointwise_ptx.accepts(group, g, vec, space, target)
  if ptx_ok then return build_ptx(plan, group, g, target, symbol, space) end
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
  local function storage(dt) return pw.storage(src, dt) end
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
  pw.emit_nodes(group.nodes, value, body, { g = g, src = src, space = space, read_later = pw.read_set(group.nodes) })
  -- outputs: full-size, row-major, written as vectors
  for _, uid in ipairs(group.outputs) do
    local t = g.by_uid[uid]
    local st = storage(t.dtype)
    local size = dtypes.size(t.dtype)
    params[#params + 1] = string.format("%s *__restrict__ p%d", st.ctype, uid)
    manifest_params[#manifest_params + 1] = { kind = "tensor", uid = uid }
    local o = pw.out_regs(st, vec, "w" .. uid)
    prologue[#prologue + 1] = "  " .. o.decl
    body[#body + 1] = "    " .. o.set(value[uid])
    if o.pack then epilogue[#epilogue + 1] = "#pragma unroll\n  " .. o.pack end
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
  src:need("common/pdl.cuh")
  src:add(render.fill(render.template("pointwise.cuh"), {
    vec = vec, block = block, symbol = symbol, params = table.concat(params, ", "), numel = numel,
    prologue = table.concat(prologue, "\n"), body = table.concat(body, "\n"), epilogue = table.concat(epilogue, "\n"),
  }, "pointwise.cuh"))
  return {
    symbol = symbol, engine = E.id, plan_id = plan.id, source = src:text(), options = pw.options(),
    block = { block, 1, 1 }, grid = grid_of(space, block, vec),
    smem = 0, cluster = { 1, 1, 1 }, params = manifest_params, align = align, pdl_entry = true, cuda_why = cuda_why,
  }
end

return E
