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

function M.pow2(n) return n >= 1 and n & (n - 1) == 0 end
function M.log2(n)
  local k = 0
  while (1 << k) < n do k = k + 1 end
  return k
end

-- The builder's methods: a kernel body's registers, labels, instructions and operands, and
-- the forms kernels share (loads, stores, folds, conversions).
local Builder = {}
Builder.__index = Builder

-- a fresh register of class `t`
function Builder:reg(t)
  self.n[t] = self.n[t] + 1
  return PREFIX[t] .. self.n[t]
end
-- n fresh registers of class `t`, as a list
function Builder:regs(t, n)
  local r = {}
  for i = 1, n do r[i] = self:reg(t) end
  return r
end
function Builder:label()
  self.labels = self.labels + 1
  return "$Lk" .. self.labels
end
-- one instruction (format and arguments as string.format)
function Builder:put(fmt, ...)
  self.lines[#self.lines + 1] = select("#", ...) > 0 and string.format(fmt, ...) or fmt
end
function Builder:at(label) self.lines[#self.lines + 1] = label .. ":" end
-- floor(x / d) for a b64 x below 2^40 and a constant d below 2^24: a shift, or the high half
-- of x * (floor(2^64 / d) + 1) (ptxas divides 64 bits by calling a routine, even by a constant)
function Builder:quotient(x, d)
  if d == 1 then return x end
  if M.pow2(d) then return self:def("b64", "shr.u64 %s, %s, %d;", x, M.log2(d)) end
  local m = ((((1 << 32) // d) << 32) + ((((1 << 32) % d) << 32) // d)) + 1
  return self:def("b64", "mul.hi.u64 %s, %s, 0x%016X;", x, m)
end
-- a new register set by one instruction: P:def("b32", "add.s32 %s, %s, 1", x)
function Builder:def(t, fmt, ...)
  local r = self:reg(t)
  self:put(fmt, r, ...)
  return r
end
-- an input operand from a C++ expression ("l" 64-bit, "r" 32-bit): its PTX name
function Builder:input(constraint, expr)
  self.ops[#self.ops + 1] = string.format('"%s"(%s)', constraint, expr)
  return "%" .. (#self.ops - 1)
end
-- A generic pointer operand as a global address (64 bits) or a shared one (32 bits).
function Builder:global(op) return self:def("b64", "cvta.to.global.u64 %s, %s;", op) end
function Builder:shared(op) return self:def("b32", "cvt.u32.u64 %s, %s;", self:def("b64", "cvta.to.shared.u64 %s, %s;", op)) end
-- The thread's place in a CTA of `rpc` groups of `p` threads (powers of two): tid, the
-- CTA's index, the lane in its group and the group (slot; nil when rpc is 1).
function Builder:place(p, rpc)
  local tid = self:def("b32", "mov.u32 %s, %%tid.x;")
  local cta = self:def("b32", "mov.u32 %s, %%ctaid.x;")
  if rpc == 1 then return tid, cta, tid, nil end
  return tid, cta, self:def("b32", "and.b32 %s, %s, %d;", tid, p - 1), self:def("b32", "shr.u32 %s, %s, %d;", tid, M.log2(p))
end
-- Vector q (0-based) of thread `lane` in a row of h elements, in vectors of v, p threads a
-- vector apart: in_row(q) is the predicate that it lies in the row (a ragged row's last
-- vectors), nil when every lane's does; each predicate defined once, at first use.
function Builder:in_row(lane, p, v, h)
  local memo = {}
  return function(q)
    if (q + 1) * p * v <= h then return nil end
    memo[q] = memo[q] or self:def("pred", "setp.lt.u32 %s, %s, %d;", lane, h // v - q * p)
    return memo[q]
  end
end
-- Predicates a and b, either of which may be nil: a and b, or the one given.
function Builder:both(a, b)
  if a and b then return self:def("pred", "and.pred %s, %s, %s;", a, b) end
  return a or b
end
-- The cache-policy operand of a load in `space` that names an L2 cache hint: the policy
-- register the kernel made (self.l2_policy, rowgen.l2_policy).
function Builder:policy(space)
  if not space:find("L2::cache_hint", 1, true) then return "" end
  assert(self.l2_policy, "a load with an L2 cache hint before its policy")
  return ", " .. self.l2_policy
end
-- Loads `bytes` at [base+off] in 16-, 8- and 4-byte pieces: the words, in order (under
-- predicate `pred` when given, zeros where it is false; undefined with `unfilled`, for
-- values never used then: ptxas issued such a load only after the work before it).
function Builder:load(space, base, off, bytes, pred, unfilled)
  local words, o = {}, 0
  while o < bytes do
    local n = bytes - o >= 16 and 4 or (bytes - o >= 8 and 2 or 1)
    local r = self:regs("b32", n)
    if pred and not unfilled then for _, x in ipairs(r) do self:put("mov.b32 %s, 0;", x) end end  -- zeros where it does not load
    self:put("%sld.%s%s.b32 %s, [%s+%d]%s;", pred and ("@" .. pred .. " ") or "", space, n == 1 and "" or ".v" .. n,
      n == 1 and r[1] or "{" .. table.concat(r, ", ") .. "}", base, off + o, self:policy(space))
    for _, x in ipairs(r) do words[#words + 1] = x end
    o = o + 4 * n
  end
  return words
end
-- v combined with `op` over the `lanes` lanes (a power of two, at most 32) of its group of a
-- warp by xor shuffles (every lane gets the result; 1 lane: v itself).
function Builder:butterfly(v, lanes, op)
  local o = lanes // 2
  while o > 0 do
    v = self:def("b32", op .. " %s, %s, %s;", v, self:def("b32", "shfl.sync.bfly.b32 %s, %s, %d, 31, -1;", v, o))
    o = o // 2
  end
  return v
end
-- A pair of statistics (x, y) combined over `lanes` lanes likewise: each step shuffles both,
-- then combine(x, y, xo, yo, k) gives the pair of the two halves, each of k lanes.
function Builder:butterfly_pair(x, y, lanes, combine)
  local o, k = lanes // 2, 1
  while o > 0 do
    local xo = self:def("b32", "shfl.sync.bfly.b32 %s, %s, %d, 31, -1;", x, o)
    local yo = self:def("b32", "shfl.sync.bfly.b32 %s, %s, %d, 31, -1;", y, o)
    x, y = combine(x, y, xo, yo, k)
    o, k = o // 2, 2 * k
  end
  return x, y
end
-- `values` (every thread of the CTA holds them) combined over a cluster of n CTAs: thread
-- t < n stores them into slot `rank` of CTA t's array at `base` (n floats a value), one
-- cluster barrier, then each value's n slots fold in rank order with `op` (the same bits in
-- every CTA). The peers must have started (a barrier.cluster.wait before the first use).
-- `to` = { peer =, mine = }: the target rank and the store predicate, made once by a loop.
function Builder:cluster_fold(base, rank, tid, n, values, op, to)
  self:cluster_share(base, rank, tid, n, values, to)
  local out = {}
  for i = 1, #values do out[i] = self:load_fold("shared", base, (i - 1) * n * 4, n, op) end
  return out
end
-- cluster_fold's stores and barrier: afterwards value i's n slots (rank order) are at
-- [base + (i - 1) * n * 4] in every CTA.
function Builder:cluster_share(base, rank, tid, n, values, to)
  local peer = to and to.peer or self:def("b32", "min.u32 %s, %s, %d;", tid, n - 1)
  local remote = self:def("b32", "mapa.shared::cluster.u32 %s, %s, %s;", self:def("b32", "mad.lo.s32 %s, %s, 4, %s;", rank, base), peer)
  local mine = to and to.mine or self:def("pred", "setp.lt.u32 %s, %s, %d;", tid, n)
  for i, v in ipairs(values) do
    self:put("@%s st.shared::cluster.f32 [%s%s], %s;", mine, remote, i == 1 and "" or "+" .. (i - 1) * n * 4, v)
  end
  self:put("barrier.cluster.arrive.release.aligned;")
  self:put("barrier.cluster.wait.acquire.aligned;")
end
-- The n 32-bit values at [base+off] in `space` folded in order with `op` (e.g. add.f32):
-- a reduction's partial values, the same bits in every thread that folds them.
function Builder:load_fold(space, base, off, n, op)
  local ws = self:load(space, base, off, n * 4)
  local s = ws[1]
  for q = 2, n do s = self:def("b32", op .. " %s, %s, %s;", s, ws[q]) end
  return s
end
-- Stores `words` at [base+off] likewise, under predicate `pred` when given.
function Builder:store(space, base, off, words, pred)
  local i, g = 1, pred and ("@" .. pred .. " ") or ""
  while i <= #words do
    local left = #words - i + 1
    local n = left >= 4 and 4 or (left >= 2 and 2 or 1)
    local r = { table.unpack(words, i, i + n - 1) }
    self:put("%sst.%s%s.b32 [%s+%d], %s;", g, space, n == 1 and "" or ".v" .. n, base, off + 4 * (i - 1),
      n == 1 and r[1] or "{" .. table.concat(r, ", ") .. "}")
    i = i + n
  end
end
-- Element j (0-based) of a vector of `dtype` (fp32, bf16, fp16) held as words, as an fp32
-- register: reader(j). A bf16 is the high half of its fp32: `form` "shift" (default) shifts
-- the low element up and masks the high one, "prmt" moves their bytes, "bfi" inserts them. Passes over a held
-- row use different forms, so that ptxas converts the words again rather than keeping the
-- first pass's fp32 values live (registers decide occupancy).
function Builder:reader(words, dtype, form)
  local halves = {}
  return function(j)
    if dtype == "fp32" then return words[j + 1] end
    local w = words[(j >> 1) + 1]
    if dtype == "bf16" then
      if form == "prmt" then return self:def("b32", "prmt.b32 %s, %s, 0, %s;", w, (j & 1) == 0 and "0x1044" or "0x3244") end
      if form == "bfi" then
        return (j & 1) == 0 and self:def("b32", "bfi.b32 %s, %s, 0, 16, 16;", w) or self:def("b32", "bfi.b32 %s, 0, %s, 0, 16;", w)
      end
      return (j & 1) == 0 and self:def("b32", "shl.b32 %s, %s, 16;", w) or self:def("b32", "and.b32 %s, %s, -65536;", w)
    end
    local h = halves[w]
    if not h then
      h = self:regs("b16", 2)
      self:put("mov.b32 {%s, %s}, %s;", h[1], h[2], w)
      halves[w] = h
    end
    return self:def("b32", "cvt.f32.f16 %s, %s;", h[(j & 1) + 1])
  end
end
-- fp32 values as the words of `dtype` (pairs rounded together; fp8 needs sm_89; bool bytes).
function Builder:pack(vals, dtype)
  if dtype == "fp32" then return vals end
  local words = {}
  if dtype == "bool" then
    -- a byte each, 1 where the value is not 0 (as the CUDA form stores a bool), four a word
    for i = 1, #vals, 4 do
      local w
      for b = 0, 3 do
        local one = self:def("b32", "selp.b32 %s, 1, 0, %s;", self:def("pred", "setp.neu.f32 %s, %s, 0f00000000;", vals[i + b]))
        w = w and self:def("b32", "bfi.b32 %s, %s, %s, %d, 8;", one, w, 8 * b) or one
      end
      words[#words + 1] = w
    end
    return words
  end
  if dtype == "fp8_e4m3" or dtype == "fp8_e5m2" then
    -- pairs round to 16 bits (saturating to the largest finite value), two pairs make a word
    local cvt = dtype == "fp8_e4m3" and "cvt.rn.satfinite.e4m3x2.f32" or "cvt.rn.satfinite.e5m2x2.f32"
    local halves = {}
    for i = 1, #vals, 2 do halves[#halves + 1] = self:def("b16", cvt .. " %s, %s, %s;", vals[i + 1], vals[i]) end
    for i = 1, #halves, 2 do words[#words + 1] = self:def("b32", "mov.b32 %s, {%s, %s};", halves[i], halves[i + 1]) end
    return words
  end
  local cvt = dtype == "bf16" and "cvt.rn.bf16x2.f32" or "cvt.rn.f16x2.f32"
  for i = 1, #vals, 2 do words[#words + 1] = self:def("b32", cvt .. " %s, %s, %s;", vals[i + 1], vals[i]) end
  return words
end
-- 1/x within an ulp of rcp.rn: the approximation and one Newton step, as rcp.rn's own fast
-- path, without its slow path for the exponent extremes (4-5 ms of ptxas a kernel). Where
-- the step gives NaN (x zero or infinite) the approximation is the answer.
function Builder:recip(x)
  local a = self:def("b32", "rcp.approx.f32 %s, %s;", x)
  local e = self:def("b32", "fma.rn.f32 %s, %s, %s, 0f3F800000;", self:def("b32", "neg.f32 %s, %s;", x), a)
  local r = self:def("b32", "fma.rn.f32 %s, %s, %s, %s;", a, e, a)
  return self:def("b32", "selp.f32 %s, %s, %s, %s;", a, r, self:def("pred", "testp.notanumber.f32 %s, %s;", r))
end
-- An fp32 value rounded to `dtype` (bf16, fp16) and back: what a 16-bit tensor holds.
function Builder:round(v, dtype)
  if dtype == "bf16" then
    return self:def("b32", "and.b32 %s, %s, -65536;", self:def("b32", "cvt.rn.bf16x2.f32 %s, %s, %s;", v, v))
  end
  return self:def("b32", "cvt.f32.f16 %s, %s;", self:def("b16", "cvt.rn.f16.f32 %s, %s;", v))
end
-- the .reg declarations of the registers used, a line each
function Builder:declarations()
  local decl = {}
  for _, t in ipairs(ORDER) do
    if self.n[t] > 0 then decl[#decl + 1] = string.format(".reg .%s %s<%d>;", t, PREFIX[t], self.n[t] + 1) end
  end
  return decl
end
-- the statement as a PTX block of its own (a PTX module's kernel body, kiln.ptxmodule), its
-- operands %N named by name(N)
function Builder:block_text(name)
  local out = { "{" }
  for _, d in ipairs(self:declarations()) do out[#out + 1] = d end
  for _, l in ipairs(self.lines) do
    out[#out + 1] = (l:gsub("%%(%d+)", function(n) return name(n) end))
  end
  out[#out + 1] = "}"
  return table.concat(out, "\n")
end
-- the asm statement, as source lines
function Builder:statement(indent)
  local out = { indent .. 'asm volatile("{\\n"' }
  out[#out + 1] = indent .. '  "' .. table.concat(self:declarations(), " ") .. '\\n"'
  for _, l in ipairs(self.lines) do
    -- a register's % doubles inside an asm string (an operand's, %N, does not); quotes escape
    out[#out + 1] = indent .. '  "' .. l:gsub("%%(%a)", "%%%%%1"):gsub('"', '\\"') .. '\\n"'
  end
  out[#out + 1] = string.format('%s  "}" :: %s : "memory");', indent, table.concat(self.ops, ", "))
  return table.concat(out, "\n")
end

-- an empty kernel body
function M.new()
  return setmetatable({ n = { pred = 0, b16 = 0, b32 = 0, b64 = 0 }, lines = {}, ops = {}, labels = 0 }, Builder)
end

return M
