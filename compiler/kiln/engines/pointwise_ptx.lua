-- kiln.engines.pointwise_ptx: the pointwise kernel with its body written as PTX (kiln.ptx), the
-- same work as pointwise.lua's CUDA form: each thread the `vec` consecutive elements of the
-- flattened output at its index, 16-byte loads and stores, the fused ops of ptxops. Its PTX
-- module (kiln.ptxmodule) compiles by ptxas alone, so a JIT of pointwise specs need not load
-- NVRTC. Takes inputs of the output's shape (row-major), single fp32 values, scalars and
-- constants, inputs repeating along the leading dims (a bias; repeat=cuda declines them),
-- values read once a vector at compile-time places (per-channel: batch norm's scale and mean),
-- fp32/fp16/bf16 tensors (fp8 outputs from sm_89); anything else keeps the CUDA form, as does
-- the code setting cuda (rowgen.ptx_wanted).
local dtypes = require "kiln.dtypes"
local shape = require "kiln.shape"
local ptx = require "kiln.ptx"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local ptxops = require "kiln.engines.ptxops"
local reduce_ptx = require "kiln.engines.reduce_ptx"
local settings = require "kiln.settings"

local M = {}

local IN = ptxops.IN

-- The period of a row-major input broadcast over the output's leading dims (its dims past the
-- leading 1s are the output's last ones, all constant): its element count, or nil.
local function period(t, space)
  local first = 1
  while first < #t.dims and t.dims[first] == 1 do first = first + 1 end
  local pad, n = #space - #t.dims, 1
  for k = first, #t.dims do
    if type(t.dims[k]) ~= "number" or t.dims[k] ~= space[k + pad] then return nil end
    n = n * t.dims[k]
  end
  return shape.is_row_major(t.dims, t.strides) and n or nil
end

-- Whether inputs repeating along the leading dims take this form (the pointwise engine's
-- setting repeat=cuda, for measuring, keeps them in the CUDA form). The thread's vector
-- counted and masked in 32 bits: bias_gelu 0.988-1.006x the CUDA form at 4096-32768 rows of
-- 4096 and 8192, a bias + GELU + scale 0.985-0.996x, in half its cold compile and without
-- loading NVRTC (on an H200; docs/INTERNALS.md).
local function repeat_wanted()
  return settings.get("repeat") ~= "cuda"
end

-- The place of a value read once a vector (pwexpr.access "once": a per-channel or per-row
-- value) in t, as pwexpr.offset_expr writes it: terms { div, mod, stride } with the coordinate
-- (vector / div) % mod (mod nil for the outermost axis), all compile-time and below 2^24
-- (P:quotient's range); nil when some part is not.
local function once_terms(t, space, vec)
  local R = #space
  local pad = R - #t.dims
  local terms = {}
  for k = 1, R do
    local d, st = t.dims[k - pad], t.strides[k - pad]
    if d ~= nil and not (d == 1 and space[k] ~= 1) and space[k] ~= 1 then
      local names, inner = shape.product(space, k + 1, R)
      local mod = k > 1 and space[k] or nil
      if #names > 0 or type(st) ~= "number" or (mod and type(mod) ~= "number") then return nil end
      if inner % vec ~= 0 or inner // vec >= 1 << 24 or (mod or 0) >= 1 << 24 then return nil end
      terms[#terms + 1] = { div = inner // vec, mod = mod, stride = st }
    end
  end
  return terms
end

-- How input t reaches the kernel: "full" (a vector of the output's shape), "suffix" (a vector of
-- a tensor repeating along the leading dims, e.g. a bias over the last: at most 65536 vectors),
-- "one" (a single fp32 value), "once" (one value a vector: its place's terms), "value" (a scalar
-- or a constant), or nil and why not.
local function input_kind(t, space, vec)
  if t.role == "constant" or t.role == "scalar" then return "value" end
  if not IN[t.dtype] then return nil, t.name .. " is " .. t.dtype end
  local how = pw.access(t, space, vec)
  if how == "full" or how == "row" then
    if (vec * dtypes.size(t.dtype)) % 4 ~= 0 then return nil, "vectors narrower than a word" end
    if how == "full" then return "full" end
    local n = period(t, space)
    if n and n % vec == 0 and n // vec <= 65536 then
      if repeat_wanted() then return "suffix", n // vec end
      return nil, t.name .. " repeats along the leading dims (the repeat setting cuda)"
    end
  end
  if rowptx.one_value(t) and t.dtype == "fp32" then return "one" end
  if how == "once" then
    local terms = once_terms(t, space, vec)
    if terms then return "once", terms end
    return nil, t.name .. " is read once a vector at a place with run-time factors"
  end
  return nil, t.name .. " is broadcast"
end

-- Whether this form takes the group (pointwise.lua's plan: vec elements a thread over `space`):
-- true, or nil and why not.
function M.accepts(group, g, vec, space, target)
  if not rowgen.ptx_wanted() then return nil, "code setting cuda" end
  for _, d in ipairs(space) do
    if type(d) ~= "number" and not tostring(d):match("^[%a_][%w_]*$") then return nil, "dim " .. tostring(d) end
  end
  local bad = ptxops.op_declines(group.nodes, g)
  if bad then return nil, bad end
  for _, uid in ipairs(group.inputs) do
    local ok, why = input_kind(g.by_uid[uid], space, vec)
    if not ok then return nil, why end
  end
  local read_later = pw.read_set(group.nodes)
  bad = ptxops.read_again_declines(group.nodes, g, read_later)
  if bad then return nil, bad end
  for _, uid in ipairs(group.outputs) do
    bad = ptxops.output_declines(g.by_uid[uid], vec, read_later, target)
    if bad then return nil, bad end
  end
  return true
end

-- The kernel body into K (rowgen.kernel): the thread's vector, past the end nothing,
-- else its inputs' vectors, the nodes per element, the outputs' vectors.
function M.emit(K, group, g, vec, block, space)
  rowgen.pdl_entry(K)
  local P = ptx.new()
  local function def(t, ...) return P:def(t, ...) end
  local tid = def("b32", "mov.u32 %s, %%tid.x;")
  local cta = def("b32", "mov.u32 %s, %%ctaid.x;")
  local thread = def("b64", "add.s64 %s, %s, %s;", def("b64", "mul.wide.u32 %s, %s, %d;", cta, block),
    def("b64", "cvt.u64.u32 %s, %s;", tid))
  -- the vector count: the constant part (the last dim, a multiple of vec) times each dynamic dim
  local names, const = shape.product(space)
  local n = def("b64", "mov.b64 %s, %d;", const // vec)
  for _, name in ipairs(names) do
    K:note_dyn({ name })
    n = def("b64", "mul.lo.s64 %s, %s, %s;", n, P:input("l", string.format("(kiln_i64)(dim_%s)", name)))
  end
  local DONE = P:label()
  P:put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", thread, n), DONE)
  -- the address of the thread's vector of tensor uid: vector `index` (b64, or b32 with `wide`)
  -- of it, the thread's own by default
  local function at(uid, writable, index, wide)
    local size = dtypes.size(g.by_uid[uid].dtype)
    K:need_align(uid, math.min(16, vec * size))
    local base = P:global(P:input("l", K:ptr(uid, writable)))
    local op = wide and "mad.wide.u32" or "mad.lo.s64"
    return def("b64", op .. " %s, %s, %d, %s;", index or thread, vec * size, base), size
  end
  -- the thread's vector in a tensor of d vectors repeating: thread mod d. ptxas divides even by
  -- a constant with its reciprocal routine (a MUFU and some 20 instructions ahead of the loads),
  -- so: a mask of the thread's low word for a power of two (d <= 65536 divides 2^32), else the
  -- quotient as the high half of thread * (floor(2^64 / d) + 1) (exact for thread < 2^48)
  local function repeated(d)
    if ptx.pow2(d) then
      local low = def("b32", "mad.lo.u32 %s, %s, %d, %s;", cta, block, tid)
      return def("b32", "and.b32 %s, %s, %d;", low, d - 1), true
    end
    return def("b64", "sub.s64 %s, %s, %s;", thread, def("b64", "mul.lo.s64 %s, %s, %d;", P:quotient(thread, d), d))
  end
  -- the element offset of a value read once a vector (once_terms): the sum of the vector's
  -- coordinates times the strides, made once for the inputs that share it (nil: 0)
  local offsets = {}
  local function once_offset(terms)
    local key = {}
    for i, tm in ipairs(terms) do key[i] = string.format("%d/%s*%d", tm.div, tostring(tm.mod), tm.stride) end
    key = table.concat(key, "+")
    if offsets[key] == nil then
      local off = false
      for _, tm in ipairs(terms) do
        local c = P:quotient(thread, tm.div)
        if tm.mod then c = def("b64", "sub.s64 %s, %s, %s;", c, def("b64", "mul.lo.s64 %s, %s, %d;", P:quotient(c, tm.mod), tm.mod)) end
        if off then off = def("b64", "mad.lo.s64 %s, %s, %d, %s;", c, tm.stride, off)
        else off = tm.stride == 1 and c or def("b64", "mul.lo.s64 %s, %s, %d;", c, tm.stride) end
      end
      offsets[key] = off
    end
    return offsets[key] or nil
  end
  local value = {}  -- value[j][uid]: element j's fp32 register
  for j = 0, vec - 1 do value[j] = {} end
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    local kind, d = input_kind(t, space, vec)
    local v
    if kind == "value" then
      v = t.role == "constant" and ptx.f32(t.value) or P:input("f", K:scalar(uid))
    elseif kind == "one" then
      v = def("b32", "ld.global.nc.b32 %s, [%s];", P:global(P:input("l", K:ptr(uid))))
    elseif kind == "once" then
      local off = once_offset(d)
      local z = dtypes.size(t.dtype)
      K:need_align(uid, z)
      local base = P:global(P:input("l", K:ptr(uid)))
      v = reduce_ptx.load_value(P, off and def("b64", "mad.lo.s64 %s, %s, %d, %s;", off, z, base) or base, t.dtype)
    end
    if v then
      for j = 0, vec - 1 do value[j][uid] = v end
    else
      local index, wide
      if kind == "suffix" then index, wide = repeated(d) end
      local addr, size = at(uid, false, index, wide)
      local read = P:reader(P:load("global.nc", addr, 0, vec * size), t.dtype)
      for j = 0, vec - 1 do value[j][uid] = read(j) end
    end
  end
  -- the nodes, element by element
  local read_later = pw.read_set(group.nodes)
  for j = 0, vec - 1 do ptxops.run_nodes(P, group.nodes, value[j], g, read_later) end
  for _, uid in ipairs(group.outputs) do
    local vals = {}
    for j = 0, vec - 1 do vals[j + 1] = value[j][uid] end
    P:store("global", at(uid, true), 0, P:pack(vals, g.by_uid[uid].dtype))
  end
  P:at(DONE)
  K:asm(P)
end

return M
