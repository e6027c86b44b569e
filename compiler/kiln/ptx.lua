-- kiln.ptx: a kernel body written as PTX, emitted as one inline-asm statement of the CUDA
-- source. NVRTC's front end and NVVM then see one statement, not unrolled element code, and
-- the kernel costs ptxas's time only (docs/MEMORY_BOUND.md, compile time).
local M = {}

-- Register classes and their names (the `k` keeps them apart from NVVM's own registers).
-- 32-bit floats and words share .b32 registers: PTX lets a bit-size register serve any type
-- of its size, so unpacking a bf16 is one instruction.
local PREFIX = { pred = "%kp", b16 = "%kh", b32 = "%kr", b64 = "%kd" }
local ORDER = { "pred", "b16", "b32", "b64" }

-- The PTX spelling of an fp32 constant (exact: its bits).
function M.f32(x)
  return string.format("0f%08X", string.unpack("<I4", string.pack("<f", x)))
end

function M.new()
  local P = { n = { pred = 0, b16 = 0, b32 = 0, b64 = 0 }, lines = {}, ops = {}, labels = 0 }
  -- a fresh register of class `t`
  function P:reg(t)
    self.n[t] = self.n[t] + 1
    return PREFIX[t] .. self.n[t]
  end
  -- n fresh registers of class `t`, as a list
  function P:regs(t, n)
    local r = {}
    for i = 1, n do r[i] = self:reg(t) end
    return r
  end
  function P:label()
    self.labels = self.labels + 1
    return "$Lk" .. self.labels
  end
  -- one instruction (format and arguments as string.format)
  function P:put(fmt, ...)
    self.lines[#self.lines + 1] = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  end
  function P:at(label) self.lines[#self.lines + 1] = label .. ":" end
  -- a new register set by one instruction: P:def("b32", "add.s32 %s, %s, 1", x)
  function P:def(t, fmt, ...)
    local r = self:reg(t)
    self:put(fmt, r, ...)
    return r
  end
  -- an input operand from a C++ expression ("l" 64-bit, "r" 32-bit): its PTX name
  function P:input(constraint, expr)
    self.ops[#self.ops + 1] = string.format('"%s"(%s)', constraint, expr)
    return "%" .. (#self.ops - 1)
  end
  -- the asm statement, as source lines
  function P:statement(indent)
    local out = { indent .. 'asm volatile("{\\n"' }
    local decl = {}
    for _, t in ipairs(ORDER) do
      if self.n[t] > 0 then decl[#decl + 1] = string.format(".reg .%s %s<%d>;", t, PREFIX[t], self.n[t] + 1) end
    end
    out[#out + 1] = indent .. '  "' .. table.concat(decl, " ") .. '\\n"'
    for _, l in ipairs(self.lines) do
      -- a register's % doubles inside an asm string (an operand's, %N, does not); quotes escape
      out[#out + 1] = indent .. '  "' .. l:gsub("%%(%a)", "%%%%%1"):gsub('"', '\\"') .. '\\n"'
    end
    out[#out + 1] = string.format('%s  "}" :: %s : "memory");', indent, table.concat(self.ops, ", "))
    return table.concat(out, "\n")
  end
  return P
end

return M
