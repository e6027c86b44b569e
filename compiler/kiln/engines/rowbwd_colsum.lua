-- kiln.engines.rowbwd_colsum: the column sums (dscale, dbias) of a backward norm whose rows are
-- too wide for the one-kernel forms (a CTA's sums of every column fit neither registers nor
-- shared memory). The row kernel then computes dx alone, and this kernel reads dy and x a
-- second time, column-tiled: CTA (g, t) takes the columns of tile t of rows g, g + G, ...; each
-- thread owns V columns, so nothing combines inside the CTA. It writes its sums to the partial
-- row ws[g][sum * H + column], which the finalize kernel adds in a fixed order (G from T
-- alone: deterministic).
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"

local M = {}

M.BLOCK = 256
M.CTAS = 132 * 8     -- CTAs that fill the H200 (8 of 256 threads per SM)
M.MIN_ROWS = 16      -- rows each CTA takes at least

-- Whether this kernel can take the group's sums: dy and x row-major, V-wide vectors of them.
function M.accepts(info, g)
  local a = info.anchor
  for _, port in ipairs({ "grad", "input" }) do
    local t = g.by_uid[a.inputs[port]]
    if info.access[t.uid] ~= "full" then return false, t.name .. " is not row-major over the element space" end
  end
  return true
end

-- The grid: G row chunks by column tiles (G depends on T only).
function M.grid(info)
  local H, V = info.L.H, info.L.V
  local tiles = (H + M.BLOCK * V - 1) // (M.BLOCK * V)
  return { tiles = tiles, div = M.MIN_ROWS, max = math.max(1, (M.CTAS + tiles - 1) // tiles) }
end

-- The kernel (a plan kernel table): sums of dy * xh (dscale) and dy (dbias) per column.
function M.build(info, g, symbol, plan_id, engine_id)
  local a, H, V = info.anchor, info.L.H, info.L.V
  local gr = M.grid(info)
  local K = rowgen.kernel(g, symbol)
  local src = K.src
  K:note_dyn(info.E)
  local dy, x = a.inputs.grad, a.inputs.input
  K:ptr(dy); K:ptr(x)
  local function stat(port)
    local t = g.by_uid[a.inputs[port]]
    local off = rowgen.per_row(t, info) and "row" or pw.offset_expr(t, info.E, string.format("(row * %dLL)", H))
    return pw.fmt(pw.storage(src, t.dtype).load, string.format("%s[%s]", K:ptr(t.uid), off))
  end
  local mean = a.inputs.mean and stat("mean")
  local rstd = stat("inv_variance")
  local ws = K:workspace(0)
  local ncols = #info.colsum * H
  -- one thread per V columns of the row: a virtual row of tiles * BLOCK threads, one vector each
  local L = { H = H, V = V, N = 1, P = gr.tiles * M.BLOCK, RPC = 1, even = H == gr.tiles * M.BLOCK * V }
  local sums = {}
  for i, uid in ipairs(info.colsum) do sums[i] = { var = "s" .. (i - 1) .. "_", dscale = uid == a.outputs.DSCALE } end
  K:add("  const int lane = blockIdx.y * %d + threadIdx.x;", M.BLOCK)
  for _, s in ipairs(sums) do K:add("  float %s[%d] = {};", s.var, V) end
  K:add("#pragma unroll 4")
  K:add("  for (kiln_i64 row = blockIdx.x; row < %s; row += gridDim.x) {", info.rows)
  local loop_start = #K.lines + 1
  if mean then K:add("  const float mean = %s;", mean) end
  K:add("  const float rstd = %s;", rstd)
  rowgen.pass(K, L, {
    tag = "1", loads = { dy, x }, access = info.access,
    body = function(lines)
      lines[#lines + 1] = string.format("        const float xh_ = %s * rstd;", mean and string.format("(%s - mean)", K.value[x]) or K.value[x])
      for _, s in ipairs(sums) do
        lines[#lines + 1] = s.dscale and string.format("        %s[j] = fmaf(%s, xh_, %s[j]);", s.var, K.value[dy], s.var)
          or string.format("        %s[j] += %s;", s.var, K.value[dy])
      end
    end,
  })
  for i = loop_start, #K.lines do K.lines[i] = "  " .. K.lines[i]:gsub("\n", "\n  ") end
  K:add("  }")
  K:add("  const int c = lane * %d;", V)
  K:add("  if (c < %d) {", H)
  for i, s in ipairs(sums) do
    K:add("#pragma unroll\n    for (int j = 0; j < %d; j++) %s[(kiln_i64)blockIdx.x * %d + %d + c + j] = %s[j];", V, ws, ncols, (i - 1) * H, s.var)
  end
  K:add("  }")
  local params = K:finish_params()
  src:add(rowgen.render_fill("colreduce.cuh", {
    what = string.format("%s's column sums over row chunks, %d tiles of %d columns, %d threads, %d-wide vectors of %s",
      a.op, gr.tiles, M.BLOCK * V, M.BLOCK, V, g.by_uid[dy].dtype),
    block = M.BLOCK, symbol = symbol, params = params, shared = table.concat(K.shared, "\n"), body = table.concat(K.lines, "\n"),
  }))
  return {
    symbol = symbol, engine = engine_id, plan_id = plan_id, source = src:text(), options = rowgen.OPTIONS,
    block = { M.BLOCK, 1, 1 }, grid = { { mul = info.row_factors, div = gr.div, max = gr.max }, gr.tiles, 1 },
    smem = 0, cluster = { 1, 1, 1 }, params = K.mparams, align = K.align,
  }
end

return M
