-- kiln.engines.axisreduce: reductions over axes that neither row.lua (a trailing block) nor
-- colreduce.lua (a leading block, or everything) takes, deterministically, with a fused
-- pointwise prologue. The input's axes (size-1 axes dropped) merge into runs of kept and of
-- reduced axes; two shapes are built:
--   strided  [Ko, R, Ki]: a middle block ([B, S, H] -> [B, 1, H]). A CTA's 256 threads split
--            the rows RS ways (up to 32, as the row count allows) and take 256 / RS lanes of V
--            adjacent outputs each (16-byte loads, adjacent lanes adjacent outputs), 4 rows in
--            flight a thread; each thread's and then the splits' values combine in a fixed order.
--   inner    [Ro, K, Ri] with K compile-time: a leading and a trailing block (per-channel
--            statistics, [N, C, H, W] -> [1, C, 1, 1]). CTA (s, k) folds the contiguous Ri
--            values of rows s, s + G, ... of channel k as one run of vectors (G slices from the
--            SM count), the CTA combines in a fixed order, and the finalize (rowgen.finalize)
--            adds the G partials.
-- Anything else (reduced axes in three or more blocks) is declined by name.
local shape = require "kiln.shape"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local sms = require "kiln.engines.sms"

local E = { id = "axisreduce", version = 1 }

E.BLOCK = 256        -- threads a CTA
E.UNROLL = 4         -- accumulators (loads in flight) a thread
E.SLICES_PER_SM = 8  -- inner: CTAs per SM the slices of all channels aim at (full occupancy)
E.MAX_SPLIT = 32     -- strided: the most ways a CTA splits the rows (the rest of its threads: outputs)

local COMBINE, subst = rowgen.COMBINE, rowgen.subst

