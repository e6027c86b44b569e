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

-- The body into K (axisreduce's inner kernel, its params those of the CUDA form: K:ptr of
-- every input and the workspace `ws` already named), B threads a CTA, U vectors in flight, the
-- shared array warps_[NR][B / 32] declared.
function M.emit(K, group, g, info, B, U)
  local P = ptx.new()
  local put, def = function(...) P:put(...) end, function(...) return P:def(...) end
  local E, V, NR, KC = info.E, info.V, #info.acc, info.K
  local VR = info.Ri_c // V
  local tid = def("b32", "mov.u32 %s, %%tid.x;")
  local s = def("b32", "mov.u32 %s, %%ctaid.x;")
  local k = def("b32", "mov.u32 %s, %%ctaid.y;")
  local G = def("b32", "mov.u32 %s, %%nctaid.x;")
  -- the sources: per-kernel values, one value per channel, the whole tensors' addresses
  local base, whole = {}, {}
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then base[uid] = reduce_ptx.kernel_value(P, K, t)
    else
      local ptr = P:global(P:input("l", K:ptr(uid)))
      local terms = not pw.dims_equal(t.dims, E) and channel_terms(t, info)
      if terms then
        local z, addr = dtypes.size(t.dtype), ptr
        for _, tm in ipairs(terms) do
          local c = tm.div == 1 and k or (divmod32(P, k, tm.div))
          if tm.mod then c = select(2, divmod32(P, c, tm.mod)) end
          addr = def("b64", "mad.wide.u32 %s, %s, %d, %s;", c, tm.stride * z, addr)
        end
        base[uid] = reduce_ptx.load_value(P, addr, t.dtype)
      else
        K:need_align(uid, V * dtypes.size(t.dtype))
        whole[#whole + 1] = { uid = uid, ptr = ptr, dtype = t.dtype, z = dtypes.size(t.dtype) }
      end
    end
  end
  -- the slice's vectors: n = ceil((Ro - s) / G) rows of VR vectors
  local Ro = partials_ptx.product(P, info.Ro_f)
  local G64 = def("b64", "cvt.u64.u32 %s, %s;", G)
  local left = def("b64", "sub.s64 %s, %s, %s;", def("b64", "add.s64 %s, %s, %s;", Ro, G64), def("b64", "cvt.u64.u32 %s, %s;", s))
  -- (a 32-bit division where the rows fit 32 bits, as NVVM's form: ptxas's 64-bit one is a routine)
  left = def("b64", "add.s64 %s, %s, -1;", left)
  local rows = def("b64", "mov.b64 %s, 0;")
  local narrow = def("pred", "setp.lt.u64 %s, %s, 4294967296;", left)
  put("@%s cvt.u64.u32 %s, %s;", narrow, rows, def("b32", "div.u32 %s, %s, %s;", def("b32", "cvt.u32.u64 %s, %s;", left), G))
  put("@!%s div.u64 %s, %s, %s;", narrow, rows, left, G64)
  local n = def("b64", "mul.lo.s64 %s, %s, %d;", rows, VR)
  -- vector f = q * VR + c of the run: row s + q * G, vector c of its channel k's block
  local f = def("b64", "cvt.u64.u32 %s, %s;", tid)
  local q, c = divmod32(P, tid, VR)
  local chan = def("b64", "mul.wide.u32 %s, %s, %d;", k, info.Ri_c)  -- k * Ri
  local dq, dc = B // VR, B % VR
  -- the element offset of vector (q, c), and (q, c) B vectors on
  local function offset(qq, cc)
    local row = def("b64", "mad.wide.u32 %s, %s, %s, %s;", qq, G, def("b64", "cvt.u64.u32 %s, %s;", s))
    local e = def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, KC * info.Ri_c, chan)
    return def("b64", "mad.wide.u32 %s, %s, %d, %s;", cc, V, e)
  end
  local function step(qq, cc)
    local c2 = def("b32", "add.u32 %s, %s, %d;", cc, dc)
    local wrap = def("pred", "setp.ge.u32 %s, %s, %d;", c2, VR)
    local q2 = def("b32", "add.u32 %s, %s, %d;", qq, dq)
    return def("b32", "selp.b32 %s, %s, %s, %s;", def("b32", "add.u32 %s, %s, 1;", q2), q2, wrap),
      def("b32", "selp.b32 %s, %s, %s, %s;", def("b32", "sub.u32 %s, %s, %d;", c2, VR), c2, wrap)
  end
  local acc = {}
  for r, a in ipairs(info.acc) do
    acc[r] = {}
    for u = 1, U do acc[r][u] = def("b32", "mov.b32 %s, %s;", ptx.f32(partials_ptx.INIT[a.mode.init])) end
  end
  local read_later = pw.read_set(group.nodes)
  -- the loads of the vector at element offset e, then its elements into accumulators acc[.][u]
  local function load_vector(e)
    local reads = {}
    for _, w in ipairs(whole) do
      local addr = def("b64", "mad.lo.s64 %s, %s, %d, %s;", e, w.z, w.ptr)
      reads[w.uid] = P:reader(P:load("global.nc", addr, 0, V * w.z), w.dtype)
    end
    return reads
  end
  local function fold_vector(reads, u)
    reduce_ptx.fold(P, group, g, info.acc, read_later, V, base, { reads }, function(r) return acc[r][u] end)
  end
  -- U vectors a trip while the run has them, then one at a time
  local MAIN, REST, DONE = P:label(), P:label(), P:label()
  P:at(MAIN)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", def("b64", "add.s64 %s, %s, %d;", f, (U - 1) * B), n), REST)
  local qs, cs = { q }, { c }
  for u = 2, U do qs[u], cs[u] = step(qs[u - 1], cs[u - 1]) end
  local es = {}
  for u = 1, U do es[u] = offset(qs[u], cs[u]) end
  -- (every vector's loads first: all U in flight)
  local vecs = {}
  for u = 1, U do vecs[u] = load_vector(es[u]) end
  for u = 1, U do fold_vector(vecs[u], u) end
  local qn, cn = step(qs[U], cs[U])
  put("mov.b32 %s, %s;", q, qn)
  put("mov.b32 %s, %s;", c, cn)
  put("add.s64 %s, %s, %d;", f, f, U * B)
  put("bra.uni %s;", MAIN)
  P:at(REST)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", f, n), DONE)
  fold_vector(load_vector(offset(q, c)), 1)
  local q1, c1 = step(q, c)
  put("mov.b32 %s, %s;", q, q1)
  put("mov.b32 %s, %s;", c, c1)
  put("add.s64 %s, %s, %d;", f, f, B)
  put("bra.uni %s;", REST)
  P:at(DONE)
  -- the CTA's values in a fixed order: each thread's accumulators, the warp's by butterflies,
  -- then the warps' in turn (thread r folds reduction r's), into the CTA's partial row
  local warps = P:shared(P:input("l", "warps_"))
  local lane0 = def("pred", "setp.eq.u32 %s, %s, 0;", def("b32", "and.b32 %s, %s, 31;", tid))
  local wslot = def("b32", "mad.lo.s32 %s, %s, 4, %s;", def("b32", "shr.u32 %s, %s, 5;", tid), warps)
  for r, a in ipairs(info.acc) do
    local op = partials_ptx.COMB[a.mode.comb]
    local x = acc[r][1]
    for u = 2, U do x = def("b32", op .. " %s, %s, %s;", x, acc[r][u]) end
    x = P:butterfly(x, 32, op)
    put("@%s st.shared.f32 [%s+%d], %s;", lane0, wslot, (r - 1) * (B // 32) * 4, x)
  end
  put("bar.sync 0;")
  local OUT = P:label()
  put("@%s bra %s;", def("pred", "setp.ge.u32 %s, %s, %d;", tid, NR), OUT)
  local ws = P:global(P:input("l", "ws"))
  -- (the accumulators combine alike: siblings share one combine)
  local x = P:load_fold("shared", def("b32", "mad.lo.s32 %s, %s, %d, %s;", tid, (B // 32) * 4, warps), 0, B // 32,
    partials_ptx.COMB[info.acc[1].mode.comb])
  local slot = def("b64", "mad.wide.u32 %s, %s, %d, %s;", s, NR * KC, def("b64", "mad.wide.u32 %s, %s, %d, %s;", tid, KC,
    def("b64", "cvt.u64.u32 %s, %s;", k)))
  put("st.global.f32 [%s], %s;", def("b64", "mad.lo.s64 %s, %s, 4, %s;", slot, ws), x)
  P:at(OUT)
  K:asm(P)
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

-- The strided form's body into K (its params those of the CUDA form): B threads a CTA, RS row
-- splits, U rows in flight, the shared array red_[NR][RS][TW] declared; opts.slices: the
-- persistent grid over (column block, row slice) items (opts the slice count's, as
-- partials_ptx.slice_count), the partials to the workspace `ws`.
function M.emit_strided(K, group, g, info, B, U, opts)
  local P = ptx.new()
  local put, def = function(...) P:put(...) end, function(...) return P:def(...) end
  local E, V, NR, RS = info.E, info.V, #info.acc, info.RS
  local LO = B // RS
  local TW, Ki = LO * V, info.Ki_c
  local tid = def("b32", "mov.u32 %s, %%tid.x;")
  local srow = def("b32", "shr.u32 %s, %s, %d;", tid, ptx.log2(LO))
  local lane = def("b32", "and.b32 %s, %s, %d;", tid, LO - 1)
  local n_out = def("b64", "mul.lo.s64 %s, %s, %d;", partials_ptx.product(P, info.Ko_f), Ki)
  local R = partials_ptx.product(P, info.R_f)
  -- the sources: per-kernel values and the tensors' addresses and strides
  local base, srcs = {}, {}
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then base[uid] = reduce_ptx.kernel_value(P, K, t)
    else
      local at = M.strided_access(t, info)
      if at.I ~= 0 then K:need_align(uid, V * dtypes.size(t.dtype)) end
      srcs[#srcs + 1] = { uid = uid, ptr = P:global(P:input("l", K:ptr(uid))), dtype = t.dtype, z = dtypes.size(t.dtype), at = at }
    end
  end
  local outs = {}
  for r, red in ipairs(info.list) do outs[r] = P:global(P:input("l", K:ptr(red.y.uid, true))) end
  local ws, G, w, total
  local ITEM, END = P:label(), P:label()
  local cb, sl, r_lo, r_hi
  if opts.slices then
    ws = P:global(P:input("l", "ws"))
    G = partials_ptx.slice_count(P, P:input("l", "sms"), n_out, R, opts)
    local G64 = def("b64", "cvt.u64.u32 %s, %s;", G)
    local C = def("b64", "shr.u64 %s, %s, %d;", def("b64", "add.s64 %s, %s, %d;", n_out, TW - 1), ptx.log2(TW))
    total = def("b64", "mul.lo.s64 %s, %s, %s;", C, G64)
    w = def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%ctaid.x;"))
    P:at(ITEM)
    put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", w, total), END)
    cb = def("b64", "div.u64 %s, %s, %s;", w, G64)
    sl = def("b64", "sub.s64 %s, %s, %s;", w, def("b64", "mul.lo.s64 %s, %s, %s;", cb, G64))
    r_lo = def("b64", "div.u64 %s, %s, %s;", def("b64", "mul.lo.s64 %s, %s, %s;", sl, R), G64)
    r_hi = def("b64", "div.u64 %s, %s, %s;", def("b64", "mad.lo.s64 %s, %s, %s, %s;", sl, R, R), G64)
  else
    cb = def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%ctaid.x;"))
    r_lo, r_hi = "0", R
  end
  -- thread t: the V outputs from o, the rows r_lo + t / LO, + RS, ...
  local o = def("b64", "mad.lo.s64 %s, %s, %d, %s;", cb, TW, def("b64", "mul.wide.u32 %s, %s, %d;", lane, V))
  local acc = {}
  for r, a in ipairs(info.acc) do
    acc[r] = {}
    local init = ptx.f32(partials_ptx.INIT[a.mode.init])
    for u = 1, U do
      acc[r][u] = {}
      for j = 1, V do acc[r][u][j] = def("b32", "mov.b32 %s, %s;", init) end
    end
  end
  local COMBINE = P:label()
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", o, n_out), COMBINE)
  local ko = P:quotient(o, Ki)
  local col = def("b64", "sub.s64 %s, %s, %s;", o, def("b64", "mul.lo.s64 %s, %s, %d;", ko, Ki))
  -- each source's address at row 0 and its bytes a row; the rows' common ones loaded here
  local row_read = {}
  local function read(src, addr, off)
    if src.at.I ~= 0 then return P:reader(P:load("global.nc", addr, off or 0, V * src.z), src.dtype) end
    local v = reduce_ptx.load_value(P, addr, src.dtype, off)
    return function() return v end
  end
  for _, src in ipairs(srcs) do
    src.a0 = M.row0_address(P, src.ptr, src.at, src.z, ko, col)
    if src.at.R == 0 then
      local r = read(src, src.a0)
      local vals = {}
      for j = 0, V - 1 do vals[j] = r(j) end
      row_read[src.uid] = function(j) return vals[j] end
    end
  end
  local read_later = pw.read_set(group.nodes)
  -- each source's address at row `row` (b64): its row is k rows of the split on, at an
  -- immediate offset where it fits
  local function at_row(row)
    local addr = {}
    for _, src in ipairs(srcs) do
      if src.at.R ~= 0 then addr[src.uid] = def("b64", "mad.lo.s64 %s, %s, %d, %s;", row, src.at.R * src.z, src.a0) end
    end
    return addr
  end
  -- row k of the split from the rows at `addr` into accumulators acc[.][u]
  local function load_row(addr, k)
    local reads = {}
    for _, src in ipairs(srcs) do
      if src.at.R ~= 0 then
        local off = k * RS * src.at.R * src.z
        if off < 2 ^ 31 then reads[src.uid] = read(src, addr[src.uid], off)
        else reads[src.uid] = read(src, def("b64", "add.s64 %s, %s, %d;", addr[src.uid], off)) end
      end
    end
    return reads
  end
  -- a row's loaded values into accumulators acc[.][u]
  local function fold_row(reads, u)
    reduce_ptx.fold(P, group, g, info.acc, read_later, V, base, { row_read, reads }, function(r, j) return acc[r][u][j + 1] end)
  end

  local r = def("b64", "add.s64 %s, %s, %s;", def("b64", "cvt.u64.u32 %s, %s;", srow), r_lo)
  local MAIN, REST = P:label(), P:label()
  P:at(MAIN)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", def("b64", "add.s64 %s, %s, %d;", r, (U - 1) * RS), r_hi), REST)
  -- (every row's loads first: ptxas keeps their order, and all U rows are then in flight)
  local trip, rows = at_row(r), {}
  for u = 1, U do rows[u] = load_row(trip, u - 1) end
  for u = 1, U do fold_row(rows[u], u) end
  put("add.s64 %s, %s, %d;", r, r, U * RS)
  put("bra.uni %s;", MAIN)
  P:at(REST)
  put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", r, r_hi), COMBINE)
  fold_row(load_row(at_row(r), 0), 1)
  put("add.s64 %s, %s, %d;", r, r, RS)
  put("bra.uni %s;", REST)
  P:at(COMBINE)
  -- in a fixed order: each thread's accumulators, then the row splits in turn
  local red = P:shared(P:input("l", "red_"))
  local mine = def("b32", "mad.lo.s32 %s, %s, %d, %s;", srow, TW * 4, def("b32", "mad.lo.s32 %s, %s, %d, %s;", lane, V * 4, red))
  for ai, a in ipairs(info.acc) do
    local op = partials_ptx.COMB[a.mode.comb]
    local words = {}
    for j = 1, V do
      local x = acc[ai][1][j]
      for u = 2, U do x = def("b32", op .. " %s, %s, %s;", x, acc[ai][u][j]) end
      words[j] = x
    end
    P:store("shared", mine, (ai - 1) * RS * TW * 4, words)
  end
  put("bar.sync 0;")
  local recip
  for _, rd in ipairs(info.list) do
    if rd.mode.fin and not recip then
      recip = def("b32", "rcp.rn.f32 %s, %s;", def("b32", "cvt.rn.f32.s64 %s, %s;", R))
    end
  end
  local STORED = P:label()
  for it = 0, (TW - 1) // B do
    local i = def("b32", "add.u32 %s, %s, %d;", tid, it * B)
    if TW % B ~= 0 then put("@%s bra %s;", def("pred", "setp.ge.u32 %s, %s, %d;", i, TW), STORED) end
    local q = def("b64", "mad.lo.s64 %s, %s, %d, %s;", cb, TW, def("b64", "cvt.u64.u32 %s, %s;", i))
    put("@%s bra %s;", def("pred", "setp.ge.s64 %s, %s, %s;", q, n_out), STORED)
    local at = def("b32", "mad.lo.s32 %s, %s, 4, %s;", i, red)
    for ai, a in ipairs(info.acc) do
      local op = partials_ptx.COMB[a.mode.comb]
      local x = def("b32", "ld.shared.f32 %s, [%s+%d];", at, (ai - 1) * RS * TW * 4)
      for k = 1, RS - 1 do
        put("%s %s, %s, %s;", op, x, x, def("b32", "ld.shared.f32 %s, [%s+%d];", at, ((ai - 1) * RS + k) * TW * 4))
      end
      local PARTIAL, NEXT = P:label(), P:label()
      if opts.slices then put("@%s bra %s;", def("pred", "setp.ne.u32 %s, %s, 1;", G), PARTIAL) end
      for ri, rd in ipairs(info.list) do
        if info.acc_of[ri] == ai then partials_ptx.store(P, outs[ri], q, partials_ptx.final(P, x, rd.mode.fin, recip), rd.y.dtype) end
      end
      if opts.slices then
        put("bra.uni %s;", NEXT)
        P:at(PARTIAL)
        local slot = def("b64", "mad.lo.s64 %s, %s, %s, %s;", def("b64", "mad.lo.s64 %s, %s, %d, %d;", sl, NR, ai - 1), n_out, q)
        put("st.global.f32 [%s], %s;", def("b64", "mad.lo.s64 %s, %s, 4, %s;", slot, ws), x)
        P:at(NEXT)
      end
    end
  end
  P:at(STORED)
  if opts.slices then
    put("bar.sync 0;")  -- (red_ is the next item's)
    put("add.s64 %s, %s, %s;", w, w, def("b64", "cvt.u64.u32 %s, %s;", def("b32", "mov.u32 %s, %%nctaid.x;")))
    put("bra.uni %s;", ITEM)
    P:at(END)
  end
  K:asm(P)
end

return M
