-- kiln.engines.rowbwd_colsum: the split backward norm, for rows too wide for the one-kernel
-- forms (a CTA's sums of every column fit neither registers nor shared memory). Three
-- kernels, each streaming its rows once:
--   1. row.lua's row kernel reads dy, x and the scale and keeps only the row's two sums
--      (c1 = mean(dy * w), c2 = mean(dy * w * xh)), written to the workspace;
--   2. this file's kernel, column-tiled: CTA (g, t) takes the columns of tile t of rows g,
--      g + G, ...; each thread owns V columns (its scale loaded once), writes dx of them and
--      adds dscale / dbias in registers, so nothing combines inside the CTA; at the end it
--      writes its sums to the partial row ws[g][sum * H + column];
--   3. the finalize kernel adds the G partial rows in a fixed order (G from T alone:
--      deterministic).
-- dy and x are read twice (10 bytes an element in bf16 against 6), and no pass depends on
-- a row staying in L2.
local dtypes = require "kiln.dtypes"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local sms = require "kiln.engines.sms"

local M = {}

M.BLOCK = 256
M.PER_SM = 8         -- CTAs that fill an SM (8 of 256 threads)
M.MIN_ROWS = 16      -- rows each CTA takes at least

-- Whether the split form can take the group: dy and x row-major, the statistics one fp32
-- value per row or gathered, the scale one row, and its outputs written as they are (no op
-- fused after them: the dx kernel stores dx itself).
function M.accepts(info, g)
  local a = info.anchor
  for port, uid in pairs(a.outputs) do
    if g.by_uid[uid].role == "virtual" then
      return false, string.format("%s feeds ops fused after the norm (the split form stores it as it is)", port)
    end
  end
  for _, port in ipairs({ "grad", "input" }) do
    local t = g.by_uid[a.inputs[port]]
    if info.access[t.uid] ~= "full" then return false, t.name .. " is not row-major over the element space" end
  end
  return true
end

-- The grid: G row chunks by column tiles (G depends on T and the device's SMs only).
function M.grid(info)
  local H, V = info.L.H, info.L.V
  local tiles = (H + M.BLOCK * V - 1) // (M.BLOCK * V)
  return { tiles = tiles, div = M.MIN_ROWS, cap = sms.cap(M.PER_SM, tiles) }
end

-- The workspace: the partial rows (G at most, on the largest device), then the row sums
-- (two floats a row).
function M.rows_offset(info)
  return sms.at(M.grid(info).cap, sms.MAX) * #info.colsum * info.L.H * 4
end
function M.workspace(info)
  return { rule = { mul = rowgen.with_const(info.row_factors, 8), div = 1, max = 0, add = M.rows_offset(info) },
           bytes_max = nil }
end

-- Kernel 2 (a plan kernel table): dx, and the sums of dy * xh (dscale) and dy (dbias) per column.
function M.build(info, g, symbol, plan_id, engine_id)
  local a, H, V = info.anchor, info.L.H, info.L.V
  local gr = M.grid(info)
  local K = rowgen.kernel(g, symbol)
  local src = K.src
  K:note_dyn(info.E)
  local dy, x, w = g.by_uid[a.inputs.grad], g.by_uid[a.inputs.input], g.by_uid[a.inputs.scale]
  local dxt = g.by_uid[a.outputs.DX]
  local pdy, px, pwt = K:ptr(dy.uid), K:ptr(x.uid), K:ptr(w.uid)
  local function stat(port)
    local t = g.by_uid[a.inputs[port]]
    local off = rowgen.per_row(t, info) and "row" or pw.offset_expr(t, info.E, string.format("(row * %dLL)", H))
    return pw.fmt(pw.storage(src, t.dtype).load, string.format("%s[%s]", K:ptr(t.uid), off))
  end
  local mean = a.inputs.mean and stat("mean")
  local rstd = stat("inv_variance")
  local pdx = K:ptr(dxt.uid, true)
  local ws = K:workspace(0)
  local rsum = K:workspace(M.rows_offset(info), "rsum")
  local sdy, sx, sw, sdx = pw.storage(src, dy.dtype), pw.storage(src, x.dtype), pw.storage(src, w.dtype), pw.storage(src, dxt.dtype)
  for _, t in ipairs({ dy, x, w, dxt }) do K:need_align(t.uid, math.min(16, V * dtypes.size(t.dtype))) end
  local ncols = #info.colsum * H
  local is_ln = a.op == "layernorm_backward"
  local add = function(...) K:add(...) end
  add("  const int c = (blockIdx.y * %d + threadIdx.x) * %d;  // this thread's first column", M.BLOCK, V)
  add("  if (c >= %d) return;", H)
  add("  alignas(16) %s wr_[%d];", sw.ctype, V)
  add(pw.vector_copy("wr_", string.format("%s + c", pwt), sw.ctype, V, dtypes.size(w.dtype)))
  add("  float w_[%d];", V)
  add("#pragma unroll\n  for (int j = 0; j < %d; j++) w_[j] = %s;", V, pw.fmt(sw.load, "wr_[j]"))
  for i in ipairs(info.colsum) do add("  float s%d_[%d] = {};", i - 1, V) end
  add("  const float2 *rs_ = reinterpret_cast<const float2 *>(%s);", rsum)
  -- rows in flight: 4 for one sum, 2 for two (on an H200 at 4096 x 65536: rmsnorm 3% faster
  -- at 4, layernorm level; layernorm at 4 compiles in 65 ms, at 2 in 50)
  add("#pragma unroll %d  // one vector per thread per row", #info.colsum > 1 and 2 or 4)
  add("  for (kiln_i64 row = blockIdx.x; row < %s; row += gridDim.x) {", info.rows)
  if mean then add("    const float mean = %s;", mean) end
  add("    const float rstd = %s;", rstd)
  add("    const float2 cs_ = rs_[row];  // the row's sums: mean(dy w), mean(dy w xh)")
  add("    alignas(16) %s dyr_[%d];", sdy.ctype, V)
  add("    alignas(16) %s xr_[%d];", sx.ctype, V)
  add("    alignas(16) %s dxr_[%d];", sdx.ctype, V)
  add(pw.vector_copy("dyr_", string.format("%s + row * %dLL + c", pdy, H), sdy.ctype, V, dtypes.size(dy.dtype), "    "))
  add(pw.vector_copy("xr_", string.format("%s + row * %dLL + c", px, H), sx.ctype, V, dtypes.size(x.dtype), "    "))
  add("#pragma unroll")
  add("    for (int j = 0; j < %d; j++) {", V)
  add("      const float d_ = %s;", pw.fmt(sdy.load, "dyr_[j]"))
  add("      const float xh_ = %s * rstd;", mean and string.format("(%s - mean)", pw.fmt(sx.load, "xr_[j]")) or pw.fmt(sx.load, "xr_[j]"))
  add("      const float gg_ = d_ * w_[j];")
  add("      dxr_[j] = %s;", pw.fmt(sdx.store, string.format("rstd * (gg_ - %sxh_ * cs_.y)", is_ln and "cs_.x - " or "")))
  for i, uid in ipairs(info.colsum) do
    add(uid == a.outputs.DSCALE and "      s%d_[j] = fmaf(d_, xh_, s%d_[j]);" or "      s%d_[j] += d_;", i - 1, i - 1)
  end
  add("    }")
  add(pw.vector_copy(string.format("%s + row * %dLL + c", pdx, H), "dxr_", sdx.ctype, V, dtypes.size(dxt.dtype), "    "))
  add("  }")
  for i in ipairs(info.colsum) do
    add("#pragma unroll\n  for (int j = 0; j < %d; j++) %s[(kiln_i64)blockIdx.x * %d + %d + c + j] = s%d_[j];", V, ws, ncols, (i - 1) * H, i - 1)
  end
  local params = K:finish_params()
  src:add(rowgen.render_fill("colreduce.cuh", {
    what = string.format("%s's dx and column sums over row chunks (the row sums from the row kernel), %d tiles of %d columns, " ..
      "%d threads, %d-wide vectors of %s", a.op, gr.tiles, M.BLOCK * V, M.BLOCK, V, dy.dtype),
    block = M.BLOCK, symbol = symbol, params = params, shared = table.concat(K.shared, "\n"), body = table.concat(K.lines, "\n"),
  }))
  return {
    symbol = symbol, engine = engine_id, plan_id = plan_id, source = src:text(), options = rowgen.options(),
    block = { M.BLOCK, 1, 1 }, grid = { sms.rule(info.row_factors, gr.div, gr.cap), gr.tiles, 1 },
    smem = 0, cluster = { 1, 1, 1 }, params = K.mparams, align = K.align,
  }
end

return M
