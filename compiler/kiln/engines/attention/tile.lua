-- kiln.engines.attention.tile: the per-tile code both attention kernels share, emitted at
-- the top of the kernel body (the template's ${setup}): the problem's sizes, pointers and
-- strides, the tile order, each batch entry's lengths, the key blocks a tile sees and which
-- of them need the mask, the mask itself, the score transform (softcap), and the end of a
-- row (Stats, Max, Sum_exp, the sink, O's factor) and O's stores. Names it defines:
--   B SQ SKV (kiln_i64), HQ HK HV (constexpr int), gq gk gv go (element pointers),
--   {q,k,v,o}_{sb,sh,ss} (element strides of batch, head, sequence), sl2 (float),
--   n_tiles, n_waves, wave_tile(w) (this CTA's tile of wave w; >= n_tiles: none), tile_of(t, b, hq, m0), lengths(b, lq, lk, delta), kv_blocks(m0, lq, lk, delta,
--   bn, jlo, jhi), needs_mask(m0, j0, bn, lk, delta), keep(row, col, lk, delta),
--   SCORE_FN and score(x), row_end(b, hq, row, m, l, dead) -> O's factor, store_o(b, hq, row,
--   col, v0, v1).
local pw = require "kiln.engines.pwexpr"
local render = require "kiln.render"

local M = {}

-- The bytes of K and V a group of tiles keeps in L2 (an H100's L2 is 50 MB in two halves).
M.L2_BYTES = 24 << 20
-- The largest band bound or shift the masks take as given (larger ones act as it).
M.BAND_MAX = 1 << 28

local cdim = pw.cdim
local LOG2E = 1.4426950408889634

-- One line for the kernel's comment: the mask and options.
function M.describe(P)
  local parts = {}
  local b = P.band
  if b.right ~= nil or b.left ~= nil then
    parts[#parts + 1] = string.format("band [%s, %s] %s", b.left and ("-" .. b.left) or "-inf", b.right or "inf",
      b.bottom_right and "bottom-right" or "top-left")
  end
  if P.softcap then parts[#parts + 1] = "softcap " .. P.softcap end
  if P.padding then parts[#parts + 1] = "padding" end
  if P.sink then parts[#parts + 1] = "sink" end
  if P.stats and not P.backward then parts[#parts + 1] = "stats" end
  return #parts > 0 and (", " .. table.concat(parts, ", ")) or ""
end

-- The element strides of a [B, H, S, D] tensor's batch, head and sequence axes as <name>_{sb,sh,ss}.
function M.strides(name, t)
  return string.format("  const kiln_i64 %s_sb = %s, %s_sh = %s, %s_ss = %s;", name, cdim(t.strides[1]), name,
    cdim(t.strides[2]), name, cdim(t.strides[3]))
end

-- A [B, Hq, Sq, 1] fp32 output's element of (b, hq, row) as a C lvalue.
local function stat_at(K, t)
  local p = K:ptr(t.uid, true)
  return string.format("%s[(kiln_i64)b * %s + (kiln_i64)hq * %s + (kiln_i64)row * %s]", p, cdim(t.strides[1]),
    cdim(t.strides[2]), cdim(t.strides[3]))
end

-- The scale of the scores into log2 units (sl2) and the score transform: identity with the
-- scale folded into the exponent where it is a positive constant, else x * scale (a runtime
-- scale) or the softcap c * tanh(x * scale / c), whose results sl2 = log2(e) takes.
function M.scale_lines(K, P, L)
  local scale
  if P.scale_uid and P.scale_mem then
    local t = K.g.by_uid[P.scale_uid]
    local st = pw.storage(K.src, t.dtype)
    scale = pw.fmt(st.load, K:ptr(t.uid) .. "[0]")
  elseif P.scale_uid then
    scale = K:scalar(P.scale_uid)
  else
    scale = render.float_literal(P.scale)
  end
  L[#L + 1] = string.format("  const float scale = %s;", scale)
  if P.softcap then
    local c = render.float_literal(P.softcap)
    L[#L + 1] = "  constexpr bool SCORE_FN = true;  // softcap: c tanh(x scale / c), tanh(y) = 1 - 2 / (e^2y + 1)"
    L[#L + 1] = string.format("  const float sl2 = %s, cap = %s, cap_in = scale / cap * %s;", render.float_literal(LOG2E), c,
      render.float_literal(2 * LOG2E))
    L[#L + 1] = "  auto score = [&](float x) -> float { return cap - 2.0f * cap / (kiln_exp2(x * cap_in) + 1.0f); };"
  elseif P.scale_uid or P.scale <= 0 then
    L[#L + 1] = "  constexpr bool SCORE_FN = true;  // a scale of unknown sign: scaled before the max"
    L[#L + 1] = string.format("  const float sl2 = %s;", render.float_literal(LOG2E))
    L[#L + 1] = "  auto score = [&](float x) -> float { return x * scale; };"
  else
    L[#L + 1] = "  constexpr bool SCORE_FN = false;  // the scale rides in the exponent"
    L[#L + 1] = string.format("  const float sl2 = scale * %s;", render.float_literal(LOG2E))
    L[#L + 1] = "  auto score = [&](float x) -> float { return x; };"
  end
end

-- A per-batch length as given (the seq_len tensor's entry), or S.
local function length_expr(K, t, S)
  if not t then return S end
  return string.format("(kiln_i64)%s[(kiln_i64)b * %s]", K:ptr(t.uid), cdim(t.strides[1]))
end

-- lengths(b, lq, lk, delta): batch entry b's query and key lengths (within the tensors) and the
-- band's shift
function M.length_lines(K, P, L)
  L[#L + 1] = "  auto lengths = [&](int b, int &lq, int &lk, int &delta) {"
  L[#L + 1] = string.format("    const kiln_i64 rq = %s, rk = %s;", length_expr(K, P.seq_len_q, "SQ"), length_expr(K, P.seq_len_kv, "SKV"))
  L[#L + 1] = "    // lengths past the tensors are read no further than the tensors; the shift is the lengths' own"
  L[#L + 1] = "    lq = (int)(rq < 0 ? 0 : rq > SQ ? SQ : rq);"
  L[#L + 1] = "    lk = (int)(rk < 0 ? 0 : rk > SKV ? SKV : rk);"
  L[#L + 1] = string.format("    delta = %s;  // the band's shift (bottom-right alignment)",
    P.band.bottom_right and "(int)(rk - rq > BAND_MAX ? BAND_MAX : rk - rq < -BAND_MAX ? -BAND_MAX : rk - rq)" or "0")
  L[#L + 1] = "    (void)b;"
  L[#L + 1] = "  };"
end

-- HAS_RIGHT, HAS_LEFT, RIGHT, LEFT, kv_blocks, needs_mask and keep: the diagonal band of keys
-- a query row sees (BM: the rows of a tile)
function M.band_lines(P, L)
  local R, W = P.band.right, P.band.left
  L[#L + 1] = string.format("  constexpr bool HAS_RIGHT = %s, HAS_LEFT = %s;", R and "true" or "false", W and "true" or "false")
  -- bounds and shifts past 2^28 act as 2^28 (sequences are shorter): sums stay within an int
  L[#L + 1] = string.format("  constexpr int RIGHT = %d, LEFT = %d;  // keys col <= row + delta + RIGHT, col > row + delta - LEFT",
    math.min(R or 0, M.BAND_MAX), math.min(W or 0, M.BAND_MAX))
  L[#L + 1] = [[
  // the key blocks [jlo, jhi) of bn keys that rows [m0, m0 + BM) see
  auto kv_blocks = [&](int m0, int lq, int lk, int delta, int bn, int &jlo, int &jhi) {
    jlo = jhi = 0;
    if (m0 >= lq || lk <= 0) return;
    int hi = lk, lo = 0;
    const int last = (m0 + BM < lq ? m0 + BM : lq) - 1;
    if (HAS_RIGHT && last + delta + RIGHT + 1 < hi) hi = last + delta + RIGHT + 1;
    if (HAS_LEFT && m0 + delta - LEFT + 1 > lo) lo = m0 + delta - LEFT + 1;
    if (hi <= lo) return;
    jlo = lo / bn;
    jhi = (hi + bn - 1) / bn;
  };
  // whether some key of the block at j0 is masked for some row of the tile
  auto needs_mask = [&](int m0, int j0, int bn, int lk, int delta) -> bool {
    return j0 + bn > lk || (HAS_RIGHT && j0 + bn - 1 > m0 + delta + RIGHT) ||
           (HAS_LEFT && j0 <= m0 + BM - 1 + delta - LEFT);
  };
  auto keep = [&](int row, int col, int lk, int delta) -> bool {
    return col < lk && (!HAS_RIGHT || col <= row + delta + RIGHT) && (!HAS_LEFT || col > row + delta - LEFT);
  };]]
end

-- group: tiles in groups of heads whose K and V fit in L2 (else one group of every head)
function M.setup(K, P, group)
  local L = {}
  local esz = "kiln_u16"
  local q, k, v, o = K:ptr(P.q.uid), K:ptr(P.k.uid), K:ptr(P.v.uid), K:ptr(P.o.uid, true)
  K:need_align(P.q.uid, 16); K:need_align(P.k.uid, 16); K:need_align(P.v.uid, 16); K:need_align(P.o.uid, 16)
  L[#L + 1] = string.format("  constexpr int HQ = %d, HK = %d, HV = %d;", P.Hq, P.Hk, P.Hv)
  L[#L + 1] = string.format("  const kiln_i64 B = %s, SQ = %s, SKV = %s;", cdim(P.B), cdim(P.Sq), cdim(P.Skv))
  K:note_dyn({ P.B, P.Sq, P.Skv })
  L[#L + 1] = string.format("  const %s *__restrict__ gq = %s, *__restrict__ gk = %s, *__restrict__ gv = %s;", esz, q, k, v)
  L[#L + 1] = string.format("  %s *__restrict__ go = %s;", esz, o)
  L[#L + 1] = M.strides("q", P.q); L[#L + 1] = M.strides("k", P.k); L[#L + 1] = M.strides("v", P.v); L[#L + 1] = M.strides("o", P.o)
  L[#L + 1] = "  (void)gq; (void)gk; (void)gv; (void)q_sb; (void)q_sh; (void)q_ss; (void)k_sb; (void)k_sh; (void)k_ss;"
  L[#L + 1] = "  (void)v_sb; (void)v_sh; (void)v_ss; (void)SKV;"
  M.scale_lines(K, P, L)
  -- tiles: (batch, head) pairs in groups whose K and V fit in L2_BYTES (a GQA group's q heads
  -- count once), and in a group the m blocks from the last (the longest under a causal mask)
  -- down, heads fastest: every key block a wave reads is read again from L2
  L[#L + 1] = string.format("  constexpr kiln_i64 L2_BYTES = %d;  // 0: one group", group and M.L2_BYTES or 0)
  L[#L + 1] = "  const kiln_i64 n_m = (SQ + BM - 1) / BM, n_bh = B * HQ, n_tiles = n_bh * n_m;"
  L[#L + 1] = "  const kiln_i64 kv_head = SKV * (D + DV) * 2 + 1;"
  L[#L + 1] = "  const kiln_i64 grp = L2_BYTES == 0 ? n_bh : L2_BYTES / kv_head > 0 ? L2_BYTES / kv_head * (HQ / HK) : 1;"
  L[#L + 1] = "  auto tile_of = [&](kiln_i64 t, int &b, int &hq, int &m0) {"
  L[#L + 1] = "    const kiln_i64 first = t / (grp * n_m) * grp, size = n_bh - first < grp ? n_bh - first : grp;"
  L[#L + 1] = "    const kiln_i64 r = t - first * n_m, bh = first + r % size;"
  L[#L + 1] = "    b = (int)(bh / HQ); hq = (int)(bh % HQ); m0 = (int)((n_m - 1 - r / size) * BM);"
  L[#L + 1] = "  };"
  if P.band.bottom_right then L[#L + 1] = string.format("  constexpr kiln_i64 BAND_MAX = %d;", M.BAND_MAX) end
  L[#L + 1] = "  // the CTA's tile of wave w: waves of gridDim.x tiles, every other one dealt in reverse, so a"
  L[#L + 1] = "  // CTA dealt a wave's longest tile is dealt the next one's shortest; n_tiles or past: none"
  L[#L + 1] = "  const kiln_i64 n_waves = (n_tiles + gridDim.x - 1) / gridDim.x;"
  L[#L + 1] = "  auto wave_tile = [&](kiln_i64 w) -> kiln_i64 {"
  L[#L + 1] = "    return w * gridDim.x + ((w & 1) ? gridDim.x - 1 - blockIdx.x : blockIdx.x);"
  L[#L + 1] = "  };"
  M.length_lines(K, P, L)
  M.band_lines(P, L)
  -- the end of a row: statistics outputs and O's factor
  local sink = P.sink and string.format("%s[(kiln_i64)hq * %s] * %s", K:ptr(P.sink.uid), cdim(P.sink.strides[2]),
    render.float_literal(LOG2E))
  local writes_dead, writes = {}, {}
  local LN2 = render.float_literal(math.log(2))
  if P.stats then
    local at = stat_at(K, P.stats)
    writes_dead[#writes_dead + 1] = string.format("%s = -__int_as_float(0x7f800000);", at)
    writes[#writes + 1] = string.format("%s = %s;", at, P.stats_log2 and "lse2" or ("lse2 * " .. LN2))
  end
  if P.max then
    local at = stat_at(K, P.max)
    writes_dead[#writes_dead + 1] = string.format("%s = %s;", at, P.sink and ("s2 * " .. LN2) or "-__int_as_float(0x7f800000)")
    writes[#writes + 1] = string.format("%s = mf * %s;", at, LN2)
  end
  if P.sum_exp then
    local at = stat_at(K, P.sum_exp)
    writes_dead[#writes_dead + 1] = string.format("%s = 0.0f;", at)
    writes[#writes + 1] = string.format("%s = L;", at)
  end
  L[#L + 1] = "  // a row's end: m (score units) and l (the sum of exp2(x sl2 - m sl2)) give its statistics and O's factor;"
  L[#L + 1] = "  // dead rows (past seq_len_q, or every key masked and no sink) get O = 0"
  L[#L + 1] = "  auto row_end = [&](int b, int hq, int row, float m, float l, bool dead) -> float {"
  L[#L + 1] = "    const float NEG_INF = -__int_as_float(0x7f800000);"
  L[#L + 1] = "    const float ms = m == NEG_INF ? NEG_INF : m * sl2;"
  L[#L + 1] = string.format("    const float s2 = %s;", sink or "NEG_INF")
  L[#L + 1] = "    const float mf = ms > s2 ? ms : s2;"
  L[#L + 1] = "    (void)b; (void)hq; (void)row; (void)s2;"
  L[#L + 1] = "    if (dead || mf == NEG_INF) {"
  for _, w in ipairs(writes_dead) do L[#L + 1] = "      " .. w end
  L[#L + 1] = "      return 0.0f;"
  L[#L + 1] = "    }"
  L[#L + 1] = "    const float c = kiln_exp2(ms - mf);"
  L[#L + 1] = string.format("    const float L = l * c%s;", P.sink and " + kiln_exp2(s2 - mf)" or "")
  L[#L + 1] = string.format("    const float lse2 = mf + logf(L) * %s;", render.float_literal(LOG2E))
  L[#L + 1] = "    (void)lse2;"
  for _, w in ipairs(writes) do L[#L + 1] = "    " .. w end
  L[#L + 1] = "    return c / L;"
  L[#L + 1] = "  };"
  L[#L + 1] = "  auto store_o = [&](int b, int hq, int row, int col, float v0, float v1) {"
  L[#L + 1] = "    *reinterpret_cast<kiln_u32 *>(go + (kiln_i64)b * o_sb + (kiln_i64)hq * o_sh + (kiln_i64)row * o_ss + col) ="
  L[#L + 1] = string.format("        %s(v0, v1);", P.dtype == "bf16" and "kiln_f32x2_to_bf16x2" or "kiln_f32x2_to_fp16x2")
  L[#L + 1] = "  };"
  return table.concat(L, "\n")
end

return M
