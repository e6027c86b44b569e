-- kiln.engines.rowbwd: the staged kernel of rmsnorm_backward / layernorm_backward
-- (docs/MEMORY_BOUND.md). Persistent CTAs; each thread copies its own 16-byte chunks of dy
-- and x for rows ahead into a ring of S shared-memory stages with cp.async (no barrier: a
-- thread reads back only what it copied), keeps its columns' scale and dscale/dbias sums in
-- registers (its columns are the same in every row), and per row does one reduction (one
-- barrier when P > 32, parity-buffered) and the dx pass. At the end the CTA's slots add in slot
-- order into one partial row of the workspace, which the `_final` kernel adds in a fixed order.
-- The bwd setting picks the variant: docs/MEMORY_BOUND.md lists them.
local settings = require "kiln.settings"
local shape = require "kiln.shape"
local dtypes = require "kiln.dtypes"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local rowbwd_ptx = require "kiln.engines.rowbwd_ptx"
local sms = require "kiln.engines.sms"

local M = {}

-- Named variants: stages in the ring and CTAs per SM (`legacy`: the shared-memory column
-- sums kernel, row.lua's generic passes). `reread`: as async, but the dx pass always reads
-- the staged row again (for measuring the rule below).
M.NAMED = { async = { S = 3, C = 1 }, deep = { S = 4, C = 1 }, twocta = { S = 2, C = 2 },
            reread = { S = 3, C = 1, reread = true } }
M.DEFAULT = "async"
-- Column sums a thread keeps in registers at most (nsums * N * V floats); over a cluster (2
-- CTAs of 256 threads an SM, 128 registers) twice that: layernorm_backward's two sums of 4
-- vectors a thread measured 1.10x its 2 vectors (in 512 threads, spilling) at 4096 x 65536.
M.MAX_SUMS = 32
M.MAX_SUMS_CLUSTER = 64
-- The dx pass takes xh (fp32) and dy (as loaded) held in registers from the reduction's pass,
-- instead of reading the staged row again, when the thread's long-lived registers (scale, column
-- sums, held values) stay within this many words. On an H200 (graph timing):
-- rmsnorm_backward (56 words at N x V = 16) 7% faster at 32768 x 2048, the same at
-- 16384 x 8192, 2% slower at 4096 x 4096; layernorm_backward (72 words: 128 registers and a
-- spill) 8% slower at 16384 x 8192, so it reads the row again.
M.MAX_HELD_WORDS = 64

-- A named variant as M.mode gives it.
function M.named_mode(name)
  local m = M.NAMED[name]
  return { S = m.S, C = m.C, reread = m.reread, name = name }
end

-- The bwd setting (kiln.settings): auto (M.DEFAULT), a named variant, legacy, split, or sNcM.
-- An sNcM value's stages and CTAs per SM (stages 2-8, CTAs 1-2), or nil.
local function stages_ctas(v)
  local s, n = v:match("^s(%d)c(%d)$")
  s, n = tonumber(s), tonumber(n)
  if s and n and s >= 2 and s <= 8 and n >= 1 and n <= 2 then return s, n end
end

M.SETTING = { "auto", "legacy", "split", "async", "deep", "twocta", "reread",
              valid = function(v) return stages_ctas(v) ~= nil end,
              want = "auto, legacy, split, async, deep, twocta, reread or sNcM (stages 2-8, CTAs per SM 1-2)" }

-- The variant the bwd setting asks for: { legacy = true } or { S =, C =, name = }.
function M.mode()
  local v = settings.get("bwd")
  local default = v == "auto"
  if default then v = M.DEFAULT end
  if v == "legacy" then return { legacy = true, name = v } end
  if v == "split" then return { legacy = true, split = true, name = v } end
  if M.NAMED[v] then
    local m = M.named_mode(v)
    m.default = default
    return m
  end
  local s, n = stages_ctas(v)
  return { S = s, C = n, name = v }
end

