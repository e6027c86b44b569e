-- kiln.engines.axisreduce_ptx: axisreduce's inner form (per-channel statistics: a leading and
-- a trailing block reduced, [N, C, H, W] -> [1, C, 1, 1]) with its body written as PTX, so that
-- it compiles as a PTX module (kiln.ptxmodule) by ptxas alone: the same work and order as the
-- CUDA form (a slice's rows as one run of vectors, thread t the vectors t, t + B, ... with U in
-- flight, each accumulator's elements in order, the warps' butterflies, then the warps in
-- turn), without NVRTC's front end and NVVM and without a division per vector (the thread's
-- row and vector in the run advance by constants). A trip's loads come before its arithmetic:
-- ptxas keeps their order, and beside their arithmetic they had half the rows in flight. Taken where the
-- trailing block is compile-time and a whole number of vectors, every input is the reduced
-- tensor's shape, one value per channel, a scalar or a constant, the prologue's ops have PTX
-- forms (ptxops) and the update is a sum, mean, norm, product, maximum or minimum; anything
-- else keeps the CUDA form, as does the code setting cuda.
local dtypes = require "kiln.dtypes"
local shape = require "kiln.shape"
local ptx = require "kiln.ptx"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local ptxops = require "kiln.engines.ptxops"
local partials_ptx = require "kiln.engines.partials_ptx"
local reduce_ptx = require "kiln.engines.reduce_ptx"

local M = {}

