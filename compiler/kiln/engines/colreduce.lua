-- kiln.engines.colreduce: reductions over the leading axes ([T, H] -> [1, H]) and over every
-- axis ([T, H] -> [1, 1]), deterministically, with a fused pointwise prologue.
--
-- Kernel 1 is persistent: CTA g takes row blocks g, g + G, ... (G from T alone), each thread
-- folds its columns of its rows into registers, the CTA's row slots combine in slot order
-- through shared memory, and the CTA writes one partial row to the workspace. Kernel 2 adds
-- the G partial rows per column in a fixed order (rowgen.finalize). A full reduction views
-- the input as [numel / W, W] (W up to 4 vectors) and folds the W columns at the end.
local shape = require "kiln.shape"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local sms = require "kiln.engines.sms"
local colreduce_ptx = require "kiln.engines.colreduce_ptx"

local E = { id = "colreduce", version = 1 }
-- The row code's settings its PTX forms read (kiln.settings, rowgen.SETTINGS, rowptx.SETTINGS).
E.settings = rowgen.settings(rowgen.SETTINGS, rowptx.SETTINGS)

E.BLOCK = 512
E.CTAS_PER_SM = 2
-- rows each CTA takes at least: 4 a slot up to 16 (a partial row then costs the finalize at
-- most an eighth of the 16-bit rows it read), and E.SLOT_ROWS a slot
E.MIN_ROWS = 16
E.SMEM_MAX = 160 * 1024
-- column tiles (partial rows wider than SMEM_MAX): threads per CTA, CTAs that fill an SM,
-- rows each CTA takes at least
E.TILE_THREADS = 256
E.TILE_PER_SM = 8
E.TILE_MIN_ROWS = 16

-- Rows each slot takes at least (a knob of the plan: 1, 2, 4 or 8). Narrow columns (64: 256
-- slots a CTA) measured 1.08-1.20x at 2 against 4 over 4096-65536 rows (more CTAs), level
-- past that; at 1, 0.95x at 65536 rows (more partial rows).
E.SLOT_ROWS = 2
E.SLOT_ROWS_CHOICES = { 2, 1, 4, 8 }  -- the default first: a forced CTA cap keeps it
-- CTAs per SM at most (a knob of the plan: 1 or 2): one a SM measured 1.1-1.3x for 64 columns
-- but 0.85x for 4096 past 16384 rows.
E.CTAS_CHOICES = { 2, 1 }  -- the default first

local COMBINE, subst = rowgen.COMBINE, rowgen.subst

local function fail(fmt_, ...) return nil, string.format(fmt_, ...) end

-- The reduced and kept axes of x -> y: the last reduced axis, the first kept one (nil: none).
local function blocks(x, y)
  local last_reduced, first_kept
  for i = 1, #x.dims do
    if y.dims[i] == 1 and x.dims[i] ~= 1 then last_reduced = i
    elseif x.dims[i] ~= 1 then first_kept = first_kept or i end
  end
  return last_reduced, first_kept
end