-- The V elements from flat input index `index` folded into accumulator `acc` (rowgen.elements).
local function element(K, group, g, info, index, acc, indent, V)
  rowgen.elements(K, group, g, info.E, index, indent, V, function(lines, value, inner)
    lines[#lines + 1] = inner .. subst(info.mode.upd, { a = acc, v = value[info.anchor.inputs.input] })
  end)
end

local function fail(fmt_, ...) return nil, string.format(fmt_, ...) end

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

local function analyze(group, g)
  local red, why = rowgen.reduction_group(group, g, "reduction over several axes")
  if not red then return nil, why end
  local a, mode, x, y = red.anchor, red.mode, red.x, red.y
  if not shape.is_row_major(y.dims, y.strides) then return fail("Y is not row-major") end
  local runs = runs_of(x, y)
  local shape_of = {}
  for i, run in ipairs(runs) do shape_of[i] = run.reduced and "R" or "K" end
  local form = table.concat(shape_of)
  local info = { anchor = a, mode = mode, E = x.dims }
  if form == "RK" or form == "KRK" then
    local ko, r, ki = table.unpack(form == "RK" and { nil, runs[1], runs[2] } or runs)
    info.form = "strided"
    info.Ko, info.Ko_f = extent(x.dims, ko)
    info.R, _, info.R_c = extent(x.dims, r)
    local Ki_c
    info.Ki, info.Ki_f, Ki_c = extent(x.dims, ki)
    info.V = vector_width(group, g, x, Ki_c)
    -- the rows split over the CTA's threads as many ways as keep E.UNROLL rows in flight twice
    -- over (rows not compile-time: 8 ways), the rest of the threads along the outputs
    info.RS = rowgen.row_splits(info.R_c, E.UNROLL, E.MAX_SPLIT)
  elseif form == "RKR" or form == "KR" then
    local ro, k, ri = table.unpack(form == "KR" and { nil, runs[1], runs[2] } or runs)
    info.form = "inner"
    info.Ro, info.Ro_f = extent(x.dims, ro)
    local _, _, K = extent(x.dims, k)
    if not K then return fail("the kept axes of %s are not compile-time (specialize them)", shape.format(x.dims)) end
    if K > 65535 then return fail("%d channels: more than a grid's y extent", K) end
    info.K = K
    local Ri, _, Ri_c = extent(x.dims, ri)
    info.Ri = Ri
    info.V = vector_width(group, g, x, Ri_c)
    info.cap = sms.cap(E.SLICES_PER_SM, K)
  elseif not form:find("R") then
    return fail("reduces no axis")
  else
    return fail("the reduced axes of %s form %s (kept K, reduced R): at most a leading and a trailing block, or one block inside",
      shape.format(x.dims), form)
  end
  info.id = string.format("axisreduce:v%d:%s:%s:b%dv%d%s", E.version, a.attrs.mode, info.form, E.BLOCK, info.V,
    info.RS and string.format("s%d", info.RS) or "")
  return info
end

function E.propose(group, g, target)
  if target.sm < 80 then return nil, "needs sm_80 or later (max.NaN)" end
  local info, why = analyze(group, g)
  if not info then return nil, why end
  return { { id = info.id, knobs = { form = info.form }, rank = 1, info = info } }
end

local function build_strided(plan, group, g, symbol)
  local info, mode = plan.info, plan.info.mode
  local y = info.anchor.outputs.Y
  local B, V, U, RS = E.BLOCK, info.V, E.UNROLL, info.RS
  local LO = B // RS    -- lanes along the outputs
  local TW = LO * V     -- outputs a CTA
  local K = rowgen.kernel(g, symbol)
  K.src:need("common/nanmax.cuh")
  K:note_dyn(info.E)
  local comb = COMBINE[mode.comb]
  -- thread t: the V outputs from o (lane t % LO: adjacent lanes adjacent outputs), the rows
  -- s, s + RS, ... (s = t / LO)
  K:add("  const kiln_i64 n_out = %s * %s, R = %s, Ki = %s;", info.Ko, info.Ki, info.R, info.Ki)
  K:add("  const int s = threadIdx.x / %d, lane = threadIdx.x %% %d;", LO, LO)
  K:add("  const kiln_i64 o = (kiln_i64)blockIdx.x * %d + lane * %d;", TW, V)
  K:add("  float acc_[%d][%d];", U, V)
  K:add("#pragma unroll\n  for (int u = 0; u < %d; u++)\n#pragma unroll\n    for (int j = 0; j < %d; j++) acc_[u][j] = %s;", U, V, mode.init)
  K:add("  if (o < n_out) {")
  K:add("    const kiln_i64 ko = o / Ki, base = ko * R * Ki + (o - ko * Ki);")
  K:add("    kiln_i64 r = s;")
  K:add("    for (; r + %d < R; r += %d) {", (U - 1) * RS, U * RS)
  K:add("#pragma unroll\n      for (int u = 0; u < %d; u++) {", U)
  K:add("        const kiln_i64 e = base + (r + u * %d) * Ki;", RS)
  element(K, group, g, info, "e", "acc_[u][j]", "        ", V)
  K:add("      }")
  K:add("    }")
  K:add("    for (; r < R; r += %d) {", RS)
  K:add("      const kiln_i64 e = base + r * Ki;")
  element(K, group, g, info, "e", "acc_[0][j]", "      ", V)
  K:add("    }")
  K:add("  }")
  K:add("  // in a fixed order: each thread's accumulators, then the row splits in turn")
  K.shared[#K.shared + 1] = string.format("  __shared__ float red_[%d][%d];", RS, TW)
  K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) {", V)
  K:add("    float a = acc_[0][j];")
  K:add("#pragma unroll\n    for (int u = 1; u < %d; u++) { const float b = acc_[u][j]; %s }", U, comb({ "a" }, { "b" }))
  K:add("    red_[s][lane * %d + j] = a;", V)
  K:add("  }")
  K:add("  __syncthreads();")
  local st = pw.storage(K.src, g.by_uid[y].dtype)
  local fin = mode.fin and subst(mode.fin, { a = "a", n = "(float)R" }) or "a"
  K:add("  for (int i = threadIdx.x; i < %d; i += %d) {", TW, B)
  K:add("    const kiln_i64 q = (kiln_i64)blockIdx.x * %d + i;", TW)
  K:add("    if (q >= n_out) break;")
  K:add("    float a = red_[0][i];")
  K:add("    for (int k = 1; k < %d; k++) { const float b = red_[k][i]; %s }", RS, comb({ "a" }, { "b" }))
  K:add("    %s[q] = %s;", K:ptr(y, true), pw.fmt(st.store, fin))
  K:add("  }")
  local params = K:finish_params()
  K.src:add(rowgen.render_fill("axisreduce.cuh", {
    what = string.format("%s over the middle axes of %s: %d outputs a CTA, %d a thread, the rows split %d ways, %d rows in flight a thread",
      info.anchor.attrs.mode, shape.format(info.E), TW, V, RS, U),
    block = B, symbol = symbol, params = params, shared = table.concat(K.shared, "\n"), body = table.concat(K.lines, "\n"),
  }))
  return rowgen.columns_kernel(K, plan, E.id, symbol, info.Ko_f, info.Ki_f, TW, B, 0)
end

local function build_inner(plan, group, g, symbol)
  local info, mode = plan.info, plan.info.mode
  local B, V, U = E.BLOCK, info.V, E.UNROLL
  local K = rowgen.kernel(g, symbol)
  K.src:need("common/nanmax.cuh")
  K:note_dyn(info.E)
  local comb = COMBINE[mode.comb]({ "a" }, { "b" })
  -- the slice's rows as one run of vectors: thread t takes vectors t, t + B, ... (U in flight)
  K:add("  const kiln_i64 Ro = %s, Ri = %s, VR = Ri / %d, G = gridDim.x;", info.Ro, info.Ri, V)
  K:add("  const int k = blockIdx.y;")
  K:add("  const kiln_i64 n = (Ro - blockIdx.x + G - 1) / G * VR;  // the slice's vectors")
  K:add("  float acc_[%d];", U)
  K:add("#pragma unroll\n  for (int u = 0; u < %d; u++) acc_[u] = %s;", U, mode.init)
  K:add("  kiln_i64 f = threadIdx.x;")
  K:add("  for (; f + %d < n; f += %d) {", (U - 1) * B, U * B)
  K:add("#pragma unroll\n    for (int u = 0; u < %d; u++) {", U)
  K:add("      const kiln_i64 fu = f + u * %d, e = ((blockIdx.x + fu / VR * G) * %dLL + k) * Ri + fu %% VR * %d;", B, info.K, V)
  element(K, group, g, info, "e", "acc_[u]", "      ", V)
  K:add("    }")
  K:add("  }")
  K:add("  for (; f < n; f += %d) {", B)
  K:add("    const kiln_i64 e = ((blockIdx.x + f / VR * G) * %dLL + k) * Ri + f %% VR * %d;", info.K, V)
  element(K, group, g, info, "e", "acc_[0]", "    ", V)
  K:add("  }")
  K:add("  float a = acc_[0];")
  K:add("#pragma unroll\n  for (int u = 1; u < %d; u++) { const float b = acc_[u]; %s }", U, comb)
  K:add("  // the CTA's values in a fixed order: the warp's by butterflies, then the warps' in turn")
  K:add("#pragma unroll\n  for (int o_ = 16; o_ > 0; o_ >>= 1) { const float b = __shfl_xor_sync(0xffffffffu, a, o_); %s }", comb)
  local ws = K:workspace(0)
  if B > 32 then
    K.shared[#K.shared + 1] = string.format("  __shared__ float warps_[%d];", B // 32)
    K:add("  if ((threadIdx.x & 31) == 0) warps_[threadIdx.x >> 5] = a;")
    K:add("  __syncthreads();")
    K:add("  if (threadIdx.x == 0) {")
    K:add("    a = warps_[0];")
    K:add("    for (int w = 1; w < %d; w++) { const float b = warps_[w]; %s }", B // 32, comb)
    K:add("    %s[(kiln_i64)blockIdx.x * %d + k] = a;", ws, info.K)
    K:add("  }")
  else
    K:add("  if (threadIdx.x == 0) %s[(kiln_i64)blockIdx.x * %d + k] = a;", ws, info.K)
  end
  local params = K:finish_params()
  K.src:add(rowgen.render_fill("axisreduce.cuh", {
    what = string.format("%s over the leading and trailing axes of %s: a CTA of %d threads per channel and slice of rows, one partial per CTA into the workspace",
      info.anchor.attrs.mode, shape.format(info.E), B),
    block = B, symbol = symbol, params = params, shared = table.concat(K.shared, "\n"), body = table.concat(K.lines, "\n"),
  }))
  local main = {
    symbol = symbol, engine = E.id, plan_id = plan.id, source = K.src:text(), options = rowgen.OPTIONS,
    block = { B, 1, 1 }, grid = { sms.rule(info.Ro_f, 1, info.cap), info.K, 1 },
    smem = 0, cluster = { 1, 1, 1 }, params = K.mparams, align = K.align,
  }
  local final = rowgen.finalize(g, symbol .. "_final", plan.id .. ":final", E.id, {
    C = info.K, outs = { { uid = info.anchor.outputs.Y, first = 0, count = info.K } }, rows = info.Ro, dims = info.E,
    G = { div = 1, cap = info.cap }, comb = mode.comb, init = mode.init, fin = mode.fin,
    n = string.format("((float)%s * (float)%s)", info.Ro, info.Ri), what = info.anchor.attrs.mode .. " per channel",
  })
  return { kernels = { main, final }, workspace = rowgen.partials_workspace(info.Ro_f, info.cap, info.K) }
end

function E.build(plan, group, g, target, symbol)
  if plan.info.form == "strided" then return build_strided(plan, group, g, symbol) end
  return build_inner(plan, group, g, symbol)
end

return E
