-- kiln.engines.axisreduce: reductions over axes that neither row.lua (a trailing block) nor
-- colreduce.lua (a leading block, or everything) takes, deterministically, with a fused
-- pointwise prologue. The input's axes (size-1 axes dropped) merge into runs of kept and of
-- reduced axes; two shapes are built:
--   strided  [Ko, R, Ki]: a middle block ([B, S, H] -> [B, 1, H]). A CTA's 256 threads split
--            the rows RS ways (up to 32, as the row count allows) and take 256 / RS lanes of V
--            adjacent outputs each (16-byte loads, adjacent lanes adjacent outputs), 4 rows in
--            flight a thread; each thread's and then the splits' values combine in a fixed order.
--            The grid is persistent over (column block, row slice) items; too few column blocks
--            to fill it split their rows into slices whose partials a second kernel adds.
--   inner    [Ro, K, Ri] with K compile-time: a leading and a trailing block (per-channel
--            statistics, [N, C, H, W] -> [1, C, 1, 1]). CTA (s, k) folds the contiguous Ri
--            values of rows s, s + G, ... of channel k as one run of vectors (G slices from the
--            SM count), the CTA combines in a fixed order, and the finalize (rowgen.finalize)
--            adds the G partials.
-- Sibling reductions of one input shape to one output shape (lower merges them where
-- E.fuses allows: batch norm's backward sums dy and dy * x_hat) share the loads: each keeps
-- its own accumulators, and the inner form's partial row holds each one's K columns in turn.
-- Anything else (reduced axes in three or more blocks) is declined by name.
local shape = require "kiln.shape"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local sms = require "kiln.engines.sms"
local partials_ptx = require "kiln.engines.partials_ptx"
local axisreduce_ptx = require "kiln.engines.axisreduce_ptx"

local E = { id = "axisreduce", version = 1 }
-- The row code's settings its PTX forms read (kiln.settings, rowgen.SETTINGS, rowptx.SETTINGS).
E.settings = rowgen.settings(rowgen.SETTINGS, rowptx.SETTINGS)

E.BLOCK = 256        -- threads a CTA
E.UNROLL = 4         -- accumulators (loads in flight) a thread
E.SLICES_PER_SM = 4  -- inner: CTAs per SM the slices of all channels aim at (one wave: its launch bounds)
E.MAX_SPLIT = 32     -- strided: the most ways a CTA splits the rows (the rest of its threads: outputs)
-- strided: rows this many or more (or not compile-time) may split over up to E.MAX_SLICES CTAs,
-- whose partials a second kernel adds in slice order, where the column blocks are too few to
-- fill E.STRIDED_PER_SM CTAs an SM (a persistent grid). On an H200 adaptive layer norm's
-- backward sums over 4096 rows 2.65x at one sample, 1.60x at four; over 512 rows 0.53-0.93x
-- (the second kernel's launch outweighs).
E.SLICE_MIN_ROWS = 2048
E.STRIDED_PER_SM = 8
E.MAX_SLICES = 32

local COMBINE, subst = rowgen.COMBINE, rowgen.subst

-- The V elements from flat input index `index` folded into each accumulator (`acc` with %r
-- the accumulator's index; rowgen.elements).
local function element(K, group, g, info, index, acc, indent, V)
  rowgen.elements(K, group, g, info.E, index, indent, V, function(lines, value, inner)
    for i, a in ipairs(info.acc) do
      lines[#lines + 1] = inner .. subst(a.mode.upd, { a = acc:gsub("%%r", i - 1), v = value[a.input] })
    end
  end, nil, info.fixed)
end

-- The stride of tensor t along the strided form's rows where t is broadcast along the trailing
-- kept axes and its offset grows linearly with the row index (a row's mean or rstd); else nil.
local function per_row_stride(t, info)
  local at = axisreduce_ptx.strided_access(t, info)
  return at and at.I == 0 and at.R ~= 0 and at.R or nil
end

-- The inputs the same for all rows a thread reads (broadcast along every reduced axis: a
-- per-channel mean, a per-sample scale), loaded once before the row loop (lines at `indent`)
-- from flat index `first` (the thread's first element); info.fixed[uid] names element j.
local function hoist(K, group, g, info, first, indent, V)
  local E, fixed = info.E, {}
  local last = E[#E]
  local in_row = type(last) == "number" and last % V == 0
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    local pad = #E - #t.dims
    local gathered = t.role ~= "constant" and t.role ~= "scalar" and not pw.dims_equal(t.dims, E)
    local varies = gathered
    for _, run in ipairs(info.runs) do
      for i = run.from, run.to do
        local d = t.dims[i - pad]
        if run.reduced and d ~= nil and d ~= 1 then varies = false end
      end
    end
    local along = gathered and not varies and info.form == "strided" and per_row_stride(t, info)
    if along then
      -- (a per-row value of the strided form, e.g. a row's mean: from the thread's first
      -- element's offset plus the row `row_` times its stride)
      K:add("%sconst kiln_i64 o%d_ = %s;", indent, uid, pw.offset_expr(t, E, first))
      fixed[uid] = pw.fmt(pw.storage(K.src, t.dtype).load, string.format("%s[o%d_ + row_ * %dLL]", K:ptr(uid), uid, along))
    elseif varies then
      local load, ptr, n = pw.storage(K.src, t.dtype).load, K:ptr(uid), #t.dims
      if n == 0 or t.dims[n] == 1 or info.form == "inner" then
        K:add("%sconst float f%d_ = %s;", indent, uid, pw.fmt(load, string.format("%s[%s]", ptr, pw.offset_expr(t, E, first))))
        fixed[uid] = string.format("f%d_", uid)
      else
        -- (contiguous along the last axis inside one row: from one offset)
        local at = (in_row and t.strides[n] == 1) and string.format("o%d_ + j", uid) or pw.offset_expr(t, E, "(" .. first .. " + j)")
        if in_row and t.strides[n] == 1 then K:add("%sconst kiln_i64 o%d_ = %s;", indent, uid, pw.offset_expr(t, E, first)) end
        K:add("%sfloat f%d_[%d];", indent, uid, V)
        K:add("#pragma unroll\n%sfor (int j = 0; j < %d; j++) f%d_[j] = %s;", indent, V, uid, pw.fmt(load, string.format("%s[%s]", ptr, at)))
        fixed[uid] = string.format("f%d_[j]", uid)
      end
    end
  end
  info.fixed = fixed
end

-- The accumulators of sibling reductions: one per input and update (batch norm's backward
-- sums dy and dy * x_hat and takes their means: two, not four), info.acc_of[r] reduction r's;
-- each output keeps its own final map.
local function accumulators(info)
  info.acc, info.acc_of = {}, {}
  local index = {}
  for r, red in ipairs(info.list) do
    local key = red.anchor.inputs.input .. "|" .. red.mode.upd
    if not index[key] then
      info.acc[#info.acc + 1] = { input = red.anchor.inputs.input, mode = red.mode }
      index[key] = #info.acc
    end
    info.acc_of[r] = index[key]
  end
end

local function fail(fmt_, ...) return nil, string.format(fmt_, ...) end

local function modes_of(info)
  local modes = {}
  for i, r in ipairs(info.list) do modes[i] = r.anchor.attrs.mode end
  return modes
end

-- The runs of x's axes past size 1: { { reduced = bool, from = i, to = j }, ... }.
local function runs_of(x, y)
  local runs = {}
  for i = 1, #x.dims do
    if x.dims[i] ~= 1 then
      local reduced = y.dims[i] == 1
      local last = runs[#runs]
      if last and last.reduced == reduced then last.to = i
      else runs[#runs + 1] = { reduced = reduced, from = i, to = i } end
    end
  end
  return runs
end

-- The product of x's axes in run r (nil: none): rowgen.extent's expression, factors, value.
local function extent(dims, r)
  return rowgen.extent(dims, r and r.from or 1, r and r.to or 0)
end

-- Elements a thread loads at once: up to 16 bytes of every tensor read whole (the input's
-- shape, row-major), a divisor of the contiguous run n (1 where n is not compile-time).
local function vector_width(group, g, x, n)
  local whole = {}
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if pw.dims_equal(t.dims, x.dims) and shape.is_row_major(t.dims, t.strides) then whole[#whole + 1] = t end
  end
  return rowgen.load_width(whole, n)
end

-- The runs of x's axes and their form: "K" for a kept run, "R" for a reduced one, in order.
local function form_of(x, y)
  local runs = runs_of(x, y)
  local shape_of = {}
  for i, run in ipairs(runs) do shape_of[i] = run.reduced and "R" or "K" end
  return runs, table.concat(shape_of)
end

local function analyze(group, g)
  local red, why = rowgen.reduction_group(group, g, "reduction over several axes")
  if not red then return nil, why end
  local a, mode, x, y = red.anchor, red.mode, red.x, red.y
  for _, r in ipairs(red.list) do
    if not shape.is_row_major(r.y.dims, r.y.strides) then return fail("Y '%s' is not row-major", r.y.name) end
  end
  local runs, form = form_of(x, y)
  local info = { anchor = a, mode = mode, E = x.dims, list = red.list, runs = runs }
  accumulators(info)
  if form == "RK" or form == "KRK" then
    local ko, r, ki = table.unpack(form == "RK" and { nil, runs[1], runs[2] } or runs)
    info.form = "strided"
    info.Ko, info.Ko_f = extent(x.dims, ko)
    info.R, info.R_f, info.R_c = extent(x.dims, r)
    local Ki_c
    info.Ki, info.Ki_f, Ki_c = extent(x.dims, ki)
    info.Ki_c = Ki_c
    info.V = vector_width(group, g, x, Ki_c)
    -- the rows split over the CTA's threads as many ways as keep E.UNROLL rows in flight twice
    -- over (rows not compile-time: 8 ways), the rest of the threads along the outputs
    info.RS = rowgen.row_splits(info.R_c, E.UNROLL, E.MAX_SPLIT)
    -- (no slices where the outputs alone fill the largest device)
    local TW, Ko_c = (E.BLOCK // info.RS) * info.V, select(3, extent(x.dims, ko))
    local blocks = Ko_c and Ki_c and (Ko_c * Ki_c + TW - 1) // TW
    info.slices = (info.R_c == nil or info.R_c >= E.SLICE_MIN_ROWS)
      and not (blocks and blocks >= sms.LARGE * E.STRIDED_PER_SM) or nil
  elseif form == "RKR" or form == "KR" then
    local ro, k, ri = table.unpack(form == "KR" and { nil, runs[1], runs[2] } or runs)
    info.form, info.k_run = "inner", form == "KR" and 1 or 2
    info.Ro, info.Ro_f = extent(x.dims, ro)
    local _, _, K = extent(x.dims, k)
    if not K then return fail("the kept axes of %s are not compile-time (specialize them)", shape.format(x.dims)) end
    if K > 65535 then return fail("%d channels: more than a grid's y extent", K) end
    info.K = K
    local Ri, Ri_f, Ri_c = extent(x.dims, ri)
    info.Ri, info.Ri_f, info.Ri_c = Ri, Ri_f, Ri_c
    info.V = vector_width(group, g, x, Ri_c)
    info.cap = sms.cap(E.SLICES_PER_SM, K)
  elseif not form:find("R") then
    return fail("reduces no axis")
  else
    return fail("the reduced axes of %s form %s (kept K, reduced R): at most a leading and a trailing block, or one block inside",
      shape.format(x.dims), form)
  end
  info.id = string.format("axisreduce:v%d:%s:%s:b%dv%d%s%s", E.version, table.concat(modes_of(info), "+"), info.form, E.BLOCK,
    info.V, info.RS and string.format("s%d", info.RS) or "", info.slices and ":slices" or "")
  return info
end

-- Whether reduction b joins the kernel of the reductions `list` (lower's sibling merge): the
-- same input and output shapes, a middle block, a leading and a trailing one or a trailing one
-- over compile-time rows, partials that combine alike, and room for one more.
function E.fuses(list, b, g)
  local x, y = rowgen.siblings_alike(list, b, g)
  if not x then return false end
  local runs, form = form_of(x, y)
  -- (a trailing block the row engine leaves: rows not compile-time; this engine's inner form
  -- wants the kept axes compile-time)
  return form == "KRK" or form == "RKR" or form == "KR" and select(3, extent(x.dims, runs[1])) ~= nil
end

function E.propose(group, g, target)
  if target.sm < 80 then return nil, "needs sm_80 or later (max.NaN)" end
  local info, why = analyze(group, g)
  if not info then return nil, why end
  return { { id = info.id, knobs = { form = info.form }, rank = 1, info = info } }
end

-- The strided form's slice count, a C expression: enough (column block, row slice) items to
-- fill E.STRIDED_PER_SM CTAs an SM, each slice at least U rows a thread, at most E.MAX_SLICES
-- (1: the outputs alone fill the device). Both kernels compute it from the launch's dims.
local function slices_expr(TW, RS, U)
  return string.format("kiln_i64 C = (n_out + %d) / %d, G = sms * %d / C; if (G > R / %d) G = R / %d; " ..
    "if (G > %d) G = %d; if (G < 1) G = 1;", TW - 1, TW, E.STRIDED_PER_SM, RS * U, RS * U, E.MAX_SLICES, E.MAX_SLICES)
end

-- What reduction red stores from its accumulator `a` over R rows: its final map, its dtype.
local function stored(src, red)
  local fin = red.mode.fin and subst(red.mode.fin, { a = "a", n = "(float)R" }) or "a"
  return pw.fmt(pw.storage(src, red.y.dtype).store, fin)
end

-- The strided form's shared state: the plan's arguments and the kernel's shape.
local function strided_state(plan, group, g, target, symbol)
  local info = plan.info
  local S = { plan = plan, group = group, g = g, target = target, symbol = symbol, info = info, mode = info.mode,
              B = E.BLOCK, V = info.V, U = E.UNROLL, RS = info.RS, NR = #info.acc, split = info.slices,
              comb = COMBINE[info.mode.comb] }
  S.LO = S.B // S.RS  -- lanes along the outputs
  S.TW = S.LO * S.V   -- outputs a CTA
  return S
end

-- The strided kernel's head: a persistent grid over items (column block cb, row slice sl):
-- thread t takes the V outputs from o (lane t % LO: adjacent lanes adjacent outputs) and the
-- slice's rows sl * R / G + s, + RS, ... (s = t / LO); one slice writes the outputs, several
-- their partials to the workspace (without slices: a CTA a column block, all its rows).
local function strided_head(S, K)
  local info, V, U, RS, TW, split = S.info, S.V, S.U, S.RS, S.TW, S.split
  if split then
    S.ws = K:workspace(0)
    K.params[#K.params + 1] = "const kiln_i64 sms"
    K.mparams[#K.mparams + 1] = { kind = "sms" }
  end
  K:add("  const kiln_i64 n_out = %s * %s, R = %s, Ki = %s;", info.Ko, info.Ki, info.R, info.Ki)
  if split then K:add("  %s", slices_expr(TW, RS, U)) end
  K:add("  const int s = threadIdx.x / %d, lane = threadIdx.x %% %d;", S.LO, S.LO)
  K.shared[#K.shared + 1] = string.format("  __shared__ float red_[%d][%d][%d];", S.NR, RS, TW)
  K:add("  float acc_[%d][%d][%d];", S.NR, U, V)
  if split then
    K:add("  for (kiln_i64 w = blockIdx.x; w < C * G; w += gridDim.x) {")
    K:add("  const kiln_i64 cb = w / G, sl = w - cb * G, r_hi = (sl + 1) * R / G;")
  else
    K:add("  {")
    K:add("  const kiln_i64 cb = blockIdx.x, sl = 0, G = 1, r_hi = R;")
  end
  K:add("  const kiln_i64 o = cb * %d + lane * %d;", TW, V)
  K:add("#pragma unroll\n  for (int r = 0; r < %d; r++)\n#pragma unroll\n  for (int u = 0; u < %d; u++)\n#pragma unroll\n    for (int j = 0; j < %d; j++) acc_[r][u][j] = %s;",
    S.NR, U, V, S.mode.init)
end

-- The thread's rows of the item folded into acc_, U a trip while the slice has them.
local function strided_rows(S, K)
  local group, g, info, V, U, RS = S.group, S.g, S.info, S.V, S.U, S.RS
  K:add("  if (o < n_out) {")
  K:add("    const kiln_i64 ko = o / Ki, base = ko * R * Ki + (o - ko * Ki);")
  hoist(K, group, g, info, "base", "    ", V)
  K:add("    kiln_i64 r = sl * R / G + s;")
  -- (the row loops rolled: NVVM unrolling them again doubles the kernel's compile, not its speed)
  K:add("#pragma unroll 1\n    for (; r + %d < r_hi; r += %d) {", (U - 1) * RS, U * RS)
  K:add("#pragma unroll\n      for (int u = 0; u < %d; u++) {", U)
  K:add("        const kiln_i64 row_ = r + u * %d, e = base + row_ * Ki;", RS)
  element(K, group, g, info, "e", "acc_[%r][u][j]", "        ", V)
  K:add("      }")
  K:add("    }")
  K:add("#pragma unroll 1\n    for (; r < r_hi; r += %d) {", RS)
  K:add("      const kiln_i64 row_ = r, e = base + r * Ki;")
  element(K, group, g, info, "e", "acc_[%r][0][j]", "      ", V)
  K:add("    }")
  K:add("  }")
end

-- The item's values combined in a fixed order (each thread's accumulators, then the row
-- splits in turn) and stored: the outputs, or with several slices the slice's partials.
local function strided_combine(S, K)
  local info, B, V, U, RS, TW, NR, comb = S.info, S.B, S.V, S.U, S.RS, S.TW, S.NR, S.comb
  K:add("  // in a fixed order: each thread's accumulators, then the row splits in turn")
  K:add("#pragma unroll\n  for (int r = 0; r < %d; r++)\n#pragma unroll\n  for (int j = 0; j < %d; j++) {", NR, V)
  K:add("    float a = acc_[r][0][j];")
  K:add("#pragma unroll\n    for (int u = 1; u < %d; u++) { const float b = acc_[r][u][j]; %s }", U, comb({ "a" }, { "b" }))
  K:add("    red_[r][s][lane * %d + j] = a;", V)
  K:add("  }")
  K:add("  __syncthreads();")
  K:add("  for (int i = threadIdx.x; i < %d; i += %d) {", TW, B)
  K:add("    const kiln_i64 q = cb * %d + i;", TW)
  K:add("    if (q >= n_out) break;")
  for ai in ipairs(info.acc) do
    local stores = {}
    for r, red in ipairs(info.list) do
      if info.acc_of[r] == ai then stores[#stores + 1] = string.format("%s[q] = %s;", K:ptr(red.y.uid, true), stored(K.src, red)) end
    end
    K:add("    {")
    K:add("      float a = red_[%d][0][i];", ai - 1)
    K:add("      for (int k = 1; k < %d; k++) { const float b = red_[%d][k][i]; %s }", RS, ai - 1, comb({ "a" }, { "b" }))
    if S.split then
      K:add("      if (G == 1) { %s }", table.concat(stores, " "))
      K:add("      else %s[(sl * %d + %d) * n_out + q] = a;", S.ws, NR, ai - 1)
    else
      K:add("      %s", table.concat(stores, " "))
    end
    K:add("    }")
  end
  K:add("  }")
  if S.split then K:add("  __syncthreads();  // red_ is the next item's") end
  K:add("  }")
end

-- The strided kernel rendered, with its PTX form where axisreduce_ptx takes it.
local function strided_main(S, K)
  local info, B, V, U, RS, TW, symbol = S.info, S.B, S.V, S.U, S.RS, S.TW, S.symbol
  local params = K:finish_params()
  K.src:add(rowgen.render_fill("axisreduce.cuh", {
    what = string.format("%s over the middle axes of %s: %d outputs a CTA, %d a thread, the rows split %d ways, %d rows in flight a thread",
      table.concat(modes_of(info), " and "), shape.format(info.E), TW, V, RS, U),
    block = B, minb = "", symbol = symbol, params = params, shared = table.concat(K.shared, "\n"), body = table.concat(K.lines, "\n"),
  }))
  local main = rowgen.columns_kernel(K, S.plan, E.id, symbol, info.Ko_f, info.Ki_f, TW, B, 0)
  -- the same in PTX, for a PTX module (no NVRTC front end and NVVM)
  local ptx_ok, why = axisreduce_ptx.accepts_strided(S.group, S.g, info)
  main.cuda_why = why
  if ptx_ok then
    local cuda = main.source
    K.lines, K.target = {}, S.target
    K.shared = { string.format("  __shared__ __align__(16) float red_[%d][%d][%d];", S.NR, RS, TW) }
    axisreduce_ptx.emit_strided(K, S.group, S.g, info, B, U,
      { slices = S.split, TW = TW, rsu = RS * U, per_sm = E.STRIDED_PER_SM, most = E.MAX_SLICES })
    rowgen.with_source(main, K, cuda)
  end
  return main
end

-- The second kernel's body: each accumulator's partials combined over the slices, its
-- reductions' outputs stored.
local function final_body(S, F)
  local info, B, NR, comb = S.info, S.B, S.NR, S.comb
  local fws = F:workspace(0)
  F.params[#F.params + 1] = "const kiln_i64 sms"
  F.mparams[#F.mparams + 1] = { kind = "sms" }
  F:add("  const kiln_i64 n_out = %s * %s, R = %s;", info.Ko, info.Ki, info.R)
  F:add("  %s", slices_expr(S.TW, S.RS, S.U))
  F:add("  kiln_pdl_wait();  // launched early (pdl): the partials are complete past this point")
  F:add("  kiln_pdl_launch_dependents();")
  F:add("  if (G == 1) return;")
  F:add("  for (kiln_i64 q = (kiln_i64)blockIdx.x * %d + threadIdx.x; q < n_out; q += (kiln_i64)gridDim.x * %d) {", B, B)
  for ai in ipairs(info.acc) do
    F:add("    {")
    F:add("      float a = %s[%d * n_out + q];", fws, ai - 1)
    F:add("      for (kiln_i64 k = 1; k < G; k++) { const float b = %s[(k * %d + %d) * n_out + q]; %s }", fws, NR, ai - 1,
      comb({ "a" }, { "b" }))
    for r, red in ipairs(info.list) do
      if info.acc_of[r] == ai then F:add("      %s[q] = %s;", F:ptr(red.y.uid, true), stored(F.src, red)) end
    end
    F:add("    }")
  end
  F:add("  }")
end

-- The second kernel's source into `final`: PTX where partials_ptx takes it, else the CUDA
-- form's (no NVRTC either way once it is PTX).
local function final_source(S, F, final, factors)
  local info, mode = S.info, S.mode
  local cuda, accs = F.src:text(), {}
  for ai in ipairs(info.acc) do accs[ai] = {} end
  for r, red in ipairs(info.list) do table.insert(accs[info.acc_of[r]], { uid = red.y.uid, fin = red.mode.fin }) end
  local sopts = { n_out = factors, rows = info.R_f, TW = S.TW, rsu = S.RS * S.U, per_sm = E.STRIDED_PER_SM, most = E.MAX_SLICES,
                  comb = mode.comb, init = mode.init, accs = accs }
  if partials_ptx.slices_accept(S.g, sopts) then
    F.lines, F.target = {}, S.target
    partials_ptx.emit_slices(F, S.g, sopts)
  end
  rowgen.with_source(final, F, cuda, nil, true)
end

-- The kernel adding the slices' partials, over the n_out outputs (`factors`).
local function strided_final(S, factors)
  local info, mode, B, symbol = S.info, S.mode, S.B, S.symbol
  local F = rowgen.kernel(S.g, symbol .. "_final")
  F.src:need("common/pdl.cuh")
  if mode.comb == "max" or mode.comb == "min" then F.src:need("common/nanmax.cuh") end
  F:note_dyn(info.E)
  final_body(S, F)
  local fparams = F:finish_params()
  F.src:add(rowgen.render_fill("axisreduce.cuh", {
    what = "the row slices' partials of " .. table.concat(modes_of(info), " and ") .. " added in slice order",
    block = B, minb = "", symbol = symbol .. "_final", params = fparams, shared = "", body = table.concat(F.lines, "\n"),
  }))
  local final = {
    symbol = symbol .. "_final", engine = E.id, plan_id = S.plan.id .. ":final", options = rowgen.options(),
    block = { B, 1, 1 }, grid = { sms.rule(factors, B, sms.cap(E.STRIDED_PER_SM)), 1, 1 },
    smem = 0, cluster = { 1, 1, 1 }, params = F.mparams, align = F.align, pdl = true,
  }
  -- the same in PTX, for a PTX module (no NVRTC)
  final_source(S, F, final, factors)
  return final
end

local function build_strided(plan, group, g, target, symbol)
  local S = strided_state(plan, group, g, target, symbol)
  local info, TW, NR = S.info, S.TW, S.NR
  local K = rowgen.kernel(g, symbol)
  K.src:need("common/nanmax.cuh")
  K:note_dyn(info.E)
  strided_head(S, K)
  strided_rows(S, K)
  strided_combine(S, K)
  local main = strided_main(S, K)
  if not S.split then return main end
  local factors = {}
  for _, f in ipairs(info.Ko_f) do factors[#factors + 1] = f end
  for _, f in ipairs(info.Ki_f) do factors[#factors + 1] = f end
  main.grid[1] = sms.rule(rowgen.with_const(factors, E.MAX_SLICES), TW, sms.cap(E.STRIDED_PER_SM))
  -- the slices' partials added in slice order (nothing to do where one slice took the rows)
  local final = strided_final(S, factors)
  -- G slices hold G * NR * n_out partials: G * C items fill at most STRIDED_PER_SM CTAs an SM
  local cap = sms.cap(E.STRIDED_PER_SM * TW * NR * 4)
  local workspace = { rule = sms.rule(rowgen.with_const(factors, E.MAX_SLICES * NR * 4), 1, cap),
                      bytes_max = sms.at(cap, sms.MAX) }
  return { kernels = { main, final }, workspace = workspace }
end

local function build_inner(plan, group, g, target, symbol)
  local info, mode = plan.info, plan.info.mode
  local B, V, U, NR = E.BLOCK, info.V, E.UNROLL, #info.acc
  local K = rowgen.kernel(g, symbol)
  K.src:need("common/nanmax.cuh")
  K:note_dyn(info.E)
  local comb = COMBINE[mode.comb]({ "a" }, { "b" })
  -- the slice's rows as one run of vectors: thread t takes vectors t, t + B, ... (U in flight)
  K:add("  const kiln_i64 Ro = %s, Ri = %s, VR = Ri / %d, G = gridDim.x;", info.Ro, info.Ri, V)
  K:add("  const int k = blockIdx.y;")
  hoist(K, group, g, info, "((kiln_i64)k * Ri)", "  ", V)
  K:add("  const kiln_i64 n = (Ro - blockIdx.x + G - 1) / G * VR;  // the slice's vectors")
  K:add("  float acc_[%d][%d];", NR, U)
  K:add("#pragma unroll\n  for (int r = 0; r < %d; r++)\n#pragma unroll\n  for (int u = 0; u < %d; u++) acc_[r][u] = %s;", NR, U, mode.init)
  K:add("  kiln_i64 f = threadIdx.x;")
  K:add("#pragma unroll 1\n  for (; f + %d < n; f += %d) {", (U - 1) * B, U * B)
  K:add("#pragma unroll\n    for (int u = 0; u < %d; u++) {", U)
  K:add("      const kiln_i64 fu = f + u * %d, e = ((blockIdx.x + fu / VR * G) * %dLL + k) * Ri + fu %% VR * %d;", B, info.K, V)
  element(K, group, g, info, "e", "acc_[%r][u]", "      ", V)
  K:add("    }")
  K:add("  }")
  K:add("#pragma unroll 1\n  for (; f < n; f += %d) {", B)
  K:add("    const kiln_i64 e = ((blockIdx.x + f / VR * G) * %dLL + k) * Ri + f %% VR * %d;", info.K, V)
  element(K, group, g, info, "e", "acc_[%r][0]", "    ", V)
  K:add("  }")
  -- each reduction's partial goes to its own K columns of the CTA's partial row
  local ws = K:workspace(0)
  if B > 32 then K.shared[#K.shared + 1] = string.format("  __shared__ float warps_[%d][%d];", NR, B // 32) end
  K:add("  // the CTA's values in a fixed order: the warp's by butterflies, then the warps' in turn")
  K:add("#pragma unroll\n  for (int r = 0; r < %d; r++) {", NR)
  K:add("    float a = acc_[r][0];")
  K:add("#pragma unroll\n    for (int u = 1; u < %d; u++) { const float b = acc_[r][u]; %s }", U, comb)
  K:add("#pragma unroll\n    for (int o_ = 16; o_ > 0; o_ >>= 1) { const float b = __shfl_xor_sync(0xffffffffu, a, o_); %s }", comb)
  if B > 32 then
    K:add("    if ((threadIdx.x & 31) == 0) warps_[r][threadIdx.x >> 5] = a;")
  else
    K:add("    if (threadIdx.x == 0) %s[(kiln_i64)blockIdx.x * %d + r * %d + k] = a;", ws, NR * info.K, info.K)
  end
  K:add("  }")
  if B > 32 then
    K:add("  __syncthreads();")
    K:add("  if (threadIdx.x < %d) {", NR)
    K:add("    const int r = threadIdx.x;")
    K:add("    float a = warps_[r][0];")
    K:add("    for (int w = 1; w < %d; w++) { const float b = warps_[r][w]; %s }", B // 32, comb)
    K:add("    %s[(kiln_i64)blockIdx.x * %d + r * %d + k] = a;", ws, NR * info.K, info.K)
    K:add("  }")
  end
  local params = K:finish_params()
  local outs = {}
  for r, red in ipairs(info.list) do
    outs[r] = { uid = red.y.uid, first = (info.acc_of[r] - 1) * info.K, count = info.K, fin = red.mode.fin or false }
  end
  local what = table.concat(modes_of(info), " and ")
  K.src:add(rowgen.render_fill("axisreduce.cuh", {
    what = string.format("%s over the leading and trailing axes of %s: a CTA of %d threads per channel and slice of rows, one partial per CTA into the workspace",
      what, shape.format(info.E), B),
    block = B, minb = ", " .. E.SLICES_PER_SM, symbol = symbol, params = params, shared = table.concat(K.shared, "\n"),
    body = table.concat(K.lines, "\n"),
  }))
  local main = {
    symbol = symbol, engine = E.id, plan_id = plan.id, options = rowgen.options(),
    block = { B, 1, 1 }, grid = { sms.rule(info.Ro_f, 1, info.cap), info.K, 1 },
    smem = 0, cluster = { 1, 1, 1 }, params = K.mparams, align = K.align,
  }
  -- the same in PTX, for a PTX module (no NVRTC front end and NVVM)
  local cuda = K.src:text()
  local ptx_ok, why = axisreduce_ptx.accepts(group, g, info)
  K.why_cuda = why
  if ptx_ok then
    K.lines, K.target = {}, target
    K.shared = { string.format("  __shared__ __align__(16) float warps_[%d][%d];", NR, B // 32) }
    axisreduce_ptx.emit(K, group, g, info, B, U)
  end
  rowgen.with_source(main, K, cuda, E.SLICES_PER_SM)
  local final = rowgen.finalize(g, symbol .. "_final", plan.id .. ":final", E.id, {
    C = NR * info.K, outs = outs, rows = info.Ro, row_factors = info.Ro_f, dims = info.E,
    G = { div = 1, cap = info.cap }, comb = mode.comb, init = mode.init,
    n = string.format("((float)%s * (float)%s)", info.Ro, info.Ri), n_factors = { info.Ro_f, info.Ri_f },
    what = what .. " per channel", target = target,
  })
  return { kernels = { main, final }, workspace = rowgen.partials_workspace(info.Ro_f, info.cap, NR * info.K) }
end

function E.build(plan, group, g, target, symbol)
  if plan.info.form == "strided" then return build_strided(plan, group, g, target, symbol) end
  return build_inner(plan, group, g, target, symbol)
end

return E