-- Whether the staged kernel takes this backward (analyze's info, layout L; `mode` a variant
-- as M.mode gives, default the bwd setting's): the sizes it needs, or nil and why (then the
-- legacy kernel builds it).
function M.plan(info, group, g, L, SMEM_MAX, MIN_ROWS, mode)
  mode = mode or M.mode()
  if mode.legacy then return nil, "bwd setting " .. mode.name end
  local a = info.anchor
  if #(group.prologue or {}) + #(group.epilogue or {}) + #(group.amax or {}) > 0 then
    return nil, "fused pointwise ops"
  end
  local dy, x = g.by_uid[a.inputs.grad], g.by_uid[a.inputs.input]
  for _, t in ipairs({ dy, x }) do
    if info.access[t.uid] ~= "full" then return nil, t.name .. " is not row-major over the element space" end
    if (L.V * dtypes.size(t.dtype)) % 16 ~= 0 then return nil, "vectors narrower than 16 bytes" end
  end
  for uid, k in pairs(info.out_kind) do
    if k ~= "colsum" and not (uid == a.outputs.DX and k == "elem") then return nil, "outputs beyond dx, dscale, dbias" end
  end
  if L.block > 512 then return nil, "more than 512 threads per row" end
  if #info.colsum * L.N * L.V > (L.CL and M.MAX_SUMS_CLUSTER or M.MAX_SUMS) then return nil, "too many column sums per thread for registers" end
  local rowb = (L.HC or L.H) * (dtypes.size(dy.dtype) + dtypes.size(x.dtype))  -- a CTA's part of a row (cluster)
  local stage = L.RPC * rowb
  local S = math.min(mode.S, SMEM_MAX // stage)
  if S < 2 then return nil, "two stages do not fit in shared memory" end
  local smem = S * stage
  if L.RPC > 1 then smem = math.max(smem, L.RPC * #info.colsum * L.H * 4) end
  smem = rowgen.dynamic_smem(smem)
  local per_sm = math.min(mode.C, 2048 // L.block, math.max(1, (227 * 1024) // smem))
  -- words per thread: scale and sums (fp32), xh (fp32) and dy (its storage) held between passes
  local held = L.N * L.V * (2 + #info.colsum) + (L.N * L.V * dtypes.size(dy.dtype) + 3) // 4
  local st = { S = S, stage = stage, rowb = rowb, smem = smem, per_sm = per_sm, cap = sms.cap(per_sm),
              grid_div = L.RPC * MIN_ROWS, name = mode.name, hold = not mode.reread and held <= M.MAX_HELD_WORDS }
  -- the body in PTX (rowbwd_ptx.lua) unless the code setting is cuda or that form declines
  if rowgen.ptx_wanted() then st.ptx, st.why_cuda = rowbwd_ptx.accepts(info, g, L, st) end
  return st
end

-- The emission's shared state E (M.emit's): the plan st, the layout's sizes (P: threads a
-- row), the tensors with their storage and pointers, the guard of a thread's vector in the row.
local function state(K, info, g, st)
  local a, L = info.anchor, info.L
  local E = { K = K, info = info, g = g, st = st, a = a, L = L,
              H = L.H, P = L.P, N = L.N, V = L.V, RPC = L.RPC, S = st.S, src = K.src,
              is_ln = a.op == "layernorm_backward" }
  local src, V = K.src, L.V
  src:need("common/cp_async.cuh")
  E.dy, E.x, E.w = g.by_uid[a.inputs.grad], g.by_uid[a.inputs.input], g.by_uid[a.inputs.scale]
  E.sdy, E.sx, E.sw = pw.storage(src, E.dy.dtype), pw.storage(src, E.x.dtype), pw.storage(src, E.w.dtype)
  E.zdy, E.zx = dtypes.size(E.dy.dtype), dtypes.size(E.x.dtype)
  E.pdy, E.px, E.pwt = K:ptr(E.dy.uid), K:ptr(E.x.uid), K:ptr(E.w.uid)
  E.dxt = g.by_uid[a.outputs.DX]
  E.sdx = pw.storage(src, E.dxt.dtype)
  E.pdx = K:ptr(a.outputs.DX, true)
  for _, uid in ipairs({ E.dy.uid, E.x.uid }) do K:need_align(uid, 16) end
  K:need_align(E.w.uid, math.min(16, V * dtypes.size(E.w.dtype)))
  K:need_align(a.outputs.DX, math.min(16, V * dtypes.size(E.dxt.dtype)))
  E.guard = L.even and "" or string.format("if (c < %d) ", L.H)
  E.nsums = #info.colsum
  E.add = function(...) K:add(...) end
  -- bf16 rows read and written as 32-bit words of element pairs (pwexpr.regs): a quarter
  -- fewer instructions per element, measured faster at 4096 x 4096
  E.rdy, E.rx = pw.regs(E.sdy, V), pw.regs(E.sx, V)
  -- the row's reduction variables
  E.vars = E.is_ln and { "a0", "a1" } or { "a1" }
  return E
end

-- The load of statistic `port` of row `row` (an expression).
local function stat(E, port, row)
  local t = E.g.by_uid[E.a.inputs[port]]
  local s = pw.storage(E.src, t.dtype)
  local off = rowgen.per_row(t, E.info) and row
    or pw.offset_expr(t, E.info.E, string.format("(%s * %dLL)", row, E.H))
  return pw.fmt(s.load, string.format("%s[%s]", E.K:ptr(t.uid), off))
end

-- The stages, the thread's place and its columns: scale in fp32, column sums (zero).
local function prologue(E)
  local add, P, N, V, RPC = E.add, E.P, E.N, E.V, E.RPC
  add("  extern __shared__ __align__(16) kiln_u8 stg_[];  // [stage][slot][dy row, x row]")
  rowgen.pdl_entry(E.K)  -- the finalize kernel also takes SMs as this grid's CTAs free them
  add("  const int lane = %s;", RPC > 1 and string.format("threadIdx.x %% %d", P) or "threadIdx.x")
  add("  const int slot = %s;", RPC > 1 and string.format("threadIdx.x / %d", P) or "0")
  add("  const kiln_i64 rows_ = %s, nrb_ = (rows_ + %d) / %d;", E.info.rows, RPC - 1, RPC)
  add("  const kiln_u32 sb_ = kiln_smem_u32(stg_) + slot * %d;", E.st.rowb)
  add("  const kiln_u8 *sp_ = stg_ + slot * %d;", E.st.rowb)
  -- the thread's columns: scale in fp32, column sums
  add("  float w_[%d][%d];", N, V)
  add("  alignas(16) float cs_[%d][%d][%d];", math.max(E.nsums, 1), N, V)
  add("#pragma unroll")
  add("  for (int k = 0; k < %d; k++) {", N)
  add("    const int c = (lane + k * %d) * %d;", P, V)
  add("    alignas(16) %s t_[%d];", E.sw.ctype, V)
  add("#pragma unroll")
  add("    for (int j = 0; j < %d; j++) t_[j] = 0;", V)
  add("    %s{", E.guard)
  add(pw.vector_copy("t_", E.pwt .. " + c", E.sw.ctype, V, dtypes.size(E.w.dtype), "      "))
  add("    }")
  add("#pragma unroll")
  add("    for (int j = 0; j < %d; j++) {", V)
  add("      w_[k][j] = %s;", pw.fmt(E.sw.load, "t_[j]"))
  for i = 0, E.nsums - 1 do add("      cs_[%d][k][j] = 0.0f;", i) end
  add("    }")
  add("  }")
end

-- Issue the copies of row block `rb` into stage `b` (zero fill past the last row).
local function issue(E, rb, b, indent)
  local add, H, P, V, RPC = E.add, E.H, E.P, E.V, E.RPC
  local ind = indent
  add("%s{ const kiln_i64 rb_i = %s, r_i = rb_i * %d + slot;", ind, rb, RPC)
  add("%s  const bool ok_ = rb_i < nrb_ && r_i < rows_;", ind)
  add("%s  const kiln_i64 rs_ = ok_ ? r_i : 0;", ind)
  add("%s  const kiln_u32 d_ = sb_ + (%s) * %d;", ind, b, E.st.stage)
  add("#pragma unroll")
  add("%s  for (int k = 0; k < %d; k++) {", ind, E.N)
  add("%s    const int c = (lane + k * %d) * %d;", ind, P, V)
  local cps = {}
  for _, t in ipairs({ { p = E.pdy, z = E.zdy, off = 0 }, { p = E.px, z = E.zx, off = H * E.zdy } }) do
    for q = 0, (V * t.z) // 16 - 1 do
      cps[#cps + 1] = string.format("kiln_cp_async16(d_ + %d + c * %d, reinterpret_cast<const kiln_u8 *>(%s + rs_ * %dLL + c) + %d, ok_ ? 16u : 0u);",
        t.off + q * 16, t.z, t.p, H, q * 16)
    end
  end
  add("%s    %s{ %s }", ind, E.guard, table.concat(cps, " "))
  add("%s  }", ind)
  add("%s  kiln_cp_async_commit(); }", ind)
end

-- The statistics of row `row` (an expression) into nm_, nr_.
local function stats_load(E, row, indent)
  local ms = E.is_ln and string.format("nm_ = %s; ", stat(E, "mean", row)) or ""
  E.add("%sif (%s < rows_) { %snr_ = %s; }", indent, row, ms, stat(E, "inv_variance", row))
end

-- The ring's first stages, the first row's statistics (later ones are loaded a row ahead) and
-- the row loop up to its staged row (cur_).
local function open_loop(E)
  local add, K, P, RPC, S = E.add, E.K, E.P, E.RPC, E.S
  add("#pragma unroll 1")
  add("  for (int s_ = 0; s_ < %d; s_++)", S - 1)
  issue(E, "blockIdx.x + (kiln_i64)s_ * gridDim.x", "s_", "    ")
  add("  float nm_ = 0.0f, nr_ = 0.0f;")
  stats_load(E, "(kiln_i64)blockIdx.x * " .. RPC .. " + slot", "  ")
  -- per-row reduction arrays, by row parity (P > 32): one barrier per row
  if P > 32 then K.shared[#K.shared + 1] = string.format("  __shared__ float rd_[2][%d][%d];", #E.vars, E.L.block // 32) end
  add("  int buf_ = 0, par_ = 0;")
  add("  for (kiln_i64 rb_ = blockIdx.x; rb_ < nrb_; rb_ += gridDim.x) {")
  issue(E, string.format("rb_ + %dLL * gridDim.x", S - 1), string.format("buf_ == 0 ? %d : buf_ - 1", S - 1), "    ")
  add("    const kiln_i64 row = rb_ * %d + slot;", RPC)
  add("    const bool valid = row < rows_;")
  add("    const float mean_ = nm_, rstd_ = nr_;")
  stats_load(E, string.format("(row + (kiln_i64)gridDim.x * %d)", RPC), "    ")
  add("    kiln_cp_async_wait<%d>();", S - 1)
  add("    const kiln_u8 *cur_ = sp_ + buf_ * %d;", E.st.stage)
end

-- One pass over the staged row: the element values in v_dy, v_x, xh_, gg_
-- (held: xh_ and dy from the first pass's registers instead; hold_dy: keep dy there)
local function pass(E, body_pre, body, post, held, hold_dy)
  local add, rdy, rx, V, zdy = E.add, E.rdy, E.rx, E.V, E.zdy
  add("#pragma unroll")
  add("    for (int k = 0; k < %d; k++) {", E.N)
  add("      const int c = (lane + k * %d) * %d;", E.P, V)
  add("      %s{", E.guard)
  if not held then
    add("        alignas(16) %s ty_[%d];", rdy.ctype, rdy.n)
    add("        alignas(16) %s tx_[%d];", rx.ctype, rx.n)
    add(pw.vector_copy("ty_", string.format("cur_ + c * %d", zdy), E.sdy.ctype, V, zdy, "        "))
    add(pw.vector_copy("tx_", string.format("cur_ + %d + c * %d", E.H * zdy, E.zx), E.sx.ctype, V, E.zx, "        "))
  end
  if body_pre then body_pre() end
  if hold_dy then
    add("#pragma unroll")
    add("        for (int i = 0; i < %d; i++) hy_[k][i] = ty_[i];", rdy.n)
  end
  add("#pragma unroll")
  add("        for (int j = 0; j < %d; j++) {", V)
  if held then
    add("          const float xh_ = hx_[k][j], gg_ = %s * w_[k][j];", rdy.read("hy_[k]"))
  else
    add("          const float dy_ = %s, x_ = %s;", rdy.read("ty_"), rx.read("tx_"))
    add("          const float xh_ = %s * rstd_;", E.is_ln and "(x_ - mean_)" or "x_")
    add("          const float gg_ = dy_ * w_[k][j];")
  end
  body()
  add("        }")
  if post then post() end
  add("      }")
  add("    }")
end

-- The column sums need only this row's values: added in whichever pass reads the row last.
local function add_sums(E)
  if E.nsums == 0 then return end
  local acc = {}
  for i, uid in ipairs(E.info.colsum) do
    acc[#acc + 1] = string.format("cs_[%d][k][j] += %s;", i - 1, uid == E.a.outputs.DSCALE and "xh_ * dy_" or "dy_")
  end
  E.add("          if (valid) { %s }", table.concat(acc, " "))
end

-- Pass 1: the thread's part of the row's sums (held: xh_ and dy kept for the dx pass).
local function row_sums(E)
  local add, hold, N, V = E.add, E.st.hold, E.N, E.V
  add("    float %s;", table.concat(E.vars, " = 0.0f, ") .. " = 0.0f")
  if hold then add("    float hx_[%d][%d]; %s hy_[%d][%d];", N, V, E.rdy.ctype, N, E.rdy.n) end
  pass(E, nil, function()
    if E.is_ln then add("          a0 += gg_;") end
    add("          a1 = fmaf(gg_, xh_, a1);")
    if hold then
      add_sums(E)
      add("          hx_[k][j] = xh_;")
    end
  end, nil, false, hold)
end

-- The row's sums: warp butterflies, then the row's warps in order through shared memory; then
-- the coefficients c1_, c2_.
local function reduce_row(E)
  local add, P, H, vars = E.add, E.P, E.H, E.vars
  local W = P // 32
  local sh = {}
  for _, v in ipairs(vars) do sh[#sh + 1] = string.format("%s += __shfl_xor_sync(0xffffffffu, %s, o_);", v, v) end
  add("#pragma unroll")
  add("    for (int o_ = %d; o_ > 0; o_ >>= 1) { %s }", math.min(P, 32) // 2, table.concat(sh, " "))
  if P > 32 then
    local stv, ldv, addv = {}, {}, {}
    for i, v in ipairs(vars) do
      stv[#stv + 1] = string.format("rd_[par_][%d][threadIdx.x >> 5] = %s;", i - 1, v)
      ldv[#ldv + 1] = string.format("%s = rd_[par_][%d][w0_];", v, i - 1)
      addv[#addv + 1] = string.format("%s += rd_[par_][%d][w0_ + w_];", v, i - 1)
    end
    add("    if ((threadIdx.x & 31) == 0) { %s }", table.concat(stv, " "))
    -- the slots meet at their own barriers (1 + slot), so one slot's row can wait on memory
    -- while another computes
    add(E.RPC > 1 and string.format('    asm volatile("bar.sync %%0, %d;" :: "r"(1 + slot) : "memory");', P) or "    __syncthreads();")
    add("    { const int w0_ = slot * %d; %s", W, table.concat(ldv, " "))
    add("#pragma unroll")
    add("      for (int w_ = 1; w_ < %d; w_++) { %s } }", W, table.concat(addv, " "))
  end
  add("    const float c1_ = %s, c2_ = a1 * (1.0f / %d);", E.is_ln and string.format("a0 * (1.0f / %d)", H) or "0.0f", H)
end

-- Pass 2: dx, stored when the row exists (the column sums here unless pass 1 held the row).
local function dx_pass(E)
  local add, hold = E.add, E.st.hold
  local odx = pw.out_regs(E.sdx, E.V, "o_")
  pass(E, function()
    add("        %s", odx.decl)
  end, function()
    local dx = string.format("rstd_ * (gg_ - %sxh_ * c2_)", E.is_ln and "c1_ - " or "")
    add("          %s", odx.set(dx))
    if not hold then add_sums(E) end
  end, function()
    if odx.pack then
      add("#pragma unroll")
      add("        %s", odx.pack)
    end
    add("        if (valid)")
    add(pw.vector_copy(string.format("%s + row * %dLL + c", E.pdx, E.H), "o_", E.sdx.ctype, E.V, dtypes.size(E.dxt.dtype), "          "))
  end, hold)
end

-- A CTA of one slot: its column sums straight into its partial row of ws (ncols columns).
local function store_sums(E, ws, ncols)
  local add = E.add
  add("#pragma unroll")
  add("  for (int k = 0; k < %d; k++) {", E.N)
  add("    const int c = (lane + k * %d) * %d;", E.P, E.V)
  add("    %s{", E.guard)
  for i = 0, E.nsums - 1 do
    add(pw.vector_copy(string.format("%s + (kiln_i64)blockIdx.x * %d + %d + c", ws, ncols, i * E.H), string.format("cs_[%d][k]", i),
      "float", E.V, 4, "      "))
  end
  add("    }")
  add("  }")
end

-- A CTA of several slots: their column sums through the free stages, then each column's
-- slots added in order into the partial row of ws (ncols columns).
local function combine_slots(E, ws, ncols)
  local add, H, RPC = E.add, E.H, E.RPC
  add("  __syncthreads();  // the stages are free: the slots' sums go there")
  add("  float *acc_ = reinterpret_cast<float *>(stg_);  // [sum][slot][column]")
  add("#pragma unroll")
  add("  for (int k = 0; k < %d; k++) {", E.N)
  add("    const int c = (lane + k * %d) * %d;", E.P, E.V)
  add("    %s{", E.guard)
  for i = 0, E.nsums - 1 do
    add(pw.vector_copy(string.format("acc_ + (%d + slot) * %d + c", i * RPC, H), string.format("cs_[%d][k]", i), "float", E.V, 4, "      "))
  end
  add("    }")
  add("  }")
  add("  __syncthreads();")
  add("#pragma unroll 1  // once per CTA: unrolled, it cost 8 ms of NVRTC time and gained nothing")
  add("  for (int i = threadIdx.x; i < %d; i += %d) {", ncols, E.L.block)
  add("    const int s_ = i / %d, col = i - s_ * %d;", H, H)
  add("    float t_ = acc_[s_ * %d + col];", RPC * H)
  add("    for (int sl = 1; sl < %d; sl++) t_ += acc_[(s_ * %d + sl) * %d + col];", RPC, RPC, H)
  add("    %s[(kiln_i64)blockIdx.x * %d + i] = t_;", ws, ncols)
  add("  }")
end

-- This CTA's partial row ws[blockIdx.x][nsums * H]: the slots' sums in slot order.
local function partial_row(E)
  if E.nsums == 0 then return end
  local ws = E.K:workspace(0)
  local ncols = E.nsums * E.H
  if E.RPC == 1 then store_sums(E, ws, ncols) else combine_slots(E, ws, ncols) end
end

-- The kernel body (lines into K) for analyze's info with the plan from M.plan.
function M.emit(K, info, g, st)
  if st.ptx then return rowbwd_ptx.emit(K, info, g, st) end
  local E = state(K, info, g, st)
  prologue(E)
  open_loop(E)
  row_sums(E)
  reduce_row(E)
  dx_pass(E)
  E.add("    buf_ = buf_ == %d ? 0 : buf_ + 1;", E.S - 1)
  E.add("    par_ ^= 1;")
  E.add("  }")
  E.add("  kiln_cp_async_wait<0>();")
  partial_row(E)
end

return M
