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

-- The kernel body (lines into K) for analyze's info with the plan from M.plan.
function M.emit(K, info, g, st)
  if st.ptx then return rowbwd_ptx.emit(K, info, g, st) end
  local a, L = info.anchor, info.L
  local H, P, N, V, RPC, S = L.H, L.P, L.N, L.V, L.RPC, st.S
  local src = K.src
  local is_ln = a.op == "layernorm_backward"
  src:need("common/cp_async.cuh")
  local dy, x, w = g.by_uid[a.inputs.grad], g.by_uid[a.inputs.input], g.by_uid[a.inputs.scale]
  local sdy, sx, sw = pw.storage(src, dy.dtype), pw.storage(src, x.dtype), pw.storage(src, w.dtype)
  local zdy, zx = dtypes.size(dy.dtype), dtypes.size(x.dtype)
  local pdy, px, pwt = K:ptr(dy.uid), K:ptr(x.uid), K:ptr(w.uid)
  local dxu = a.outputs.DX
  local dxt = g.by_uid[dxu]
  local sdx = pw.storage(src, dxt.dtype)
  local pdx = K:ptr(dxu, true)
  for _, uid in ipairs({ dy.uid, x.uid }) do K:need_align(uid, 16) end
  K:need_align(w.uid, math.min(16, V * dtypes.size(w.dtype)))
  K:need_align(dxu, math.min(16, V * dtypes.size(dxt.dtype)))
  local function stat(port, row)
    local t = g.by_uid[a.inputs[port]]
    local s = pw.storage(src, t.dtype)
    local off = rowgen.per_row(t, info) and row
      or pw.offset_expr(t, info.E, string.format("(%s * %dLL)", row, H))
    return pw.fmt(s.load, string.format("%s[%s]", K:ptr(t.uid), off))
  end
  local guard = L.even and "" or string.format("if (c < %d) ", H)
  local nsums = #info.colsum
  local add = function(...) K:add(...) end
  -- bf16 rows read and written as 32-bit words of element pairs (pwexpr.regs): a quarter
  -- fewer instructions per element, measured faster at 4096 x 4096
  local rdy, rx = pw.regs(sdy, V), pw.regs(sx, V)

  add("  extern __shared__ __align__(16) kiln_u8 stg_[];  // [stage][slot][dy row, x row]")
  rowgen.pdl_entry(K)  -- the finalize kernel also takes SMs as this grid's CTAs free them
  add("  const int lane = %s;", RPC > 1 and string.format("threadIdx.x %% %d", P) or "threadIdx.x")
  add("  const int slot = %s;", RPC > 1 and string.format("threadIdx.x / %d", P) or "0")
  add("  const kiln_i64 rows_ = %s, nrb_ = (rows_ + %d) / %d;", info.rows, RPC - 1, RPC)
  add("  const kiln_u32 sb_ = kiln_smem_u32(stg_) + slot * %d;", st.rowb)
  add("  const kiln_u8 *sp_ = stg_ + slot * %d;", st.rowb)
  -- the thread's columns: scale in fp32, column sums
  add("  float w_[%d][%d];", N, V)
  add("  alignas(16) float cs_[%d][%d][%d];", math.max(nsums, 1), N, V)
  add("#pragma unroll")
  add("  for (int k = 0; k < %d; k++) {", N)
  add("    const int c = (lane + k * %d) * %d;", P, V)
  add("    alignas(16) %s t_[%d];", sw.ctype, V)
  add("#pragma unroll")
  add("    for (int j = 0; j < %d; j++) t_[j] = 0;", V)
  add("    %s{", guard)
  add(pw.vector_copy("t_", pwt .. " + c", sw.ctype, V, dtypes.size(w.dtype), "      "))
  add("    }")
  add("#pragma unroll")
  add("    for (int j = 0; j < %d; j++) {", V)
  add("      w_[k][j] = %s;", pw.fmt(sw.load, "t_[j]"))
  for i = 0, nsums - 1 do add("      cs_[%d][k][j] = 0.0f;", i) end
  add("    }")
  add("  }")
  -- issue the copies of row block `rb` into stage `b` (zero fill past the last row)
  local function issue(rb, b, indent)
    local ind = indent
    add("%s{ const kiln_i64 rb_i = %s, r_i = rb_i * %d + slot;", ind, rb, RPC)
    add("%s  const bool ok_ = rb_i < nrb_ && r_i < rows_;", ind)
    add("%s  const kiln_i64 rs_ = ok_ ? r_i : 0;", ind)
    add("%s  const kiln_u32 d_ = sb_ + (%s) * %d;", ind, b, st.stage)
    add("#pragma unroll")
    add("%s  for (int k = 0; k < %d; k++) {", ind, N)
    add("%s    const int c = (lane + k * %d) * %d;", ind, P, V)
    local cps = {}
    for _, t in ipairs({ { p = pdy, z = zdy, off = 0 }, { p = px, z = zx, off = H * zdy } }) do
      for q = 0, (V * t.z) // 16 - 1 do
        cps[#cps + 1] = string.format("kiln_cp_async16(d_ + %d + c * %d, reinterpret_cast<const kiln_u8 *>(%s + rs_ * %dLL + c) + %d, ok_ ? 16u : 0u);",
          t.off + q * 16, t.z, t.p, H, q * 16)
      end
    end
    add("%s    %s{ %s }", ind, guard, table.concat(cps, " "))
    add("%s  }", ind)
    add("%s  kiln_cp_async_commit(); }", ind)
  end
  add("#pragma unroll 1")
  add("  for (int s_ = 0; s_ < %d; s_++)", S - 1)
  issue("blockIdx.x + (kiln_i64)s_ * gridDim.x", "s_", "    ")
  -- the first row's statistics; later ones are loaded a row ahead
  local function stats_load(row, indent)
    local ms = is_ln and string.format("nm_ = %s; ", stat("mean", row)) or ""
    add("%sif (%s < rows_) { %snr_ = %s; }", indent, row, ms, stat("inv_variance", row))
  end
  add("  float nm_ = 0.0f, nr_ = 0.0f;")
  stats_load("(kiln_i64)blockIdx.x * " .. RPC .. " + slot", "  ")
  -- per-row reduction arrays, by row parity (P > 32): one barrier per row
  local vars = is_ln and { "a0", "a1" } or { "a1" }
  local W = P // 32
  if P > 32 then K.shared[#K.shared + 1] = string.format("  __shared__ float rd_[2][%d][%d];", #vars, L.block // 32) end
  add("  int buf_ = 0, par_ = 0;")
  add("  for (kiln_i64 rb_ = blockIdx.x; rb_ < nrb_; rb_ += gridDim.x) {")
  issue(string.format("rb_ + %dLL * gridDim.x", S - 1), string.format("buf_ == 0 ? %d : buf_ - 1", S - 1), "    ")
  add("    const kiln_i64 row = rb_ * %d + slot;", RPC)
  add("    const bool valid = row < rows_;")
  add("    const float mean_ = nm_, rstd_ = nr_;")
  stats_load(string.format("(row + (kiln_i64)gridDim.x * %d)", RPC), "    ")
  add("    kiln_cp_async_wait<%d>();", S - 1)
  add("    const kiln_u8 *cur_ = sp_ + buf_ * %d;", st.stage)
  -- one pass over the staged row: the element values in v_dy, v_x, xh_, gg_
  -- (held: xh_ and dy from the first pass's registers instead; hold_dy: keep dy there)
  local function pass(body_pre, body, post, held, hold_dy)
    add("#pragma unroll")
    add("    for (int k = 0; k < %d; k++) {", N)
    add("      const int c = (lane + k * %d) * %d;", P, V)
    add("      %s{", guard)
    if not held then
      add("        alignas(16) %s ty_[%d];", rdy.ctype, rdy.n)
      add("        alignas(16) %s tx_[%d];", rx.ctype, rx.n)
      add(pw.vector_copy("ty_", string.format("cur_ + c * %d", zdy), sdy.ctype, V, zdy, "        "))
      add(pw.vector_copy("tx_", string.format("cur_ + %d + c * %d", H * zdy, zx), sx.ctype, V, zx, "        "))
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
      add("          const float xh_ = %s * rstd_;", is_ln and "(x_ - mean_)" or "x_")
      add("          const float gg_ = dy_ * w_[k][j];")
    end
    body()
    add("        }")
    if post then post() end
    add("      }")
    add("    }")
  end
  local hold = st.hold
  local sums = {}
  for i, uid in ipairs(info.colsum) do sums[i] = uid == a.outputs.DSCALE and "xh_ * dy_" or "dy_" end
  -- the column sums need only this row's values: added in whichever pass reads the row last
  local function add_sums()
    if nsums == 0 then return end
    local acc = {}
    for i, e in ipairs(sums) do acc[#acc + 1] = string.format("cs_[%d][k][j] += %s;", i - 1, e) end
    add("          if (valid) { %s }", table.concat(acc, " "))
  end
  add("    float %s;", table.concat(vars, " = 0.0f, ") .. " = 0.0f")
  if hold then add("    float hx_[%d][%d]; %s hy_[%d][%d];", N, V, rdy.ctype, N, rdy.n) end
  pass(nil, function()
    if is_ln then add("          a0 += gg_;") end
    add("          a1 = fmaf(gg_, xh_, a1);")
    if hold then
      add_sums()
      add("          hx_[k][j] = xh_;")
    end
  end, nil, false, hold)
  -- the row's sums: warp butterflies, then the row's warps in order through shared memory
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
    add(RPC > 1 and string.format('    asm volatile("bar.sync %%0, %d;" :: "r"(1 + slot) : "memory");', P) or "    __syncthreads();")
    add("    { const int w0_ = slot * %d; %s", W, table.concat(ldv, " "))
    add("#pragma unroll")
    add("      for (int w_ = 1; w_ < %d; w_++) { %s } }", W, table.concat(addv, " "))
  end
  add("    const float c1_ = %s, c2_ = a1 * (1.0f / %d);", is_ln and string.format("a0 * (1.0f / %d)", H) or "0.0f", H)
  local odx = pw.out_regs(sdx, V, "o_")
  pass(function()
    add("        %s", odx.decl)
  end, function()
    local dx = string.format("rstd_ * (gg_ - %sxh_ * c2_)", is_ln and "c1_ - " or "")
    add("          %s", odx.set(dx))
    if not hold then add_sums() end
  end, function()
    if odx.pack then
      add("#pragma unroll")
      add("        %s", odx.pack)
    end
    add("        if (valid)")
    add(pw.vector_copy(string.format("%s + row * %dLL + c", pdx, H), "o_", sdx.ctype, V, dtypes.size(dxt.dtype), "          "))
  end, hold)
  add("    buf_ = buf_ == %d ? 0 : buf_ + 1;", S - 1)
  add("    par_ ^= 1;")
  add("  }")
  add("  kiln_cp_async_wait<0>();")
  -- this CTA's partial row ws[blockIdx.x][nsums * H]: the slots' sums in slot order
  if nsums > 0 then
    local ws = K:workspace(0)
    local ncols = nsums * H
    if RPC == 1 then
      add("#pragma unroll")
      add("  for (int k = 0; k < %d; k++) {", N)
      add("    const int c = (lane + k * %d) * %d;", P, V)
      add("    %s{", guard)
      for i = 0, nsums - 1 do
        add(pw.vector_copy(string.format("%s + (kiln_i64)blockIdx.x * %d + %d + c", ws, ncols, i * H), string.format("cs_[%d][k]", i),
          "float", V, 4, "      "))
      end
      add("    }")
      add("  }")
    else
      add("  __syncthreads();  // the stages are free: the slots' sums go there")
      add("  float *acc_ = reinterpret_cast<float *>(stg_);  // [sum][slot][column]")
      add("#pragma unroll")
      add("  for (int k = 0; k < %d; k++) {", N)
      add("    const int c = (lane + k * %d) * %d;", P, V)
      add("    %s{", guard)
      for i = 0, nsums - 1 do
        add(pw.vector_copy(string.format("acc_ + (%d + slot) * %d + c", i * RPC, H), string.format("cs_[%d][k]", i), "float", V, 4, "      "))
      end
      add("    }")
      add("  }")
      add("  __syncthreads();")
      add("#pragma unroll 1  // once per CTA: unrolled, it cost 8 ms of NVRTC time and gained nothing")
      add("  for (int i = threadIdx.x; i < %d; i += %d) {", ncols, L.block)
      add("    const int s_ = i / %d, col = i - s_ * %d;", H, H)
      add("    float t_ = acc_[s_ * %d + col];", RPC * H)
      add("    for (int sl = 1; sl < %d; sl++) t_ += acc_[(s_ * %d + sl) * %d + col];", RPC, RPC, H)
      add("    %s[(kiln_i64)blockIdx.x * %d + i] = t_;", ws, ncols)
      add("  }")
    end
  end
end

return M
