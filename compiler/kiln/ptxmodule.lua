-- kiln.ptxmodule: a kernel whose body is one PTX statement (kiln.ptx), written as a whole PTX
-- module: the parameters, shared arrays, launch bounds and programmatic-launch calls of its
-- CUDA wrapper in PTX. ptxas compiles it without NVRTC's front end and NVVM, a third to a
-- half of a row kernel's compile (docs/INTERNALS.md, "PTX modules"). A kernel with
-- anything else in its CUDA wrapper keeps the CUDA source.
local settings = require "kiln.settings"
local errors = require "kiln.errors"
local c = require "kiln.c"

local M = {}

-- The PTX ISA a target needs at least (sm_90a: 8.0, sm_100a: 8.6); the toolkit's ptxas reads
-- any version up to its own.
local function isa(sm) return sm >= 100 and "8.6" or "8.0" end

-- C parameter declarations to PTX: pointers are 64-bit addresses, kiln_i64 dims and counts
-- 64-bit integers, float scalars 32-bit floats.
local function param(decl)
  local name = decl:match("([%a_][%w_]*)%s*$")
  if not name then return nil end
  if decl:find("*", 1, true) then return name, ".u64" end
  if decl:match("^%s*const%s+kiln_i64%s") or decl:match("^%s*kiln_i64%s") then return name, ".u64" end
  if decl:match("^%s*float%s") then return name, ".f32" end
  return nil
end

local ELEM = { float = 4, kiln_u32 = 4, kiln_u16 = 2, kiln_u8 = 1 }

