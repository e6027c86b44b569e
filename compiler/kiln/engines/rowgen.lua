-- kiln.engines.rowgen: code generation shared by the row-wise engines (norms, softmax,
-- reductions). A row is the trailing `H` elements of the element space E (the anchor's
-- input dims); a group of P threads (a power of two) owns a row, RPC rows per CTA, and each
-- thread moves N vectors of V elements: vector k of lane l starts at column (l + k*P)*V,
-- so a warp's accesses are consecutive 16-byte chunks.
local render = require "kiln.render"
local shape = require "kiln.shape"
local dtypes = require "kiln.dtypes"
local pw = require "kiln.engines.pwexpr"
local settings = require "kiln.settings"
local sms = require "kiln.engines.sms"
local ptxmodule = require "kiln.ptxmodule"
local partials_ptx = require "kiln.engines.partials_ptx"
local lower = require "kiln.lower"

local M = {}

M.options = pw.options

local fmt, cdim = pw.fmt, pw.cdim

-- Whether the last `n` axes of dims are compile-time, and their product.
function M.suffix(dims, n)
  local H = 1
  for i = #dims - n + 1, #dims do
    if type(dims[i]) ~= "number" then return nil end
    H = H * dims[i]
  end
  return H
end

-- t's dims and strides without the axes in `drop` (positions among n axes, t right-aligned),
-- where t's extent there is 1.
local function squeeze(t, drop, n)
  local pad, dims, strides = n - #t.dims, {}, {}
  for j, d in ipairs(t.dims) do
    if not (drop[j + pad] and d == 1) then dims[#dims + 1], strides[#strides + 1] = d, t.strides[j] end
  end
  if #dims == #t.dims then return t end
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  c.dims, c.strides = dims, strides
  return setmetatable(c, getmetatable(t))
end

-- g as a row kernel of anchor input x sees it: every tensor without the axes where x has
-- extent 1 ([N, C, 1, 1] channels-last and [N, 1, 1, C] with a [1, 1, 1, C] scale, cuDNN's
-- norm layouts, become one contiguous row of C); the same memory, g itself where x has none.
function M.unit_axes_dropped(g, x)
  local drop, n, kept = {}, #x.dims, 0
  for i, d in ipairs(x.dims) do
    if d == 1 then drop[i] = true else kept = kept + 1 end
  end
  if kept == n or kept == 0 then return g end
  local by_uid = setmetatable({}, { __index = function(cache, uid)
    local t = g.by_uid[uid]
    if t == nil then return nil end
    local v = squeeze(t, drop, n)
    rawset(cache, uid, v)
    return v
  end })
  return setmetatable({ by_uid = by_uid }, { __index = g })
end

-- The product of dims[from..to] (none: 1) as a C expression, as a launch factor list
-- ({"T", 4}), and as a number when compile-time.
function M.extent(dims, from, to)
  local names, const = shape.product(dims, from, to)
  local factors = {}
  for _, n in ipairs(names) do factors[#factors + 1] = n end
  if const ~= 1 or #factors == 0 then factors[#factors + 1] = const end
  return cdim(shape.product_value(names, const)), factors, #names == 0 and const or nil
end

-- The number of rows as a C expression and as a launch factor list.
function M.rows(dims, nsuffix)
  local expr, factors = M.extent(dims, 1, #dims - nsuffix)
  return expr, factors
end

-- How tensor t is read per element of the row space E (last nsuffix axes form the row):
--   "full"  same dims, row-major: vector at row*H + c
--   "col"   1 on every row axis, row-major over the row: vector at c (a scale, a bias)
--   "row"   1 on every row axis... of the suffix: one value per row (a [T, 1] tensor)
--   "gather" anything else: one offset computation per element
function M.classify(t, E, nsuffix)
  if pw.dims_equal(t.dims, E) and shape.is_row_major(t.dims, t.strides) then return "full" end
  local R, pad = #E, #E - #t.dims
  local const_row, const_col = true, true
  for k = 1, R do
    local d = t.dims[k - pad]
    local bcast = d == nil or (d == 1 and E[k] ~= 1)
    if k <= R - nsuffix then
      if not bcast then const_row = false end
    elseif not bcast then
      const_col = false
    end
  end
  if const_col then return "row" end
  if const_row then
    -- the suffix must be the tensor's own trailing axes, row-major among themselves
    local sub_d, sub_s = {}, {}
    for k = R - nsuffix + 1, R do
      local d = t.dims[k - pad]
      if d == nil or d ~= E[k] then return "gather" end
      sub_d[#sub_d + 1] = d
      sub_s[#sub_s + 1] = t.strides[k - pad]
    end
    if shape.is_row_major(sub_d, sub_s) then return "col" end
  end
  return "gather"
end

-- Threads per row P, vectors per thread N, rows per CTA: about `target` vectors per thread
-- (loads in flight), at most 1024 threads per row and 128 threads per CTA at least.
function M.layout(H, V, target)
  local NV = H // V
  local P = 1
  while P < 1024 and P * target < NV do P = P * 2 end
  local N = (NV + P - 1) // P
  local RPC = P >= 128 and 1 or 128 // P
  return { H = H, V = V, NV = NV, P = P, N = N, RPC = RPC, block = P * RPC, even = NV % P == 0 }
end

-- The widest vector (elements, at most 8 and 16 bytes of the narrowest dtype) dividing H.
function M.vector_width(H, tensors)
  local min_size = 16
  for _, t in ipairs(tensors) do min_size = math.min(min_size, dtypes.size(t.dtype)) end
  local V = math.min(16 // min_size, 8)
  while V > 1 and H % V ~= 0 do V = V // 2 end
  return V
end

-- Elements a thread loads at once when every tensor's load is at most 16 bytes (one word): the
-- widest dtype's 16 bytes, at most 8, a divisor of n (1 where n is not compile-time).
function M.load_width(tensors, n)
  if not n then return 1 end
  local V = 8
  for _, t in ipairs(tensors) do V = math.min(V, 16 // dtypes.size(t.dtype)) end
  while n % V ~= 0 do V = V // 2 end
  return V
end

-- Ways a CTA splits R rows (nil: not compile-time, taken as 8 ways' worth) that keep `step`
-- rows in flight a thread twice over, at most `most`.
function M.row_splits(R, step, most)
  local RS, n = 1, R or 8 * 2 * step
  while RS < most and n >= 2 * 2 * RS * step do RS = RS * 2 end
  return RS
end

-- Dynamic shared memory of `bytes` beside `static` bytes: past 48 KB in all it takes the
-- runtime's opt-in, so it never lands just below it (where the launch would fail without it).
function M.dynamic_smem(bytes, static)
  if bytes + (static or 0) + 1024 > 48 * 1024 and bytes <= 48 * 1024 then return 48 * 1024 + 256 end
  return bytes
end

-- The C type of dtypes kernels move as bytes only (block quantize's e8m0 scales).
M.RAW_CTYPE = { fp8_e8m0 = "kiln_u8" }

-- A kernel under construction: parameters (with the manifest's view of them), alignment
-- needs, dynamic dims used, the helper snippets, and the body lines.
function M.kernel(g, symbol)
  local K = { g = g, symbol = symbol, src = render.source(), params = {}, mparams = {}, align = {}, dyn = {},
              lines = {}, shared = {}, seen = {}, value = {} }
  K.src:need("common/prelude.cuh")
  function K:note_dyn(list)
    for _, d in ipairs(list) do
      if type(d) == "string" then for n in d:gmatch("[%a_][%w_]*") do self.dyn[n] = true end end
    end
  end
  -- the pointer parameter of a memory tensor (inputs const)
  function K:ptr(uid, writable)
    local name = "p" .. uid
    if not self.seen[name] then
      self.seen[name] = true
      local t = self.g.by_uid[uid]
      -- (a dtype no expression reads or writes, an e8m0 scale: its bytes)
      local st = pw.STORAGE[t.dtype] and pw.storage(self.src, t.dtype) or { ctype = M.RAW_CTYPE[t.dtype] }
      self:note_dyn(t.dims); self:note_dyn(t.strides)
      self.params[#self.params + 1] = string.format("%s%s *__restrict__ %s", writable and "" or "const ", st.ctype, name)
      self.mparams[#self.mparams + 1] = { kind = "tensor", uid = uid }
      self.align[uid] = math.max(self.align[uid] or 1, dtypes.size(t.dtype))
    end
    return name
  end
  function K:need_align(uid, bytes) self.align[uid] = math.max(self.align[uid] or 1, bytes) end
  -- a source tensor's value outside the element loops: constant literal or runtime scalar
  function K:scalar(uid)
    local t = self.g.by_uid[uid]
    if t.role == "constant" then return render.float_literal(t.value) end
    local name = "s" .. uid
    if not self.seen[name] then
      self.seen[name] = true
      self.params[#self.params + 1] = "float " .. name
      self.mparams[#self.mparams + 1] = { kind = "scalar", uid = uid }
    end
    return name
  end
  -- the workspace at byte `offset` as a float pointer parameter (named `name`, default ws)
  function K:workspace(offset, name)
    name = name or "ws"
    self.params[#self.params + 1] = "float *__restrict__ " .. name
    self.mparams[#self.mparams + 1] = { kind = "workspace", offset = offset }
    return name
  end
  function K:add(fmt_, ...) self.lines[#self.lines + 1] = select("#", ...) > 0 and string.format(fmt_, ...) or fmt_ end
  -- P's body (kiln.ptx) as the kernel's asm statement; kept for its PTX module (kiln.ptxmodule)
  function K:asm(P)
    self:add(P:statement("  "))
    self.asm_of = self.asm_of or {}
    self.asm_of[#self.lines] = P
  end
  -- dynamic dims become the last parameters, sorted by name
  function K:finish_params()
    local names = {}
    for n in pairs(self.dyn) do names[#names + 1] = n end
    table.sort(names)
    for _, n in ipairs(names) do
      self.params[#self.params + 1] = "kiln_i64 dim_" .. n
      self.mparams[#self.mparams + 1] = { kind = "dim", name = n }
    end
    return table.concat(self.params, ", ")
  end
  return K
end

-- Statements reducing the float variables `vars` over each row's P threads (all threads of
-- the group end with the result). combine(a, b) -> statement list text over names a_i / b_i
-- given as arrays. Warp shuffles, then (P > 32) one shared-memory round in a fixed order:
-- the result is deterministic. `tag` names the shared array; every thread must get here.
function M.allreduce(K, L, vars, combine, tag, indent)
  indent = indent or "  "
  local P = L.P
  local bs = {}
  for i, v in ipairs(vars) do bs[i] = v .. "_o" end
  local function shuffle_round(offset)
    local lines = {}
    for i, v in ipairs(vars) do
      lines[#lines + 1] = string.format("const float %s = __shfl_xor_sync(0xffffffffu, %s, o_);", bs[i], v)
    end
    lines[#lines + 1] = combine(vars, bs)
    return string.format("%s#pragma unroll\n%sfor (int o_ = %s; o_ > 0; o_ >>= 1) { %s }", indent, indent, offset,
      table.concat(lines, " "))
  end
  if P > 1 then K:add(shuffle_round(tostring(math.min(P, 32) // 2))) end
  if P > 32 then
    local W = P // 32
    local arr = {}
    for i, v in ipairs(vars) do
      arr[i] = string.format("%s_%d", tag, i - 1)
      K.shared[#K.shared + 1] = string.format("  __shared__ float %s[%d];", arr[i], L.block // 32)
    end
    local st = {}
    for i, v in ipairs(vars) do st[#st + 1] = string.format("%s[threadIdx.x >> 5] = %s;", arr[i], v) end
    K:add("%sif ((threadIdx.x & 31) == 0) { %s }", indent, table.concat(st, " "))
    K:add("%s__syncthreads();", indent)
    local ld, ld2 = {}, {}
    for i, v in ipairs(vars) do
      ld[#ld + 1] = string.format("%s = %s[w0_];", v, arr[i])
      ld2[#ld2 + 1] = string.format("const float %s = %s[w0_ + w_];", bs[i], arr[i])
    end
    K:add("%s{ const int w0_ = (threadIdx.x / %d) * %d; %s", indent, P, W, table.concat(ld, " "))
    K:add("%s#pragma unroll\n%s  for (int w_ = 1; w_ < %d; w_++) { %s %s } }", indent, indent, W, table.concat(ld2, " "),
      combine(vars, bs))
  end
end

function M.combine_add(a, b)
  local t = {}
  for i = 1, #a do t[i] = string.format("%s += %s;", a[i], b[i]) end
  return table.concat(t, " ")
end

-- One pass over a row: loads of `loads` (uids read as vectors, "full", "col", or a column
-- block from the row start `starts[uid]`, a C expression), then per
-- element `body(lines, kx)`; `pre(lines, kx)` / `post(lines, kx)` run per vector before and
-- after the element loop (output staging and stores). With `fused` the loads sit in the same
-- loop as the compute (large N); otherwise all loads of all N vectors are issued first, into
-- arrays r<tag>_<uid>[N][V] that stay alive after the pass (the register-held row).
-- Values of loaded elements are available to body as value[uid] (set here).
function M.pass(K, L, opts)
  local g = K.g
  local tag = opts.tag
  local guard = {}
  if opts.valid then guard[#guard + 1] = opts.valid end
  if not L.even then guard[#guard + 1] = string.format("c < %d", L.H) end
  local open = #guard > 0 and string.format("if (%s) ", table.concat(guard, " && ")) or ""
  local function head(lines)
    lines[#lines + 1] = string.format("#pragma unroll%s", opts.unroll and (" " .. opts.unroll) or "")
    lines[#lines + 1] = string.format("  for (int k = 0; k < %d; k++) {", L.N)
    lines[#lines + 1] = string.format("    const int c = (lane + k * %d) * %d;", L.P, L.V)
    lines[#lines + 1] = string.format("    %s{", open)
  end
  local function tail(lines) lines[#lines + 1] = "    }"; lines[#lines + 1] = "  }" end
  local kx = opts.fused and "" or "[k]"
  local function load_lines(lines)
    for _, uid in ipairs(opts.loads) do
      local t = g.by_uid[uid]
      local st = pw.storage(K.src, t.dtype)
      local size = dtypes.size(t.dtype)
      local how = opts.access[uid]
      local off = how == "full" and string.format("row * %dLL + c", L.H)
        or (opts.starts and opts.starts[uid] and opts.starts[uid] .. " + c") or "c"
      local arr = string.format("r%s_%d", tag, uid)
      if opts.fused then lines[#lines + 1] = string.format("      alignas(16) %s %s[%d];", st.ctype, arr, L.V) end
      local ptr = opts.ptr_of and opts.ptr_of(uid) or K:ptr(uid)
      lines[#lines + 1] = pw.vector_copy(arr .. kx, string.format("%s + %s", ptr, off), st.ctype, L.V, size, "      ")
      K:need_align(uid, math.min(16, L.V * size))
    end
  end
  local lines = K.lines
  if not opts.fused then
    for _, uid in ipairs(opts.loads) do
      local st = pw.storage(K.src, g.by_uid[uid].dtype)
      lines[#lines + 1] = string.format("  alignas(16) %s r%s_%d[%d][%d];", st.ctype, tag, uid, L.N, L.V)
    end
    if #opts.loads > 0 then
      head(lines)
      load_lines(lines)
      tail(lines)
    end
  end
  head(lines)
  if opts.fused then load_lines(lines) end
  if opts.pre then opts.pre(lines, kx) end
  lines[#lines + 1] = "#pragma unroll"
  lines[#lines + 1] = string.format("      for (int j = 0; j < %d; j++) {", L.V)
  for _, uid in ipairs(opts.loads) do
    local st = pw.STORAGE[g.by_uid[uid].dtype]
    K.value[uid] = "v" .. uid
    lines[#lines + 1] = string.format("        const float v%d = %s;", uid, fmt(st.load, string.format("r%s_%d%s[j]", tag, uid, kx)))
  end
  opts.body(lines, kx)
  lines[#lines + 1] = "      }"
  if opts.post then opts.post(lines, kx) end
  tail(lines)
end

-- Reduction modes: initial value, per element update (%a accumulator, %v value), how two
-- partials combine, and the final map (%n the element count).
M.REDUCE = {
  add          = { init = "0.0f", upd = "%a += %v;",                         comb = "add" },
  avg          = { init = "0.0f", upd = "%a += %v;",                         comb = "add", fin = "%a * (1.0f / %n)" },
  norm1        = { init = "0.0f", upd = "%a += fabsf(%v);",                  comb = "add" },
  norm2        = { init = "0.0f", upd = "%a = fmaf(%v, %v, %a);",            comb = "add", fin = "sqrtf(%a)" },
  mul          = { init = "1.0f", upd = "%a *= %v;",                         comb = "mul" },
  mul_no_zeros = { init = "1.0f", upd = "%a *= (%v != 0.0f ? %v : 1.0f);",   comb = "mul" },
  min          = { init = "__int_as_float(0x7f800000)", upd = "%a = kiln_fmin_nan(%a, %v);", comb = "min" },
  max          = { init = "__int_as_float(0xff800000)", upd = "%a = kiln_fmax_nan(%a, %v);", comb = "max" },
  amax         = { init = "0.0f", upd = "%a = kiln_fmax_nan(%a, fabsf(%v));", comb = "max" },
}

-- The checks every reduction engine makes of its group (a reduction anchor, no workspace
-- crossing, a supported prologue and mode, Y written in a storage dtype, every input stored in
-- one and broadcasting to the reduced tensor): the anchor, its
-- mode (M.REDUCE), x and y, and `list` (each reduction's anchor, mode and y: one, or the
-- sibling reductions lower merged where an engine's `fuses` allowed), or nil and why. `kind`
-- names the reduction in the epilogue's refusal.
function M.reduction_group(group, g, kind)
  local a = group.anchor
  if not a or a.op ~= "reduction" then
    return nil, string.format("group is a %s op (%s), not a reduction", group.family, (group.anchor or group.nodes[1]).op)
  end
  local anchors = group.reductions or { a }
  if #(group.epilogue or {}) > 0 or #(group.amax or {}) > 0 then return nil, "no epilogue after a " .. kind end
  local ok, why = pw.supported(group.prologue or {}, g)
  if not ok then return nil, why end
  local list = {}
  for i, r in ipairs(anchors) do
    local mode = M.REDUCE[r.attrs.mode]
    if not mode then return nil, string.format("reduction mode %s is not supported", r.attrs.mode) end
    local y = g.by_uid[r.outputs.Y]
    if not pw.STORAGE[y.dtype] then return nil, string.format("dtype %s of Y is not supported", y.dtype) end
    if not lower.written(y) then return nil, string.format("Y '%s' is not written (virtual)", y.name) end
    list[i] = { anchor = r, mode = mode, y = y }
  end
  local x, y, mode = g.by_uid[a.inputs.input], list[1].y, list[1].mode
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then
      local bad = M.source_declines(t, x.dims)
      if bad then return nil, bad end
    end
  end
  return { anchor = a, mode = mode, x = x, y = y, list = list }
end

-- Whether reduction b may join the kernel of the sibling reductions `list` (an engine's
-- E.fuses asks this first): room for one more of `most`, the same input and output shapes,
-- partials that combine alike. Returns their x and y, or nil.
M.MAX_SIBLINGS = 4  -- (four: axisreduce's strided shared arrays at 32 KB)
function M.siblings_alike(list, b, g, most)
  local a = list[1]
  if #list >= (most or M.MAX_SIBLINGS) or a.op ~= "reduction" or b.op ~= "reduction" then return nil end
  local x, y = g.by_uid[a.inputs.input], g.by_uid[a.outputs.Y]
  local bx, by = g.by_uid[b.inputs.input], g.by_uid[b.outputs.Y]
  if shape.format(x.dims) ~= shape.format(bx.dims) or shape.format(y.dims) ~= shape.format(by.dims) then return nil end
  local ma, mb = M.REDUCE[a.attrs.mode], M.REDUCE[b.attrs.mode]
  if not ma or not mb or ma.comb ~= mb.comb or ma.init ~= mb.init then return nil end
  return x, y
end

local function each(fmt_)
  return function(a, b)
    local t = {}
    for i = 1, #a do t[i] = string.format(fmt_, a[i], a[i], b[i]) end
    return table.concat(t, " ")
  end
end
-- combine(a_names, b_names) -> statements folding b into a
M.COMBINE = {
  add = M.combine_add,
  mul = each("%s = %s * %s;"),
  max = each("%s = kiln_fmax_nan(%s, %s);"),
  min = each("%s = kiln_fmin_nan(%s, %s);"),
}

function M.subst(pattern, vars)
  return (pattern:gsub("%%(%a)", function(k) return vars[k] end))
end

-- A candidate plan's analysis: a copy of info with `fields` replaced (info is shared by the
-- engine's candidates, so each gets its own).
function M.plan_info(info, fields)
  local v = {}
  for k, x in pairs(info) do v[k] = x end
  for k, x in pairs(fields) do v[k] = x end
  return v
end

-- A launch-rule factor list with a constant factor multiplied in.
function M.with_const(factors, k)
  local out, const = {}, k
  for _, f in ipairs(factors) do
    if type(f) == "number" then const = const * f else out[#out + 1] = f end
  end
  out[#out + 1] = const
  return out
end

-- Whether tensor t holds one value per row of analyze's info, row-major (a row index is its offset).
function M.per_row(t, info) return pw.dims_equal(t.dims, info.stats_dims) and shape.is_row_major(t.dims, t.strides) end

-- Where tensor t's values for a row start, broadcast over some of info's row axes (a scale
-- per channel or per sample): terms { div, mod, stride } whose sum of
-- ((row / div) % mod) * stride is the offset in elements (no mod: the outermost axis); nil when
-- a modulus is not compile-time. A divisor past a dynamic axis is a C expression of the dims
-- (adaptive layer norm's scale [B, 1, D] over rows [B, T]: row / dim_T), else a number. t's own
-- row-major suffix (`col`) is then read as a column tensor.
function M.row_offset(t, info)
  local E, ns = info.E, info.nsuffix
  local R, pad = #E, #E - #t.dims
  local terms = {}
  for k = R - ns, 1, -1 do
    local d = t.dims[k - pad]
    if d ~= nil and d ~= 1 then
      local outer = true
      for j = 1, k - 1 do if E[j] ~= 1 then outer = false end end
      if not outer and type(E[k]) ~= "number" then return nil end
      local expr, _, const = M.extent(E, k + 1, R - ns)
      terms[#terms + 1] = { div = const or expr, mod = not outer and E[k] or nil, stride = t.strides[k - pad] }
    end
  end
  return terms
end

-- Whether every divisor of row_offset's terms is compile-time.
function M.static_offset(terms)
  for _, tm in ipairs(terms or {}) do
    if type(tm.div) ~= "number" then return false end
  end
  return terms ~= nil
end

-- The C expression (of `row`) where column block t's row starts, when every term of
-- M.row_offset is a whole number of V-element vectors; else nil (t is gathered per element).
function M.row_start(t, info, V)
  local terms = M.col_block(t, info) and M.row_offset(t, info)
  if not terms then return nil end
  local parts = {}
  for _, tm in ipairs(terms) do
    if type(tm.stride) ~= "number" or tm.stride % V ~= 0 then return nil end
    local e = tm.div == 1 and "row"
      or type(tm.div) == "number" and string.format("(row / %dLL)", tm.div) or string.format("(row / (kiln_i64)(%s))", tm.div)
    if tm.mod then e = string.format("(%s %% %dLL)", e, tm.mod) end
    parts[#parts + 1] = string.format("%s * %dLL", e, tm.stride)
  end
  return #parts > 0 and table.concat(parts, " + ") or "0"
end

-- Whether t's trailing axes are the row's, row-major: then its row is read by vectors like a
-- column tensor's, from M.row_offset's start.
function M.col_block(t, info)
  local E, ns = info.E, info.nsuffix
  local pad = #E - #t.dims
  local sub_d, sub_s = {}, {}
  for k = #E - ns + 1, #E do
    local d = t.dims[k - pad]
    if d == nil or not pw.dims_equal({ d }, { E[k] }) then return false end
    sub_d[#sub_d + 1], sub_s[#sub_s + 1] = d, t.strides[k - pad]
  end
  return shape.is_row_major(sub_d, sub_s)
end

-- Why memory source t cannot be read per element of `space` (nil when it can): a dtype without
-- storage, or dims that do not broadcast to the space.
function M.source_declines(t, space)
  if not pw.STORAGE[t.dtype] then return string.format("dtype %s of '%s' is not supported", t.dtype, t.name) end
  local b = shape.broadcast(t.dims, space)
  if not b or not pw.dims_equal(b, space) then
    return string.format("input '%s' %s does not broadcast to %s", t.name, shape.format(t.dims), shape.format(space))
  end
  return nil
end

-- The kernel table of a kernel over [Ko, R, Ki] whose CTAs of `block` threads take TW adjacent
-- of the Ko * Ki columns each (Ko_f, Ki_f: the extents' launch factors).
function M.columns_kernel(K, plan, engine_id, symbol, Ko_f, Ki_f, TW, block, smem)
  local factors = {}
  for _, f in ipairs(Ko_f) do factors[#factors + 1] = f end
  for _, f in ipairs(Ki_f) do factors[#factors + 1] = f end
  return {
    symbol = symbol, engine = engine_id, plan_id = plan.id, source = K.src:text(), options = M.options(),
    block = { block, 1, 1 }, grid = { { mul = factors, div = TW, max = 0 }, 1, 1 },
    smem = smem, cluster = { 1, 1, 1 }, params = K.mparams, align = K.align,
  }
end

-- the word type a load of V elements moves, by its bytes
local WORD = { [2] = "unsigned short", [4] = "unsigned int", [8] = "uint2", [16] = "uint4" }
M.WORD = WORD

-- The V elements from flat index `index` of `space` (lines into K, a block at `indent`): the
-- group's row-major tensors of that shape as one V-wide load, a tensor broadcast along the last
-- axis once a vector and one contiguous along it from one offset a vector (where a vector lies
-- in one row of the last axis), anything else gathered per element, the prologue, then `tail(lines, value, indent)` per element j (value[uid]: the
-- element's values; the group's anchor input among them). `loaded(indent, words)`, if given,
-- runs after the loads: words[uid] names the V loaded elements of a whole tensor (an array).
-- `fixed[uid]`, if given, is a tensor's element j as the caller loaded it before (an expression
-- of j: a per-channel value or a row block fixed for the thread's rows).
function M.elements(K, group, g, space, index, indent, V, tail, loaded, fixed)
  local value, whole, gathered = {}, {}, {}
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if fixed and fixed[uid] then
      value[uid] = fixed[uid]
    elseif t.role == "constant" or t.role == "scalar" then
      value[uid] = K:scalar(uid)
    elseif pw.dims_equal(t.dims, space) and shape.is_row_major(t.dims, t.strides) then
      whole[#whole + 1] = uid
    else
      gathered[#gathered + 1] = uid
    end
  end
  K:add("%s{", indent)
  local inner = indent .. "  "
  for _, uid in ipairs(whole) do
    local st = pw.storage(K.src, g.by_uid[uid].dtype)
    local bytes = V * dtypes.size(g.by_uid[uid].dtype)
    K:need_align(uid, bytes)
    K:add("%salignas(16) %s r%d_[%d];", inner, st.ctype, uid, V)
    K:add("%s*reinterpret_cast<%s *>(r%d_) = *reinterpret_cast<const %s *>(%s + %s);", inner, WORD[bytes], uid,
      WORD[bytes], K:ptr(uid), index)
  end
  if loaded then
    local words = {}
    for _, uid in ipairs(whole) do words[uid] = string.format("r%d_", uid) end
    loaded(inner, words)
  end
  -- (a vector inside one row of the last axis: a tensor broadcast along it is read once a
  -- vector, one contiguous along it from the vector's offset, without an index per element)
  local last = space[#space]
  local in_row = type(last) == "number" and last % V == 0
  local per_vector = {}
  for _, uid in ipairs(gathered) do
    local t = g.by_uid[uid]
    local n = #t.dims
    local how = not in_row and "gather" or (n == 0 or t.dims[n] == 1 and last ~= 1) and "once"
      or t.strides[n] == 1 and "row" or "gather"
    if how == "once" then
      K:add("%sconst float v%d = %s;", inner, uid, pw.fmt(pw.storage(K.src, t.dtype).load,
        string.format("%s[%s]", K:ptr(uid), pw.offset_expr(t, space, index))))
      per_vector[uid], value[uid] = "once", "v" .. uid
    elseif how == "row" then
      K:add("%sconst kiln_i64 o%d_ = %s;", inner, uid, pw.offset_expr(t, space, index))
      per_vector[uid] = "row"
    end
  end
  K:add("#pragma unroll\n%sfor (int j = 0; j < %d; j++) {", inner, V)
  local lines, at = {}, string.format("(%s + j)", index)
  for _, uid in ipairs(whole) do
    lines[#lines + 1] = string.format("%s  const float v%d = %s;", inner, uid, pw.fmt(pw.storage(K.src, g.by_uid[uid].dtype).load,
      string.format("r%d_[j]", uid)))
    value[uid] = "v" .. uid
  end
  for _, uid in ipairs(gathered) do
    local t = g.by_uid[uid]
    if per_vector[uid] ~= "once" then
      local off = per_vector[uid] == "row" and string.format("o%d_ + j", uid) or pw.offset_expr(t, space, at)
      lines[#lines + 1] = string.format("%s  const float v%d = %s;", inner, uid,
        pw.fmt(pw.storage(K.src, t.dtype).load, string.format("%s[%s]", K:ptr(uid), off)))
      value[uid] = "v" .. uid
    end
  end
  pw.emit_nodes(group.prologue or {}, value, lines, { g = g, src = K.src, space = space, index = at, indent = inner .. "  ",
                                                      read_later = pw.read_set(group.nodes) })
  tail(lines, value, inner .. "  ")
  for _, l in ipairs(lines) do K:add("%s", l) end
  K:add("%s}", inner)
  K:add("%s}", indent)
end

-- The tensors a group's nodes compute (a tensor another kernel wrote is a memory source).
function M.made(group)
  local made = {}
  for _, n in ipairs(group.nodes) do for _, uid in pairs(n.outputs) do made[uid] = true end end
  return made
end

-- The memory sources `nodes` and the `extra` uids read, sorted: not computed in the group
-- (`made`, from M.made), not values loaded once per kernel or row (`base`).
function M.sources(nodes, extra, made, base)
  local list, seen = {}, {}
  local function want(uid)
    if uid and not seen[uid] and not made[uid] and not base[uid] then
      seen[uid] = true
      list[#list + 1] = uid
    end
  end
  for _, n in ipairs(nodes) do
    for _, p in ipairs(n.def.input_ports) do want(n.inputs[p.name]) end
  end
  for _, uid in ipairs(extra or {}) do want(uid) end
  table.sort(list)
  return list
end

-- The settings of the row kernels' code (kiln.settings), each list led by its default: code
-- (cuda keeps the CUDA form where a PTX form exists), hint (the PTX forms' cache qualifiers,
-- M.row_hint), ptxas_opt (ptxas's level for every kernel with its body in PTX, M.with_source;
-- auto: the kernel's own), fast_compile (NVRTC's --Ofast-compile level, pwexpr.options),
-- module (which kernels with a PTX body compile as PTX modules, ptxmodule.wanted).
M.SETTINGS = {
  code = { "ptx", "cuda" },
  hint = { "auto", "none", "last", "load", "store", "both", "plain" },
  -- (kiln tune: -O1 and -O3, the levels kernels are measured faster at)
  ptxas_opt = { "auto", "0", "1", "2", "3", tune = { "1", "3" } },
  -- (not measured by kiln tune: it saves compile time for slower kernels)
  fast_compile = { "0", "min", "mid", "max", tune = {} },
  -- (kiln tune: all, which differs from auto only where nvJitLink is the ptxas; own and off
  -- give the same SASS, or own kernels measured level through either)
  module = { "auto", "all", "own", "off", tune = { "all" } },
}

-- The union of settings tables (an engine's E.settings).
function M.settings(...)
  local out = {}
  for _, t in ipairs({ ... }) do
    for k, v in pairs(t) do out[k] = v end
  end
  return out
end

-- Whether the row kernels take their PTX form where one exists (rowbwd_ptx.lua,
-- rowfwd_ptx.lua): the code setting cuda keeps the CUDA form.
function M.ptx_wanted() return settings.get("code") ~= "cuda" end

-- Whether a row too wide for one CTA may be split over a cluster (row.lua): true, or false
-- (the row engine's cluster setting 0: the row re-read from L2), or the least cluster size to
-- take (cluster 2-16).
function M.cluster_setting()
  local v = settings.get("cluster")
  if v == "0" then return false end
  return v == "1" or tonumber(v)
end

-- Whether the group's prologue or epilogue has an op named in the set `ops`.
function M.fuses_any(group, ops)
  for _, list in ipairs({ group.prologue or {}, group.epilogue or {} }) do
    for _, node in ipairs(list) do
      if ops[node.def.name] then return true end
    end
  end
  return false
end

-- Cache qualifiers of the PTX forms' streaming row reads and writes, the hint setting.
-- auto: rows are read with an L2 cache policy that the kernel picks at run time,
-- evict_last when a row input holds at least M.L2_LAST_BYTES, else evict_normal (M.l2_policy).
-- For measuring: "none" reads them plain (.nc), "last" always evict_last, "load" with
-- .L1::no_allocate, "plain" without .nc; "store" writes them with .cs (evict first), "both"
-- is load and store. Returns the load and store state-space strings and whether the load takes
-- a policy operand ("auto" or "last").
function M.row_hint()
  local v = settings.get("hint")
  local ld = ({ load = "global.nc.L1::no_allocate", both = "global.nc.L1::no_allocate", plain = "global",
                auto = "global.nc.L2::cache_hint", last = "global.nc.L2::cache_hint" })[v] or "global.nc"
  local st = (v == "store" or v == "both") and "global.cs" or "global"
  return ld, st, (v == "auto" or v == "last") and v or nil
end

-- Row reads of a large grid keep their lines in L2 ahead of the rows written (evict_last): the
-- written lines then leave L2 first and the DRAM writes stream out with the reads. On an H200
-- (graph timing, rmsnorm, layernorm, softmax and softmax_bwd, bf16): with a row input of 256 MiB and more 1.00-1.04x (16384x8192, 32768x4096, 65536x2048 and twice
-- those); at 128 MiB 0.99-1.01x; at 64 MiB and less 0.97-1.01x.
M.L2_LAST_BYTES = 1 << 28

-- The L2 policy register of a kernel's row reads (mode "auto" or "last" from row_hint), made
-- once in P: evict_last when `rows` (a b64 register) reaches rows_last (or always), else
-- evict_normal.
function M.l2_policy(P, mode, rows, rows_last)
  if P.l2_policy then return end
  local last = P:def("b64", "createpolicy.fractional.L2::evict_last.b64 %s, 1.0;")
  if mode == "last" then P.l2_policy = last return end
  local normal = P:def("b64", "createpolicy.fractional.L2::evict_normal.b64 %s, 1.0;")
  local big = P:def("pred", "setp.ge.s64 %s, %s, %d;", rows, rows_last)
  P.l2_policy = P:def("b64", "selp.b64 %s, %s, %s, %s;", last, normal, big)
end

-- A group's per-row reductions (lower.lua's rowred, rowpw) split its epilogue: the nodes
-- before them (early: what the reductions read) in order, and the set of values made from
-- their results (late: the per-row values and the epilogue values after them).
function M.rowred_split(group)
  local late, early = {}, {}
  for _, n in ipairs(group.rowred or {}) do late[n.outputs.Y] = true end
  for _, n in ipairs(group.rowpw or {}) do for _, uid in pairs(n.outputs) do late[uid] = true end end
  for _, n in ipairs(group.epilogue or {}) do
    local after = false
    for _, p in ipairs(n.def.input_ports) do if late[n.inputs[p.name]] then after = true end end
    if after then for _, uid in pairs(n.outputs) do late[uid] = true end else early[#early + 1] = n end
  end
  return early, late
end

-- The per-row values (rowred results, rowpw outputs, a row reduction's results) that epilogue divisions divide by, in uid
-- order: both forms multiply by their reciprocal, rounded once a row (rcp.rn), instead of an
-- IEEE division an element (within 1.5 fp32 ulp of the quotient; ptxas spends 25-45 ms less
-- on a kernel with 16 divisions a thread: docs/MEMORY_BOUND.md).
function M.row_divisors(group)
  local per_row, seen, list = {}, {}, {}
  for _, n in ipairs(group.rowred or {}) do per_row[n.outputs.Y] = true end
  if group.anchor and group.anchor.op == "reduction" then
    for _, n in ipairs(group.reductions or { group.anchor }) do per_row[n.outputs.Y] = true end
  end
  for _, n in ipairs(group.rowpw or {}) do for _, uid in pairs(n.outputs) do per_row[uid] = true end end
  for _, n in ipairs(group.epilogue or {}) do
    local b = n.inputs.b
    if n.def.name == "div" and per_row[b] and not seen[b] then seen[b] = true; list[#list + 1] = b end
  end
  table.sort(list)
  return list
end

-- A plan's first kernel launched `pdl_entry` (docs/INTERNALS.md): it waits for the stream's
-- previous kernel before it touches memory, and lets the next one launch once all its CTAs run.
function M.pdl_entry(K)
  K.src:need("common/pdl.cuh")
  K:add("  kiln_pdl_entry();  // launched early: what ran before is complete past this point")
end

-- The kernel that adds the per-CTA partial rows ws[G][C] in a fixed order (each column:
-- 8 strided slices, then the slices in order) and writes each output's columns; with
-- `fold` the C columns fold into one value, in column order. opts: C, outs = {{uid, first,
-- count, fin}} (fin: the output's own final map, false for none), rows (C expression of the
-- row count), dims (to find dynamic dims), G = {div, max} (the main kernel's grid rule),
-- comb, init, fin (final map over %a and %n), n.
function M.finalize(g, symbol, plan_id, engine_id, opts)
  local K = M.kernel(g, symbol)
  local src = K.src
  src:need("common/pdl.cuh")
  if opts.comb == "max" or opts.comb == "min" then src:need("common/nanmax.cuh") end
  K:note_dyn(opts.dims)
  local ws = "ws"
  K.params[#K.params + 1] = "const float *__restrict__ ws"
  K.mparams[#K.mparams + 1] = { kind = "workspace", offset = 0 }
  local comb = M.COMBINE[opts.comb]({ "a" }, { "b" })
  local store = {}
  for _, o in ipairs(opts.outs) do
    -- (an output's own final map: sibling reductions of one kernel, a sum beside a mean)
    local map = o.fin or (o.fin == nil and opts.fin)
    local fin = map and M.subst(map, { a = "a", n = opts.n }) or "a"
    local t = g.by_uid[o.uid]
    local st = pw.storage(src, t.dtype)
    local p = K:ptr(o.uid, true)
    if opts.fold then
      store[#store + 1] = string.format("    %s[0] = %s;", p, pw.fmt(st.store, fin))
    elseif o.first == 0 and o.count == opts.C then
      store[#store + 1] = string.format("    %s[col] = %s;", p, pw.fmt(st.store, fin))
    else
      store[#store + 1] = string.format("    if (col >= %d && col < %d) %s[col - %d] = %s;", o.first, o.first + o.count, p,
        o.first, pw.fmt(st.store, fin))
    end
  end
  local tail, after = table.concat(store, "\n"), ""
  if opts.fold then
    tail = "    part_[0][lane] = a;"
    after = string.format("  __syncthreads();\n  if (threadIdx.x == 0) {\n    a = part_[0][0];\n" ..
      "    for (int c = 1; c < %d; c++) { const float b = part_[0][c]; %s }\n%s\n  }", opts.C, comb, table.concat(store, "\n"))
  end
  -- the previous kernel's grid follows the device's SM count: the kernel takes it
  K.params[#K.params + 1] = "const kiln_i64 sms"
  K.mparams[#K.mparams + 1] = { kind = "sms" }
  local params = K:finish_params()
  src:add(M.render_fill("partials.cuh", {
    symbol = symbol, params = params, C = opts.C, rows = opts.rows, div = opts.G.div, cap = sms.expr(opts.G.cap, "sms"),
    per = M.partials_per_slice(opts.G.cap), init = opts.init, comb = comb, tail = tail, after = after,
    what = opts.what or "column sums",
  }))
  local cuda = src:text()
  -- plain column sums: the same body in PTX as well, for a PTX module (opts.target given)
  if opts.target and partials_ptx.accepts(g, opts) then
    K.target = opts.target
    partials_ptx.emit(K, g, opts, M.partials_per_slice(opts.G.cap))
  end
  return M.with_source({
    symbol = symbol, engine = engine_id, plan_id = plan_id, options = M.options(),
    block = { 256, 1, 1 }, grid = { (opts.C + 31) // 32, 1, 1 }, smem = 0, cluster = { 1, 1, 1 },
    params = K.mparams, align = K.align, pdl = true,
  }, K, cuda, nil, true)
end

-- Kernel table k with what it compiles from: `source` the PTX module of K where K's body is
-- one PTX statement (K:asm; kiln.ptxmodule: ptxas without NVRTC's front end) and modules are
-- wanted for it (`own`: a kernel written for one), with `cuda` keeping the CUDA form that
-- `kiln source` shows and `options` naming the ptxas that compiles it; else `source` the CUDA
-- form, and `cuda_why` why it is not a PTX module (`kiln explain`): K.why_cuda, the engine's
-- reason for a body in CUDA, or why the module was not written.
function M.with_source(k, K, cuda, min_blocks, own)
  local compiler = K.asm_of and K.target and ptxmodule.wanted(own)
  local module, why = nil, nil
  if compiler then
    module, why = ptxmodule.render(K, { symbol = k.symbol, block = k.block[1], min_blocks = min_blocks, target = K.target })
  end
  k.source, k.cuda = module or cuda, module and cuda or nil
  if not module then
    k.cuda_why = not K.asm_of and (K.why_cuda or "no PTX form") or not compiler and "PTX modules not wanted here (the module setting)"
      or "the PTX body does not stand alone: " .. why
  end
  if module then k.options = { "--compiler=" .. compiler } end
  -- ptxas's optimization level where it is not its default -O3: the ptxas_opt setting (every
  -- kernel with its body in PTX, for measuring), else the kernel's own (K.ptxas_level); the
  -- module's option, or the CUDA form's through NVRTC (the same SASS either way)
  local level = K.asm_of and (tonumber(settings.get("ptxas_opt")) or K.ptxas_level)
  if level and level ~= 3 then
    local opts = { table.unpack(k.options) }
    opts[#opts + 1] = string.format(module and "-O%d" or "--ptxas-options=-O%d", level)
    k.options = opts
  end
  return k
end

-- Partial rows a finalize slice loads at once: all of them on the largest GPUs kiln targets
-- (one memory latency), the rest one at a time on a larger one.
function M.partials_per_slice(cap) return math.min(64, (sms.at(cap, sms.LARGE) + 7) // 8) end

-- The workspace of per-CTA partial rows of ncols floats: one per CTA of a grid of at most
-- rows and the cap's CTAs (bytes_max: on the largest device, for plans that share it). A
-- fractional cap (per div SMs) rounds down to less than the one CTA a grid has at least:
-- a row more then.
function M.partials_workspace(row_factors, cap, ncols)
  local rule = sms.rule(M.with_const(row_factors, ncols * 4), 1, sms.cap(cap.sm_mul * ncols * 4, cap.sm_div),
                        cap.sm_div > 1 and ncols * 4 or nil)
  return { rule = rule, bytes_max = (sms.at(cap, sms.MAX) + (cap.sm_div > 1 and 1 or 0)) * ncols * 4 }
end

function M.render_fill(name, vars) return render.fill(render.template(name), vars, name) end

return M