-- Whether tensor t of the inner form's input shape E is one value per channel (broadcast along
-- every reduced axis) at compile-time strides: its offset terms from the channel index k
-- ({ div, mod, stride } each, as rowgen.row_offset's), or nil.
local function channel_terms(t, info)
  local E, k = info.E, info.runs[info.k_run]
  local pad, terms = #E - #t.dims, {}
  for i = 1, #E do
    local d = t.dims[i - pad]
    local varies = d ~= nil and d ~= 1 and E[i] ~= 1
    if varies and (i < k.from or i > k.to) then return nil end
  end
  local div = 1
  for i = k.to, k.from, -1 do
    local d, st = t.dims[i - pad], t.strides[i - pad]
    if d ~= nil and d ~= 1 and E[i] ~= 1 then
      if type(st) ~= "number" then return nil end
      terms[#terms + 1] = { div = div, mod = i > k.from and E[i] or nil, stride = st }
    end
    div = div * E[i]
  end
  return terms
end

-- Whether the inner form of info takes this form: true, or nil and why not.
function M.accepts(group, g, info)
  local ok, why = reduce_ptx.accepts(group, g, info.acc)
  if not ok then return nil, why end
  if type(info.Ri_c) ~= "number" or info.Ri_c % info.V ~= 0 then return nil, "the trailing block not compile-time" end
  if info.V < 2 then return nil, "one element a vector" end
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then
      if not ptxops.IN[t.dtype] then return nil, t.name .. " is " .. t.dtype end
      local whole = pw.dims_equal(t.dims, info.E) and shape.is_row_major(t.dims, t.strides)
      if whole and (info.V * dtypes.size(t.dtype)) % 4 ~= 0 then return nil, "vectors narrower than a word" end
      if not whole and not channel_terms(t, info) then return nil, t.name .. " is gathered" end
    end
  end
  return true
end

-- x / d and x % d for a 32-bit x and a constant d below 2^24 (the quotient by P:quotient).
local function divmod32(P, x, d)
  local q = P:def("b32", "cvt.u32.u64 %s, %s;", P:quotient(P:def("b64", "cvt.u64.u32 %s, %s;", x), d))
  return q, P:def("b32", "sub.u32 %s, %s, %s;", x, P:def("b32", "mul.lo.u32 %s, %s, %d;", q, d))
end

-- A new emitter's shared state: the PTX under construction (P, with put and def) beside the
-- arguments, to which each form adds its constants and registers.
local function state(K, group, g, info, B, U)
  local P = ptx.new()
  return { K = K, group = group, g = g, info = info, B = B, U = U, P = P, E = info.E, V = info.V, NR = #info.acc,
           put = function(...) P:put(...) end, def = function(...) return P:def(...) end }
end

-- The address of channel k's value of a tensor at `ptr` with offset terms `terms`
-- (channel_terms) and elements of z bytes.
local function channel_address(P, ptr, terms, k, z)
  local addr = ptr
  for _, tm in ipairs(terms) do
    local c = tm.div == 1 and k or (divmod32(P, k, tm.div))
    if tm.mod then c = select(2, divmod32(P, c, tm.mod)) end
    addr = P:def("b64", "mad.wide.u32 %s, %s, %d, %s;", c, tm.stride * z, addr)
  end
  return addr
end

-- The inner form's sources: per-kernel values and one value per channel (S.base), the whole
-- tensors' addresses (S.whole).
local function inner_sources(S)
  local P, K = S.P, S.K
  local base, whole = {}, {}
  for _, uid in ipairs(S.group.inputs) do
    local t = S.g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then base[uid] = reduce_ptx.kernel_value(P, K, t)
    else
      local ptr = P:global(P:input("l", K:ptr(uid)))
      local terms = not pw.dims_equal(t.dims, S.E) and channel_terms(t, S.info)
      if terms then
        base[uid] = reduce_ptx.load_value(P, channel_address(P, ptr, terms, S.k, dtypes.size(t.dtype)), t.dtype)
      else
        K:need_align(uid, S.V * dtypes.size(t.dtype))
        whole[#whole + 1] = { uid = uid, ptr = ptr, dtype = t.dtype, z = dtypes.size(t.dtype) }
      end
    end
  end
  S.base, S.whole = base, whole
end

-- The slice's vectors: n = ceil((Ro - s) / G) rows of VR vectors.
local function slice_vectors(S)
  local put, def, G = S.put, S.def, S.G
  local Ro = partials_ptx.product(S.P, S.info.Ro_f)
  local G64 = def("b64", "cvt.u64.u32 %s, %s;", G)
  local left = def("b64", "sub.s64 %s, %s, %s;", def("b64", "add.s64 %s, %s, %s;", Ro, G64), def("b64", "cvt.u64.u32 %s, %s;", S.s))
  -- (a 32-bit division where the rows fit 32 bits, as NVVM's form: ptxas's 64-bit one is a routine)
  left = def("b64", "add.s64 %s, %s, -1;", left)
  local rows = def("b64", "mov.b64 %s, 0;")
  local narrow = def("pred", "setp.lt.u64 %s, %s, 4294967296;", left)
  put("@%s cvt.u64.u32 %s, %s;", narrow, rows, def("b32", "div.u32 %s, %s, %s;", def("b32", "cvt.u32.u64 %s, %s;", left), G))
  put("@!%s div.u64 %s, %s, %s;", narrow, rows, left, G64)
  return def("b64", "mul.lo.s64 %s, %s, %d;", rows, S.VR)
end

-- The element offset of vector (q, c) of the run: row s + q * G, vector c of channel k's block.
local function offset(S, qq, cc)
  local def = S.def
  local row = def("b64", "mad.wide.u32 %s, %s, %s, %s;", qq, S.G, def("b64", "cvt.u64.u32 %s, %s;", S.s))
  local e = def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, S.KC * S.info.Ri_c, S.chan)
  return def("b64", "mad.wide.u32 %s, %s, %d, %s;", cc, S.V, e)
end

-- Vector (q, c) B vectors on.
local function step(S, qq, cc)
  local def, VR = S.def, S.VR
  local c2 = def("b32", "add.u32 %s, %s, %d;", cc, S.dc)
  local wrap = def("pred", "setp.ge.u32 %s, %s, %d;", c2, VR)
  local q2 = def("b32", "add.u32 %s, %s, %d;", qq, S.dq)
  return def("b32", "selp.b32 %s, %s, %s, %s;", def("b32", "add.u32 %s, %s, 1;", q2), q2, wrap),
    def("b32", "selp.b32 %s, %s, %s, %s;", def("b32", "sub.u32 %s, %s, %d;", c2, VR), c2, wrap)
end

-- Each accumulator's U registers, acc[.][u], at its identity.
local function inner_accumulators(S)
  local acc = {}
  for r, a in ipairs(S.info.acc) do
    acc[r] = {}
    for u = 1, S.U do acc[r][u] = S.def("b32", "mov.b32 %s, %s;", ptx.f32(partials_ptx.INIT[a.mode.init])) end
  end
  return acc
end

-- The loads of the vector at element offset e: each whole tensor's reader.
local function load_vector(S, e)
  local P, V = S.P, S.V
  local reads = {}
  for _, w in ipairs(S.whole) do
    local addr = S.def("b64", "mad.lo.s64 %s, %s, %d, %s;", e, w.z, w.ptr)
    reads[w.uid] = P:reader(P:load("global.nc", addr, 0, V * w.z), w.dtype)
  end
  return reads
end

-- A vector's elements into accumulators acc[.][u].
local function fold_vector(S, reads, u)
  reduce_ptx.fold(S.P, S.group, S.g, S.info.acc, S.read_later, S.V, S.base, { reads }, function(r) return S.acc[r][u] end)
end

-- The thread's vectors f, f + B, ... < n of the run folded: U a trip while the run has them,
-- then one at a time.
local function fold_run(S, n)
  local P, put, def, B, U = S.P, S.put, S.def, S.B, S.U
  local f, q, c = S.f, S.q, S.c
  local MAIN, REST, DONE = P:label(), P:label(), P:label()
  P:at(MAIN)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", def("b64", "add.s64 %s, %s, %d;", f, (U - 1) * B), n), REST)
  local qs, cs = { q }, { c }
  for u = 2, U do qs[u], cs[u] = step(S, qs[u - 1], cs[u - 1]) end
  local es = {}
  for u = 1, U do es[u] = offset(S, qs[u], cs[u]) end
  -- (every vector's loads first: all U in flight)
  local vecs = {}
  for u = 1, U do vecs[u] = load_vector(S, es[u]) end
  for u = 1, U do fold_vector(S, vecs[u], u) end
  local qn, cn = step(S, qs[U], cs[U])
  put("mov.b32 %s, %s;", q, qn)
  put("mov.b32 %s, %s;", c, cn)
  put("add.s64 %s, %s, %d;", f, f, U * B)
  put("bra.uni %s;", MAIN)
  P:at(REST)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", f, n), DONE)
  fold_vector(S, load_vector(S, offset(S, q, c)), 1)
  local q1, c1 = step(S, q, c)
  put("mov.b32 %s, %s;", q, q1)
  put("mov.b32 %s, %s;", c, c1)
  put("add.s64 %s, %s, %d;", f, f, B)
  put("bra.uni %s;", REST)
  P:at(DONE)
end

-- The CTA's values in a fixed order: each thread's accumulators, the warp's by butterflies,
-- then the warps' in turn (thread r folds reduction r's), into the CTA's partial row.
local function combine_warps(S)
  local P, put, def, B, tid = S.P, S.put, S.def, S.B, S.tid
  local warps = P:shared(P:input("l", "warps_"))
  local lane0 = def("pred", "setp.eq.u32 %s, %s, 0;", def("b32", "and.b32 %s, %s, 31;", tid))
  local wslot = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "shr.u32 %s, %s, 5;", tid), warps)
  for r, a in ipairs(S.info.acc) do
    local op = partials_ptx.COMB[a.mode.comb]
    local x = S.acc[r][1]
    for u = 2, S.U do x = def("b32", op .. " %s, %s, %s;", x, S.acc[r][u]) end
    x = P:butterfly(x, 32, op)
    put("@%s st.shared.f32 [%s+%d], %s;", lane0, wslot, (r - 1) * (B // 32) * 4, x)
  end
  put("bar.sync 0;")
  local OUT = P:label()
  put("@%s bra %s;", def("pred", "setp.ge.u32 %s, %s, %d;", tid, S.NR), OUT)
  local ws = P:global(P:input("l", "ws"))
  -- (the accumulators combine alike: siblings share one combine)
  local x = P:load_fold("shared", def("b32", "mad.lo.s32 %s, %s, %d, %s;", tid, (B // 32) * 4, warps), 0, B // 32,
    partials_ptx.COMB[S.info.acc[1].mode.comb])
  local slot = def("b64", "mad.wide.u32 %s, %s, %d, %s;", S.s, S.NR * S.KC, def("b64", "mad.wide.u32 %s, %s, %d, %s;", tid, S.KC,
    def("b64", "cvt.u64.u32 %s, %s;", S.k)))
  put("st.global.f32 [%s], %s;", def("b64", "mad.lo.s64 %s, %s, 4, %s;", slot, ws), x)
  P:at(OUT)
end

-- The body into K (axisreduce's inner kernel, its params those of the CUDA form: K:ptr of
-- every input and the workspace `ws` already named), B threads a CTA, U vectors in flight, the
-- shared array warps_[NR][B / 32] declared.
function M.emit(K, group, g, info, B, U)
  local S = state(K, group, g, info, B, U)
  local def = S.def
  S.KC, S.VR = info.K, info.Ri_c // S.V
  S.tid = def("b32", "mov.u32 %s, %%tid.x;")
  S.s = def("b32", "mov.u32 %s, %%ctaid.x;")
  S.k = def("b32", "mov.u32 %s, %%ctaid.y;")
  S.G = def("b32", "mov.u32 %s, %%nctaid.x;")
  inner_sources(S)
  local n = slice_vectors(S)
  -- vector f = q * VR + c of the run: row s + q * G, vector c of its channel k's block
  S.f = def("b64", "cvt.u64.u32 %s, %s;", S.tid)
  S.q, S.c = divmod32(S.P, S.tid, S.VR)
  S.chan = def("b64", "mul.wide.u32 %s, %s, %d;", S.k, info.Ri_c)  -- k * Ri
  S.dq, S.dc = B // S.VR, B % S.VR
  S.acc = inner_accumulators(S)
  S.read_later = pw.read_set(group.nodes)
  fold_run(S, n)
  combine_warps(S)
  K:asm(S.P)
end

-- The strided form ([Ko, R, Ki], a middle block reduced): how tensor t is read. Along each
-- run of axes it is either broadcast or laid out as the input's run (its offset linear in the
-- run's index): { K = stride along Ko, R = along the rows, I = along Ki (0: broadcast) },
-- or nil. Only K may be a product of dims (a dynamic row count: "S*1000"), where its run has one
-- axis of t.
function M.strided_access(t, info)
  local E, pad = info.E, #info.E - #t.dims
  local at = {}
  for n, run in ipairs(info.runs) do
    local name = #info.runs == 2 and ({ "R", "I" })[n] or ({ "K", "R", "I" })[n]
    local stride, want, any = 0, nil, false
    local axes = 0
    for i = run.from, run.to do
      local d = t.dims[i - pad]
      if E[i] ~= 1 and d ~= nil and d ~= 1 then axes = axes + 1 end
    end
    for i = run.to, run.from, -1 do
      if E[i] ~= 1 then
        local d, st = t.dims[i - pad], t.strides[i - pad]
        local bcast = d == nil or d == 1
        local dynamic_ok = name == "K" and axes == 1 and type(st) == "string"
        if not bcast and (not pw.dims_equal({ d }, { E[i] }) or type(st) ~= "number" and not dynamic_ok) then return nil end
        if any and (bcast ~= (stride == 0) or not bcast and st ~= want) then return nil end
        if not any then stride = bcast and 0 or st end
        any = true
        want = not bcast and type(E[i]) == "number" and type(st) == "number" and st * E[i] or -1
      end
    end
    at[name] = stride
  end
  at.K = at.K or 0
  return at
end

-- The address of row 0 of column `col` in the leading block `ko` (b64 registers) of a tensor at
-- global address `ptr`, read as `at` (M.strided_access) with elements of z bytes.
function M.row0_address(P, ptr, at, z, ko, col)
  local a0 = ptr
  if type(at.K) == "string" then
    -- (a product of dims: "S*1000")
    local factors = {}
    for f in at.K:gmatch("[^*]+") do factors[#factors + 1] = tonumber(f) or f end
    factors[#factors + 1] = z
    a0 = P:def("b64", "mad.lo.s64 %s, %s, %s, %s;", ko, partials_ptx.product(P, factors), a0)
  elseif at.K ~= 0 then
    a0 = P:def("b64", "mad.lo.s64 %s, %s, %d, %s;", ko, at.K * z, a0)
  end
  if at.I ~= 0 then a0 = P:def("b64", "mad.lo.s64 %s, %s, %d, %s;", col, at.I * z, a0) end
  return a0
end

-- Whether the strided form of info takes this form: true, or nil and why not.
function M.accepts_strided(group, g, info)
  local ok, why = reduce_ptx.accepts(group, g, info.acc)
  if not ok then return nil, why end
  if info.V < 2 or type(info.Ki_c) ~= "number" or info.Ki_c >= 1 << 24 then return nil, "the kept block not compile-time vectors" end
  for _, red in ipairs(info.list) do
    if not partials_ptx.output_ok(red.y.dtype, red.mode.fin) then return nil, "output " .. red.y.name end
  end
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then
      if not ptxops.IN[t.dtype] then return nil, t.name .. " is " .. t.dtype end
      local at = M.strided_access(t, info)
      if not at then return nil, t.name .. " is gathered" end
      if at.I ~= 0 and (at.I ~= 1 or pw.const_factor(at.K) % info.V ~= 0 or at.R % info.V ~= 0
          or (info.V * dtypes.size(t.dtype)) % 4 ~= 0) then
        return nil, t.name .. " is not read by vectors"
      end
    end
  end
  return true
end

-- The strided form's sources: per-kernel values (S.base) and the tensors' addresses and
-- strides (S.srcs).
local function strided_sources(S)
  local P, K, V = S.P, S.K, S.V
  local base, srcs = {}, {}
  for _, uid in ipairs(S.group.inputs) do
    local t = S.g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then base[uid] = reduce_ptx.kernel_value(P, K, t)
    else
      local at = M.strided_access(t, S.info)
      if at.I ~= 0 then K:need_align(uid, V * dtypes.size(t.dtype)) end
      srcs[#srcs + 1] = { uid = uid, ptr = P:global(P:input("l", K:ptr(uid))), dtype = t.dtype, z = dtypes.size(t.dtype), at = at }
    end
  end
  S.base, S.srcs = base, srcs
end

-- The CTA's item: with slices, the head of the persistent loop over (column block cb, row
-- slice sl) items w, G slices, the slice's rows r_lo <= r < r_hi; else column block ctaid.x,
-- all its rows.
local function item(S)
  local P, put, def, R = S.P, S.put, S.def, S.R
  S.ITEM, S.END = P:label(), P:label()
  if not S.opts.slices then
    S.cb = def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%ctaid.x;"))
    S.r_lo, S.r_hi = "0", R
    return
  end
  S.ws = P:global(P:input("l", "ws"))
  S.G = partials_ptx.slice_count(P, P:input("l", "sms"), S.n_out, R, S.opts)
  local G64 = def("b64", "cvt.u64.u32 %s, %s;", S.G)
  local C = def("b64", "shr.u64 %s, %s, %d;", def("b64", "add.s64 %s, %s, %d;", S.n_out, S.TW - 1), ptx.log2(S.TW))
  local total = def("b64", "mul.lo.s64 %s, %s, %s;", C, G64)
  S.w = def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%ctaid.x;"))
  P:at(S.ITEM)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", S.w, total), S.END)
  S.cb = def("b64", "div.u64 %s, %s, %s;", S.w, G64)
  S.sl = def("b64", "sub.s64 %s, %s, %s;", S.w, def("b64", "mul.lo.s64 %s, %s, %s;", S.cb, G64))
  S.r_lo = def("b64", "div.u64 %s, %s, %s;", def("b64", "mul.lo.s64 %s, %s, %s;", S.sl, R), G64)
  S.r_hi = def("b64", "div.u64 %s, %s, %s;", def("b64", "mad.lo.s64 %s, %s, %s, %s;", S.sl, R, R), G64)
end

-- Each accumulator's U x V registers, acc[.][u][j], at its identity.
local function strided_accumulators(S)
  local acc = {}
  for r, a in ipairs(S.info.acc) do
    acc[r] = {}
    local init = ptx.f32(partials_ptx.INIT[a.mode.init])
    for u = 1, S.U do
      acc[r][u] = {}
      for j = 1, S.V do acc[r][u][j] = S.def("b32", "mov.b32 %s, %s;", init) end
    end
  end
  return acc
end

-- A source's V values at `addr` + off: reader(j), or one value for all j.
local function read(S, src, addr, off)
  if src.at.I ~= 0 then return S.P:reader(S.P:load("global.nc", addr, off or 0, S.V * src.z), src.dtype) end
  local v = reduce_ptx.load_value(S.P, addr, src.dtype, off)
  return function() return v end
end

-- Each source's address at row 0 of column `col` in leading block `ko`; the values common to
-- the rows loaded here (S.row_read).
local function row0_sources(S, ko, col)
  S.row_read = {}
  for _, src in ipairs(S.srcs) do
    src.a0 = M.row0_address(S.P, src.ptr, src.at, src.z, ko, col)
    if src.at.R == 0 then
      local r = read(S, src, src.a0)
      local vals = {}
      for j = 0, S.V - 1 do vals[j] = r(j) end
      S.row_read[src.uid] = function(j) return vals[j] end
    end
  end
end

-- Each source's address at row `row` (b64).
local function at_row(S, row)
  local addr = {}
  for _, src in ipairs(S.srcs) do
    if src.at.R ~= 0 then addr[src.uid] = S.def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, src.at.R * src.z, src.a0) end
  end
  return addr
end

-- The loads of row k of the split on from the rows at `addr`, at an immediate offset where it
-- fits.
local function load_row(S, addr, k)
  local reads = {}
  for _, src in ipairs(S.srcs) do
    if src.at.R ~= 0 then
      local off = k * S.RS * src.at.R * src.z
      if off < 2 ^ 31 then reads[src.uid] = read(S, src, addr[src.uid], off)
      else reads[src.uid] = read(S, src, S.def("b64", "add.s64 %s, %s, %d;", addr[src.uid], off)) end
    end
  end
  return reads
end

-- A row's loaded values into accumulators acc[.][u].
local function fold_row(S, reads, u)
  reduce_ptx.fold(S.P, S.group, S.g, S.info.acc, S.read_later, S.V, S.base, { S.row_read, reads },
    function(r, j) return S.acc[r][u][j + 1] end)
end

-- The thread's rows of the item, r_lo + srow, + RS, ... < r_hi, folded: U a trip while the
-- item has them, then one at a time; then on to COMBINE.
local function fold_rows(S)
  local P, put, def, U, RS = S.P, S.put, S.def, S.U, S.RS
  local r = def("b64", "add.s64 %s, %s, %s;", def("b64", "cvt.u64.u32 %s, %s;", S.srow), S.r_lo)
  local MAIN, REST = P:label(), P:label()
  P:at(MAIN)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", def("b64", "add.s64 %s, %s, %d;", r, (U - 1) * RS), S.r_hi), REST)
  -- (every row's loads first: ptxas keeps their order, and all U rows are then in flight)
  local trip, rows = at_row(S, r), {}
  for u = 1, U do rows[u] = load_row(S, trip, u - 1) end
  for u = 1, U do fold_row(S, rows[u], u) end
  put("add.s64 %s, %s, %d;", r, r, U * RS)
  put("bra.uni %s;", MAIN)
  P:at(REST)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", r, S.r_hi), S.COMBINE)
  fold_row(S, load_row(S, at_row(S, r), 0), 1)
  put("add.s64 %s, %s, %d;", r, r, RS)
  put("bra.uni %s;", REST)
end

-- Each thread's accumulators combined, into its split's place in red_ (returned: its shared
-- address).
local function to_splits(S)
  local P, def, V, TW = S.P, S.def, S.V, S.TW
  local red = P:shared(P:input("l", "red_"))
  local mine = def("b32", "mad.lo.s32 %s, %s, %d, %s;", S.srow, TW * 4, def("b32", "mad.lo.s32 %s, %s, %d, %s;", S.lane, V * 4, red))
  for ai, a in ipairs(S.info.acc) do
    local op = partials_ptx.COMB[a.mode.comb]
    local words = {}
    for j = 1, V do
      local x = S.acc[ai][1][j]
      for u = 2, S.U do x = def("b32", op .. " %s, %s, %s;", x, S.acc[ai][u][j]) end
      words[j] = x
    end
    P:store("shared", mine, (ai - 1) * S.RS * TW * 4, words)
  end
  S.put("bar.sync 0;")
  return red
end

-- 1 / R, for the means (nil where no reduction takes one).
local function mean_recip(S)
  local recip
  for _, rd in ipairs(S.info.list) do
    if rd.mode.fin and not recip then
      recip = S.def("b32", "rcp.rn.f32 %s, %s;", S.def("b32", "cvt.rn.f32.s64 %s, %s;", S.R))
    end
  end
  return recip
end

-- Accumulator ai's value of the column at shared address `at` over the row splits in turn.
local function over_splits(S, at, ai)
  local op = partials_ptx.COMB[S.info.acc[ai].mode.comb]
  local RS, TW = S.RS, S.TW
  local x = S.def("b32", "ld.shared.f32 %s, [%s+%d];", at, (ai - 1) * RS * TW * 4)
  for k = 1, RS - 1 do
    S.put("%s %s, %s, %s;", op, x, x, S.def("b32", "ld.shared.f32 %s, [%s+%d];", at, ((ai - 1) * RS + k) * TW * 4))
  end
  return x
end

-- Accumulator ai's value x of output q stored: each of its reductions' outputs where one
-- slice took the rows, else the slice's partial to the workspace.
local function store_value(S, ai, q, x, recip)
  local P, put, def, slices = S.P, S.put, S.def, S.opts.slices
  local PARTIAL, NEXT = P:label(), P:label()
  if slices then put("@%s bra %s;", def("pred", "setp.ne.u32 %s, %s, 1;", S.G), PARTIAL) end
  for ri, rd in ipairs(S.info.list) do
    if S.info.acc_of[ri] == ai then partials_ptx.store(P, S.outs[ri], q, partials_ptx.final(P, x, rd.mode.fin, recip), rd.y.dtype) end
  end
  if slices then
    put("bra.uni %s;", NEXT)
    P:at(PARTIAL)
    local slot = def("b64", "mad.lo.s64 %s, %s, %s, %s;", def("b64", "mad.lo.s64 %s, %s, %d, %d;", S.sl, S.NR, ai - 1), S.n_out, q)
    put("st.global.f32 [%s], %s;", def("b64", "mad.lo.s64 %s, %s, 4, %s;", slot, S.ws), x)
    P:at(NEXT)
  end
end

-- The item's columns, thread t columns t, t + B, ... of the CTA's TW: each accumulator's
-- splits combined and stored.
local function store_columns(S, red)
  local P, put, def, B, TW = S.P, S.put, S.def, S.B, S.TW
  local recip = mean_recip(S)
  local STORED = P:label()
  for it = 0, (TW - 1) // B do
    local i = def("b32", "add.u32 %s, %s, %d;", S.tid, it * B)
    if TW % B ~= 0 then put("@%s bra %s;", def("pred", "setp.ge.u32 %s, %s, %d;", i, TW), STORED) end
    local q = def("b64", "mad.lo.s64 %s, %s, %d, %s;", S.cb, TW, def("b64", "cvt.u64.u32 %s, %s;", i))
    put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", q, S.n_out), STORED)
    local at = def("b32", "mad.lo.s32 %s, %s, 4, %s;", i, red)
    for ai in ipairs(S.info.acc) do store_value(S, ai, q, over_splits(S, at, ai), recip) end
  end
  P:at(STORED)
end

-- With slices, the persistent loop's next item (red_ free again first).
local function next_item(S)
  if not S.opts.slices then return end
  local put, def = S.put, S.def
  put("bar.sync 0;")  -- (red_ is the next item's)
  put("add.s64 %s, %s, %s;", S.w, S.w, def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%nctaid.x;")))
  put("bra.uni %s;", S.ITEM)
  S.P:at(S.END)
end

-- The strided form's body into K (its params those of the CUDA form): B threads a CTA, RS row
-- splits, U rows in flight, the shared array red_[NR][RS][TW] declared; opts.slices: the
-- persistent grid over (column block, row slice) items (opts the slice count's, as
-- partials_ptx.slice_count), the partials to the workspace `ws`.
function M.emit_strided(K, group, g, info, B, U, opts)
  local S = state(K, group, g, info, B, U)
  local P, put, def, V = S.P, S.put, S.def, S.V
  S.opts, S.RS = opts, info.RS
  S.LO = B // S.RS
  S.TW, S.Ki = S.LO * V, info.Ki_c
  S.tid = def("b32", "mov.u32 %s, %%tid.x;")
  S.srow = def("b32", "shr.u32 %s, %s, %d;", S.tid, ptx.log2(S.LO))
  S.lane = def("b32", "and.b32 %s, %s, %d;", S.tid, S.LO - 1)
  S.n_out = def("b64", "mul.lo.s64 %s, %s, %d;", partials_ptx.product(P, info.Ko_f), S.Ki)
  S.R = partials_ptx.product(P, info.R_f)
  strided_sources(S)
  S.outs = {}
  for r, red in ipairs(info.list) do S.outs[r] = P:global(P:input("l", K:ptr(red.y.uid, true))) end
  item(S)
  -- thread t: the V outputs from o, the rows r_lo + t / LO, + RS, ...
  local o = def("b64", "mad.lo.s64 %s, %s, %d, %s;", S.cb, S.TW, def("b64", "mul.wide.u32 %s, %s, %d;", S.lane, V))
  S.acc = strided_accumulators(S)
  S.COMBINE = P:label()
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", o, S.n_out), S.COMBINE)
  local ko = P:quotient(o, S.Ki)
  local col = def("b64", "sub.s64 %s, %s, %s;", o, def("b64", "mul.lo.s64 %s, %s, %d;", ko, S.Ki))
  row0_sources(S, ko, col)
  S.read_later = pw.read_set(group.nodes)
  fold_rows(S)
  P:at(S.COMBINE)
  -- in a fixed order: each thread's accumulators, then the row splits in turn
  store_columns(S, to_splits(S))
  next_item(S)
  K:asm(P)
end

return M