-- A shared array declaration of the CUDA wrapper ("[extern] __shared__ [__align__(A)] TYPE
-- NAME[N]...;"): its PTX form and name, or nil.
local function shared(line)
  local ext, rest = line:match("^%s*(%a*)%s*__shared__%s+(.*)$")
  if not rest or (ext ~= "" and ext ~= "extern") then return nil end
  local a = tonumber(rest:match("^__align__%((%d+)%)") or "")
  rest = rest:gsub("^__align__%(%d+%)%s*", "")
  local ctype, name, dims = rest:match("^([%a_][%w_]*)%s+([%a_][%w_]*)([%[%]%d]+)%s*;")
  if not ELEM[ctype or ""] then return nil end
  a = a or ELEM[ctype]
  if ext == "extern" then
    return dims == "[]" and string.format(".extern .shared .align %d .b8 %s[];", a, name) or nil, name
  end
  local bytes = ELEM[ctype]
  for d in dims:gmatch("%[(%d*)%]") do
    if d == "" then return nil end
    bytes = bytes * tonumber(d)
  end
  return string.format(".shared .align %d .b8 %s[%d];", a, name, bytes), name
end

-- Which ptxas compiles the modules (their one option, in their cache key): by default
-- "nvptxcompiler/VERSION", kiln's PTX compiler library in-process, else "ptxas", the toolkit's
-- executable in a child process (both whole-program as NVRTC compiles, so the SASS of the CUDA
-- form), else "nvjitlink" in-process, relocatable code whose registers ptxas allocates
-- differently (docs/INTERNALS.md, "PTX modules"). KILN_PTXAS=exe|nvjitlink picks one.
local compiler
local function pick()
  if compiler == nil then
    local v = settings.pick("KILN_PTXAS", { "exe", "nvjitlink" })
    local found = c.ptx_compilers()
    local lib = v == "" and found.nvptxcompiler and "nvptxcompiler/" .. found.nvptxcompiler
    compiler = lib or (v ~= "nvjitlink" and found.ptxas and "ptxas") or (found.nvjitlink and "nvjitlink") or false
  end
  return compiler
end

-- The ptxas (above) that compiles this kernel's PTX module, or nil for its CUDA form, as the
-- engine's module setting (rowgen.SETTINGS) says: auto, every kernel with its body in PTX when
-- a whole-program ptxas is there (the same SASS as NVRTC's), else only those written for a
-- module (`own`: the column sums' finalize, the amax init kernel, tuned on nvJitLink's code);
-- all, every kernel with its body in PTX through whichever ptxas there is (an error without
-- one); own, only the own kernels; off, none.
function M.wanted(own)
  local v = settings.get("module")
  if v == "off" then return nil end
  local cc = pick()
  if not cc and v == "all" then
    errors.raise_at(nil, nil, "E_NVRTC", "the module setting all (KILN_PLAN): no PTX compiler library, and neither ptxas nor nvJitLink in NVRTC's toolkit (see kiln env)")
  end
  if not cc then return nil end
  if own or v == "all" or (v == "auto" and cc ~= "nvjitlink") then return cc end
  return nil
end

-- The PTX module of row kernel K (rowgen.kernel with one K:asm statement), or nil and why not.
-- o: symbol, block, min_blocks (or nil), target ({ arch, sm }). The wrapper is laid out as
-- NVRTC lays out the CUDA form's (its parameters loaded in order into the operands' registers,
-- numbered in operand order, then the programmatic-launch calls, then the shared arrays'
-- addresses), so that ptxas sees the same program and gives the same SASS.
function M.render(K, o)
  if not o.target.arch:match("^sm_") then return nil, "a PTX target" end
  local params, order, decls = {}, {}, {}
  for i, d in ipairs(K.params) do
    local name, ty = param(d)
    if not name then return nil, "parameter " .. d end
    params[name] = { ty = ty, pname = string.format("%s_param_%d", o.symbol, i - 1) }
    order[i] = name
    decls[i] = string.format("\t.param %s %s", ty, params[name].pname)
  end
  local arrays, top, inner = {}, {}, {}
  local function declare(line)
    local ptx, name = shared(line)
    if not ptx then return false end
    arrays[name] = true
    -- a dynamic array at module scope, a static one inside the entry (as NVVM demotes it)
    if ptx:match("^%.extern") then top[#top + 1] = ptx else inner[#inner + 1] = "\t" .. ptx end
    return true
  end
  for _, line in ipairs(K.shared) do
    if not declare(line) then return nil, "shared array " .. line end
  end
  local pdl, P = false, nil
  for i, line in ipairs(K.lines) do
    if K.asm_of and K.asm_of[i] then
      if P then return nil, "two PTX statements" end
      P = K.asm_of[i]
    elseif line:match("^%s*kiln_pdl_entry%(%);") then
      pdl = true
    elseif not declare(line) then
      return nil, "statement " .. line
    end
  end
  if not P then return nil, "no PTX statement" end
  -- registers: the operands' first, per class in operand order, then temporaries
  local count = { rd = 0, r = 0, f = 0 }
  local function reg(class) count[class] = count[class] + 1; return "%" .. class .. count[class] end
  local ops = {}
  for i, op in ipairs(P.ops) do
    local c, expr = op:match('^"(%a)"%((.*)%)$')
    local class = c == "f" and "f" or c == "r" and "r" or "rd"
    ops[i] = { expr = expr, reg = reg(class), class = class }
  end
  -- what each operand is: a parameter, a shared array's address or a row count (one dim)
  local loaded, after = {}, {}
  for _, op in ipairs(ops) do
    local e = op.expr
    local arr = e:match("^&?([%a_][%w_]*)[%[%]0]*$")
    if arr and arrays[arr] then
      local t = reg("rd")
      after[#after + 1] = string.format("\tmov.u64 \t%s, %s;", t, arr)
      after[#after + 1] = string.format("\tcvta.shared.u64 \t%s, %s;", op.reg, t)
    elseif params[e] then
      if loaded[e] then after[#after + 1] = string.format("\tmov.b64 \t%s, %s;", op.reg, loaded[e])
      else loaded[e] = op.reg end
    else
      -- a row count: one dim (a product of several keeps the CUDA form)
      local dim = e:match("^%(kiln_i64%)%(%(?([%a_][%w_]*)%)?%)$")
      if not dim or not params[dim] or params[dim].ty ~= ".u64" then return nil, "operand " .. e end
      if loaded[dim] then after[#after + 1] = string.format("\tmov.b64 \t%s, %s;", op.reg, loaded[dim])
      else loaded[dim] = op.reg end
    end
  end
  local out = {
    "// kiln: " .. o.symbol .. ", a PTX module (kiln.ptxmodule)",
    "", ".version " .. isa(o.target.sm), ".target " .. o.target.arch, ".address_size 64", "",
  }
  for _, t in ipairs(top) do out[#out + 1] = t end
  out[#out + 1] = string.format(".visible .entry %s(\n%s\n)", o.symbol, table.concat(decls, ",\n"))
  out[#out + 1] = string.format(".maxntid %d, 1, 1", o.block)
  if o.min_blocks then out[#out + 1] = string.format(".minnctapersm %d", o.min_blocks) end
  out[#out + 1] = "{"
  for _, class in ipairs({ "r", "f", "rd" }) do
    local ty = class == "rd" and ".b64" or class == "f" and ".f32" or ".b32"
    if count[class] > 0 then out[#out + 1] = string.format("\t.reg %s \t%%%s<%d>;", ty, class, count[class] + 1) end
  end
  for _, l in ipairs(inner) do out[#out + 1] = l end
  out[#out + 1] = ""
  for _, name in ipairs(order) do
    if loaded[name] then
      out[#out + 1] = string.format("\tld.param%s \t%s, [%s];", params[name].ty, loaded[name], params[name].pname)
    end
  end
  -- programmatic dependent launch (sm_90+): wait for the previous kernel, let the next start
  if pdl and o.target.sm >= 90 then
    out[#out + 1] = "\tgriddepcontrol.wait;"
    out[#out + 1] = "\tgriddepcontrol.launch_dependents;"
  end
  for _, l in ipairs(after) do out[#out + 1] = l end
  -- the statement's own registers and lines, its operands %N the registers above
  out[#out + 1] = P:block_text(function(n) return ops[tonumber(n) + 1].reg end)
  out[#out + 1] = "\tret;"
  out[#out + 1] = "}"
  return table.concat(out, "\n") .. "\n"
end

return M
