-- kiln.ptxmodule: a kernel whose body is one PTX statement (kiln.ptx), written as a whole PTX
-- module: the parameters, shared arrays, launch bounds and programmatic-launch calls of its
-- CUDA wrapper in PTX. ptxas (through nvJitLink) compiles it without NVRTC's front end and
-- NVVM, which cost about 20 ms a kernel on the CPU machine (docs/INTERNALS.md, "PTX modules").
-- A kernel with anything else in its CUDA wrapper keeps the CUDA source.
local settings = require "kiln.settings"
local errors = require "kiln.errors"

local M = {}

-- The PTX ISA a target needs at least (sm_90a: 8.0, sm_100a: 8.6); the toolkit's ptxas reads
-- any version up to its own.
local function isa(sm) return sm >= 100 and "8.6" or "8.0" end

-- C parameter declarations to PTX: pointers are 64-bit addresses, kiln_i64 dims and counts
-- 64-bit integers, float scalars 32-bit floats.
local function param(decl)
  local name = decl:match("([%a_][%w_]*)%s*$")
  if not name then return nil end
  if decl:find("*", 1, true) then return name, ".u64", "b64" end
  if decl:match("^%s*const%s+kiln_i64%s") or decl:match("^%s*kiln_i64%s") then return name, ".s64", "b64" end
  if decl:match("^%s*float%s") then return name, ".f32", "f32" end
  return nil
end

local ELEM = { float = 4, kiln_u32 = 4, kiln_u16 = 2, kiln_u8 = 1 }

-- A shared array declaration of the CUDA wrapper: its PTX form, or nil.
local function shared(line)
  local ext, align, ctype, name, dims = line:match(
    "^%s*(e?x?t?e?r?n?)%s*__shared__%s+(_?_?a?l?i?g?n?_?_?%(?%d*%)?)%s*([%a_][%w_]*)%s+([%a_][%w_]*)(%b[][%[%]%d]*)%s*;")
  if not name or not ELEM[ctype] then return nil end
  local a = tonumber(align:match("%((%d+)%)") or "") or ELEM[ctype]
  if ext == "extern" then
    if dims ~= "[]" then return nil end
    return string.format(".extern .shared .align %d .b8 %s[];", a, name), name
  elseif ext ~= "" then
    return nil
  end
  local bytes = ELEM[ctype]
  for d in dims:gmatch("%[(%d*)%]") do
    if d == "" then return nil end
    bytes = bytes * tonumber(d)
  end
  return string.format(".shared .align %d .b8 %s[%d];", a, name, bytes), name
end

-- An operand's C expression as PTX instructions setting register r: a parameter, a shared
-- array's generic address, or a 64-bit product of parameters and integers.
local function operand(expr, r, params, arrays, out)
  local arr = expr:match("^&?([%a_][%w_]*)[%[%]0]*$")
  if arr and arrays[arr] then
    out[#out + 1] = string.format("mov.u64 %s, %s;", r, arr)
    out[#out + 1] = string.format("cvta.shared.u64 %s, %s;", r, r)
    return true
  end
  if params[expr] then
    out[#out + 1] = string.format("ld.param%s %s, [%s];", params[expr], r, expr)
    return true
  end
  local prod = expr:match("^%(kiln_i64%)%((.*)%)$")
  if not prod then return false end
  prod = prod:gsub("[()%s]", "")
  local first = true
  for f in (prod .. "*"):gmatch("([^*]*)%*") do
    local set = first and "mov.b64 %s, %s;" or "mul.lo.s64 %s, %s, %s;"
    local val
    if f:match("^%d+$") then val = f
    elseif params[f] == ".s64" then
      val = r .. "f"
      out[#out + 1] = string.format("ld.param.s64 %s, [%s];", val, f)
    else return false end
    out[#out + 1] = first and string.format(set, r, val) or string.format(set, r, r, val)
    first = false
  end
  return true
end

-- Whether kernels with their body in PTX are written as PTX modules (KILN_PTX_MODULE=off keeps
-- the CUDA wrapper, compiled by NVRTC, for measuring).
function M.wanted()
  local v, bad = settings.choice("KILN_PTX_MODULE", { "on", "off" })
  if not v then errors.raise_at(nil, nil, "E_USAGE", "%s", bad) end
  return v ~= "off"
end

-- The PTX module of row kernel K (rowgen.kernel with one K:asm statement), or nil and why not.
-- o: symbol, block, min_blocks (or nil), target ({ arch, sm }).
function M.render(K, o)
  if not o.target.arch:match("^sm_") then return nil, "a PTX target" end
  local params, decls, regs = {}, {}, {}
  for _, d in ipairs(K.params) do
    local name, ty = param(d)
    if not name then return nil, "parameter " .. d end
    params[name] = ty
    decls[#decls + 1] = string.format("  .param %s %s", ty, name)
  end
  local arrays, top = {}, {}
  for _, line in ipairs(K.shared) do
    local ptx, name = shared(line)
    if not ptx then return nil, "shared array " .. line end
    arrays[name] = true
    top[#top + 1] = ptx
  end
  local body, P = {}, nil
  for i, line in ipairs(K.lines) do
    if K.asm_of and K.asm_of[i] then
      if P then return nil, "two PTX statements" end
      P = K.asm_of[i]
    elseif line:match("^%s*kiln_pdl_entry%(%);") then
      -- programmatic dependent launch (sm_90+): wait for the previous kernel, let the next start
      if o.target.sm >= 90 then body[#body + 1] = "griddepcontrol.wait;\ngriddepcontrol.launch_dependents;" end
    else
      local ptx, name = shared(line)
      if not ptx then return nil, "statement " .. line end
      arrays[name] = true
      top[#top + 1] = ptx
    end
  end
  if not P then return nil, "no PTX statement" end
  local setup = {}
  for i, op in ipairs(P.ops) do
    local c, expr = op:match('^"(%a)"%((.*)%)$')
    local r = "%ko" .. (i - 1)
    regs[#regs + 1] = string.format(".reg .%s %s;", c == "f" and "f32" or c == "r" and "b32" or "b64", r)
    -- a product's factors are loaded into one scratch register
    if expr:match("^%(kiln_i64%)") then regs[#regs + 1] = string.format(".reg .b64 %sf;", r) end
    if not operand(expr, r, params, arrays, setup) then return nil, "operand " .. expr end
  end
  local out = {
    "// kiln: " .. o.symbol .. ", a PTX module (kiln.ptxmodule)",
    ".version " .. isa(o.target.sm),
    ".target " .. o.target.arch,
    ".address_size 64",
    "",
  }
  for _, t in ipairs(top) do out[#out + 1] = t end
  out[#out + 1] = ""
  out[#out + 1] = string.format(".visible .entry %s(\n%s\n)", o.symbol, table.concat(decls, ",\n"))
  out[#out + 1] = string.format(".maxntid %d, 1, 1", o.block)
  if o.min_blocks then out[#out + 1] = string.format(".minnctapersm %d", o.min_blocks) end
  out[#out + 1] = "{"
  for _, r in ipairs(regs) do out[#out + 1] = r end
  for _, l in ipairs(body) do out[#out + 1] = l end
  for _, l in ipairs(setup) do out[#out + 1] = l end
  -- the statement's own registers and lines; its operands %N are the %koN set above
  out[#out + 1] = P:block_text(function(n) return "%ko" .. n end)
  out[#out + 1] = "ret;"
  out[#out + 1] = "}"
  return table.concat(out, "\n") .. "\n"
end

return M