-- Whether reduction b joins the kernel of the reductions `list` (lower's sibling merge): the
-- same input and output shapes over leading axes (not everything), compile-time kept columns
-- whose partial rows all fit in shared memory, partials that combine alike, at most four.
function E.fuses(list, b, g)
  local x, y = rowgen.siblings_alike(list, b, g)
  if not x then return false end
  local last_reduced, first_kept = blocks(x, y)
  if not last_reduced or not first_kept or first_kept < last_reduced then return false end
  local C = rowgen.suffix(x.dims, #x.dims - first_kept + 1)
  return C ~= nil and C * 4 * (#list + 1) <= E.SMEM_MAX
end

local function analyze(group, g)
  local r, rwhy = rowgen.reduction_group(group, g, "column reduction")
  if not r then return nil, rwhy end
  local a, mode, x, y = r.anchor, r.mode, r.x, r.y
  -- reduced axes: a leading block; kept axes: the rest
  local n = #x.dims
  local last_reduced, first_kept = blocks(x, y)
  if not last_reduced then return fail("reduces no axis") end
  if first_kept and first_kept < last_reduced then return fail("the reduced axes are not the leading ones") end
  local NR = #r.list
  local info = { anchor = a, mode = mode, E = x.dims, full = first_kept == nil, list = r.list }
  local nsuffix = first_kept and (n - first_kept + 1) or 1
  local C = rowgen.suffix(x.dims, nsuffix)
  if not C then return fail("the kept axes of %s are not compile-time (specialize them)", shape.format(x.dims)) end
  if NR > 1 and (info.full or C * 4 * NR > E.SMEM_MAX) then
    return fail("%d reductions in one kernel need their partial rows in shared memory", NR)
  end
  if not shape.is_row_major(y.dims, y.strides) then return fail("Y is not row-major") end
  info.access = {}
  local vec_tensors = { x }
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then
      local how = rowgen.classify(t, x.dims, nsuffix)
      info.access[uid] = how
      if how == "full" or how == "col" then vec_tensors[#vec_tensors + 1] = t end
    end
  end
  local V = rowgen.vector_width(C, vec_tensors)
  info.nsuffix = nsuffix
  info.rows, info.row_factors = rowgen.rows(x.dims, nsuffix)
  if info.full then
    -- the input as [numel / W, W], W = up to 4 vectors (loads in flight); anything but x
    -- itself is gathered; the W columns fold at the end
    local W = V
    while W < 4 * V and C % (2 * W) == 0 do W = 2 * W end
    info.rows = string.format("(%s * %dLL)", info.rows, C // W)
    info.row_factors = rowgen.with_const(info.row_factors, C // W)
    for uid, how in pairs(info.access) do
      if how ~= "full" then info.access[uid] = "gather" end
    end
    C = W
  end
  info.C = C
  if C * 4 > E.SMEM_MAX then
    -- a partial row too wide for shared memory: column tiles (grid y), one vector per thread,
    -- each thread's columns its own (nothing combines in the CTA)
    local tiles = (C + E.TILE_THREADS * V - 1) // (E.TILE_THREADS * V)
    info.tiles = tiles
    info.L = { H = C, V = V, N = 1, P = tiles * E.TILE_THREADS, RPC = 1, block = E.TILE_THREADS,
               even = C == tiles * E.TILE_THREADS * V }
    info.smem = 0
    info.cap = sms.cap(E.TILE_PER_SM, tiles)
    info.grid_div = E.TILE_MIN_ROWS
  else
    local L = rowgen.layout(C, V, 4)
    if info.full then L.P, L.N, L.RPC, L.even = 1, C // V, E.BLOCK, true end
    L.RPC = math.max(1, E.BLOCK // L.P)
    L.block = L.P * L.RPC
    info.L = L
    info.smem = C * 4 * NR
  end
  local L = info.L
  local modes = {}
  for i, red in ipairs(r.list) do modes[i] = red.anchor.attrs.mode end
  info.id = string.format("colreduce:v%d:%s:%s:p%dn%dv%dr%d%s", E.version, table.concat(modes, "+"), info.full and "all" or "lead", L.P, L.N, L.V,
    L.RPC, info.tiles and string.format(":t%d", info.tiles) or "")
  return info
end

-- The plan of info with `rows` rows a slot at least and `ctas` CTAs an SM at most (partial
-- rows in shared memory; column tiles have neither knob). The defaults keep info's id.
local function with_knobs(info, rows, ctas)
  local L = info.L
  local v = rowgen.plan_info(info, { cap = sms.cap(ctas), grid_div = math.max(L.RPC * rows, math.min(L.RPC * 4, E.MIN_ROWS)) })
  if rows ~= E.SLOT_ROWS then v.id = string.format("%s:rows%d", v.id, rows) end
  if ctas ~= E.CTAS_PER_SM then v.id = string.format("%s:ctas%d", v.id, ctas) end
  return { id = v.id, knobs = { P = L.P, N = L.N, V = L.V, RPC = L.RPC, rows = rows, ctas = ctas }, info = v }
end

-- Every slot-row count and CTA cap, the defaults first (each choice list leads with its default).
function E.propose(group, g, target)
  if target.sm < 80 then return nil, "needs sm_80 or later (max.NaN, redux.sync)" end
  local info, why = analyze(group, g)
  if not info then return nil, why end
  local L = info.L
  if info.tiles then
    return { { id = info.id, knobs = { P = L.P, N = L.N, V = L.V, RPC = L.RPC }, rank = 1, info = info } }
  end
  local plans = {}
  for _, ctas in ipairs(E.CTAS_CHOICES) do
    for _, rows in ipairs(E.SLOT_ROWS_CHOICES) do
      local p = with_knobs(info, rows, ctas)
      p.rank = 1 - #plans / 100
      plans[#plans + 1] = p
    end
  end
  return plans
end

function E.build(plan, group, g, target, symbol)
  local info = plan.info
  local a, L, mode = info.anchor, info.L, info.mode
  local C, NR = info.C, #info.list
  local K = rowgen.kernel(g, symbol)
  local src = K.src
  src:need("common/nanmax.cuh")
  local prologue = group.prologue or {}
  local read_later = pw.read_set(group.nodes)
  local index = string.format("(row * %dLL + c + j)", C)
  K:note_dyn(info.E)
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then K:ptr(uid) end
  end
  local slot = L.RPC > 1 and string.format("threadIdx.x / %d", L.P) or "0"
  local dyn_smem = info.smem > 48 * 1024
  if dyn_smem then K:add("  extern __shared__ float cs_[];  // [column]")
  elseif not info.tiles then K.shared[#K.shared + 1] = string.format("  __shared__ float cs_[%d];", C * NR) end
  K:add("  const int lane = %s;", info.tiles and string.format("blockIdx.y * %d + threadIdx.x", L.block)
    or L.RPC > 1 and string.format("threadIdx.x %% %d", L.P) or "threadIdx.x")
  -- (sibling reductions: one accumulator array each, their partial rows in turn)
  local acc = function(r) return NR > 1 and string.format("acc%d_", r - 1) or "acc_" end
  for r = 1, NR do
    K:add("  float %s[%d][%d];", acc(r), L.N, L.V)
    K:add("#pragma unroll\n  for (int k = 0; k < %d; k++)\n#pragma unroll\n    for (int j = 0; j < %d; j++) %s[k][j] = %s;", L.N, L.V, acc(r), mode.init)
  end
  if info.tiles then K:add("#pragma unroll 4  // rows in flight: a tile's CTA has one vector per thread per row") end
  K:add("  for (kiln_i64 rb_ = blockIdx.x; rb_ * %d < %s; rb_ += gridDim.x) {", L.RPC, info.rows)
  local loop_start = #K.lines + 1
  K:add("  const kiln_i64 row = rb_%s;", L.RPC > 1 and string.format(" * %d + %s", L.RPC, slot) or "")
  local valid = L.RPC > 1 and "valid" or nil
  if valid then K:add("  const bool valid = row < %s;", info.rows) end
  -- sources: constants, scalars, per-row values, vectors, gathers
  local value, loads, gathers = {}, {}, {}
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then
      value[uid] = K:scalar(uid)
    elseif info.access[uid] == "row" then
      local st = pw.storage(src, t.dtype)
      local load = pw.fmt(st.load, string.format("%s[%s]", K:ptr(uid), pw.offset_expr(t, info.E, string.format("(row * %dLL)", C))))
      K:add("  const float q%d = %s;", uid, valid and string.format("valid ? %s : 0.0f", load) or load)
      value[uid] = "q" .. uid
    elseif info.access[uid] == "full" or info.access[uid] == "col" then
      loads[#loads + 1] = uid
    else
      gathers[#gathers + 1] = uid
    end
  end
  rowgen.pass(K, L, {
    tag = "1", loads = loads, access = info.access, valid = valid, fused = L.N > 8,
    body = function(lines)
      for uid, v in pairs(value) do K.value[uid] = v end
      for _, uid in ipairs(gathers) do
        local t = g.by_uid[uid]
        local st = pw.storage(src, t.dtype)
        lines[#lines + 1] = string.format("        const float v%d = %s;", uid,
          pw.fmt(st.load, string.format("%s[%s]", K:ptr(uid), pw.offset_expr(t, info.E, index))))
        K.value[uid] = "v" .. uid
      end
      pw.emit_nodes(prologue, K.value, lines, { g = g, src = src, space = info.E, index = index, indent = "        ",
                                                read_later = read_later })
      for r, red in ipairs(info.list) do
        lines[#lines + 1] = "        " .. subst(red.mode.upd, { a = acc(r) .. "[k][j]", v = K.value[red.anchor.inputs.input] })
      end
    end,
  })
  for i = loop_start, #K.lines do K.lines[i] = "  " .. K.lines[i]:gsub("\n", "\n  ") end
  K:add("  }")
  local ws
  if info.tiles then
    -- column tiles: the thread's own columns of this CTA's partial row
    ws = K:workspace(0)
    K:add("  const int c = lane * %d;", L.V)
    K:add("  if (c < %d) {", C)
    K:add("#pragma unroll\n    for (int j = 0; j < %d; j++) %s[(kiln_i64)blockIdx.x * %d + c + j] = acc_[0][j];", L.V, ws, C)
    K:add("  }")
  else
    -- the slots combine in a fixed order: within a warp by shuffles (P < 32), then group by
    -- group into cs_
    local comb_fn = COMBINE[mode.comb]
    local groups, group, lead = L.RPC, slot, nil
    if L.P < 32 and L.RPC > 1 then
      for r = 1, NR do
        K:add("#pragma unroll\n  for (int k = 0; k < %d; k++)\n#pragma unroll\n    for (int j = 0; j < %d; j++)\n#pragma unroll\n" ..
          "      for (int o_ = %d; o_ < 32; o_ <<= 1) { const float b_ = __shfl_xor_sync(0xffffffffu, %s[k][j], o_); %s }",
          L.N, L.V, L.P, acc(r), comb_fn({ acc(r) .. "[k][j]" }, { "b_" }))
      end
      groups, group, lead = L.block // 32, "(threadIdx.x >> 5)", string.format("(threadIdx.x & 31) < %d", L.P)
    end
    K:add("  for (int s_ = 0; s_ < %d; s_++) {", groups)
    K:add("    if (%s == s_%s) {", group, lead and (" && " .. lead) or "")
    K:add("#pragma unroll\n      for (int k = 0; k < %d; k++) {", L.N)
    K:add("        const int c = (lane + k * %d) * %d;", L.P, L.V)
    K:add("        if (%s) {", L.even and "true" or string.format("c < %d", C))
    for r = 1, NR do
      local at = NR > 1 and string.format("cs_[%d + c + j]", (r - 1) * C) or "cs_[c + j]"
      K:add("#pragma unroll\n          for (int j = 0; j < %d; j++) { if (s_ == 0) %s = %s[k][j]; else { %s } }", L.V, at, acc(r),
        comb_fn({ at }, { acc(r) .. "[k][j]" }))
    end
    K:add("        }")
    K:add("      }")
    K:add("    }")
    K:add("    __syncthreads();")
    K:add("  }")
    ws = K:workspace(0)
    K:add("  for (int i = threadIdx.x; i < %d; i += %d) %s[(kiln_i64)blockIdx.x * %d + i] = cs_[i];", C * NR, L.block, ws, C * NR)
  end
  local params = K:finish_params()
  src:add(rowgen.render_fill("colreduce.cuh", {
    what = string.format("%s over the leading axes of %s%s; %d rows per CTA pass, %d threads per row, %d vector%s of %d per thread",
      plan.id:match("^colreduce:v%d+:([^:]+)"), shape.format(info.E), info.full and " then over the last" or "", L.RPC, L.P, L.N,
      L.N == 1 and "" or "s", L.V)
      .. (info.tiles and string.format(", %d column tiles of %d threads", info.tiles, L.block) or ""),
    block = L.block, symbol = symbol, params = params, shared = table.concat(K.shared, "\n"), body = table.concat(K.lines, "\n"),
  }))
  local main = {
    symbol = symbol, engine = E.id, plan_id = plan.id, source = src:text(), options = rowgen.options(),
    block = { L.block, 1, 1 }, grid = { sms.rule(info.row_factors, info.grid_div, info.cap), info.tiles or 1, 1 },
    smem = dyn_smem and info.smem or 0, cluster = { 1, 1, 1 }, params = K.mparams, align = K.align,
  }
  -- the same in PTX, for a PTX module (no NVRTC front end and NVVM)
  local ptx_ok, why = colreduce_ptx.accepts(group, g, info)
  main.cuda_why = why
  if ptx_ok then
    local cuda = main.source
    K.lines, K.target = {}, target
    K.shared = { string.format("  %s__shared__ __align__(16) float cs_[%s];", dyn_smem and "extern " or "", dyn_smem and "" or C * NR) }
    colreduce_ptx.emit(K, group, g, info)
    rowgen.with_source(main, K, cuda)
  end
  local n = info.full and string.format("((float)%s * %d.0f)", info.rows, C) or string.format("(float)%s", info.rows)
  local n_factors = info.full and { info.row_factors, { C } } or { info.row_factors }
  local outs = { { uid = a.outputs.Y, first = 0, count = C } }
  if NR > 1 then
    for r, red in ipairs(info.list) do outs[r] = { uid = red.y.uid, first = (r - 1) * C, count = C, fin = red.mode.fin or false } end
  end
  local final = rowgen.finalize(g, symbol .. "_final", plan.id .. ":final", E.id, {
    C = C * NR, outs = outs, rows = info.rows, row_factors = info.row_factors, dims = info.E,
    G = { div = info.grid_div, cap = info.cap }, comb = mode.comb, init = mode.init, fin = NR == 1 and mode.fin or nil, n = n, n_factors = n_factors,
    fold = info.full, what = plan.id:match("^colreduce:v%d+:([^:]+)") .. (info.full and " of everything" or " per column"),
    target = target,
  })
  return { kernels = { main, final }, workspace = rowgen.partials_workspace(info.row_factors, info.cap, C * NR) }
end

return E
