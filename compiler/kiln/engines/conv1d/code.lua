-- kiln.engines.conv1d.code: the kernel-top code every conv1d kernel shares (the templates'
-- ${setup}): the sizes B, D, L (kiln_i64), and each tensor's accessors through its strides:
--   main tensors (x, y, dout as dy, dx): NAME_get(b, c, t) / NAME_put(b, c, t, v) one element,
--     NAME_getr (16 raw bytes) / NAME_putv V elements along the contiguous axis, NAME_vec (the vectors are
--     aligned: strides and base), NAME_CL (channels contiguous);
--   w_get(c, j), bias_get(c) (0 without bias), init_get(b, c, s), fin_put(b, c, s, v),
--   seq_get(b, t), dfin_get(b, c, s), dinit_put(b, c, s, v), dw_put(c, j, v), dbias_put(c, v);
--   flags INIT FIN SEQ SILU DFIN DINIT DBIAS. An absent tensor's accessor returns 0 (never used).
local pw = require "kiln.engines.pwexpr"

local M = {}

local cdim = pw.cdim

-- The vector type of the main dtype (templates/conv1d_common.cuh) and its elements a vector.
M.VEC = { bf16 = { "kiln_cv_bf16", 8 }, fp16 = { "kiln_cv_fp16", 8 }, fp32 = { "kiln_cv_fp32", 4 } }

-- The C offset of element (i1, i2, ...) of t through its strides.
local function offset(t, idx)
  local terms = {}
  for i, e in ipairs(idx) do terms[i] = string.format("(kiln_i64)(%s) * %s", e, cdim(t.strides[i])) end
  return table.concat(terms, " + ")
end

-- Scalar reader or writer of tensor t as a lambda over the index names `idx`.
local function scalar_fn(K, L, name, t, idx, write)
  local args = {}
  for i, n in ipairs(idx) do args[i] = "kiln_i64 " .. n end
  if not t then
    if write then
      L[#L + 1] = string.format("  auto %s = [&](%s, float v) { (void)v; };", name, table.concat(args, ", "))
    else
      L[#L + 1] = string.format("  auto %s = [&](%s) -> float { return 0.0f; };", name, table.concat(args, ", "))
    end
    return
  end
  local st = pw.storage(K.src, t.dtype)
  local p = K:ptr(t.uid, write)
  local at = string.format("%s[%s]", p, offset(t, idx))
  if write then
    L[#L + 1] = string.format("  auto %s = [&](%s, float v) { %s = %s; };", name, table.concat(args, ", "), at,
      pw.fmt(st.store, "v"))
  else
    L[#L + 1] = string.format("  auto %s = [&](%s) -> float { return %s; };", name, table.concat(args, ", "),
      pw.fmt(st.load, at))
  end
end

-- A main [B, D, L] tensor's accessors (scalar and vector) and flags.
local function main_fns(K, L, name, t, lay, write)
  local vt, V = M.VEC[t.dtype][1], M.VEC[t.dtype][2]
  local p = K:ptr(t.uid, write)
  local s = t.strides
  L[#L + 1] = string.format("  constexpr bool %s_CL = %s;", name:upper(), lay == "cl" and "true" or "false")
  local at = string.format("%s + %s", p, offset(t, { "b", "c", "t" }))
  -- the vector path: base 16-byte aligned, the strides of the two other axes multiples of V
  local a2 = lay == "cl" and cdim(s[3]) or cdim(s[2])
  L[#L + 1] = string.format("  const bool %s_vec = (((kiln_u64)%s & 15) == 0) && %s %% %d == 0 && %s %% %d == 0;", name, p,
    cdim(s[1]), V, a2, V)
  if write then
    L[#L + 1] = string.format("  auto %s_put = [&](kiln_i64 b, kiln_i64 c, kiln_i64 t, float v) { *(%s) = %s::st(v); };", name, at, vt)
    L[#L + 1] = string.format("  auto %s_putv = [&](kiln_i64 b, kiln_i64 c, kiln_i64 t, const float *v) { %s::stv(%s, v); };",
      name, vt, at)
  else
    L[#L + 1] = string.format("  auto %s_get = [&](kiln_i64 b, kiln_i64 c, kiln_i64 t) -> float { return %s::ld(*(%s)); };",
      name, vt, at)
    L[#L + 1] = string.format("  auto %s_getr = [&](kiln_i64 b, kiln_i64 c, kiln_i64 t) { return %s::ldr(%s); };",
      name, vt, at)
  end
end

-- Block accessors of a [B, D, E] tensor for a thread of V channels (the decode update's vector
-- kernel): NAME_blk (the V x E elements of channels c..c+V-1 are contiguous, 16-byte aligned, and
-- come in whole vectors of NAME's type, for c a multiple of V), NAME_blkr(b, c, k) the k-th
-- 16 bytes of the block, NAME_blkw(b, c, k, v) stores them; NAME_BV the elements a vector.
-- An absent tensor: NAME_blk false.
function M.block(K, P, name, t, E, write)
  local L, V = {}, M.VEC[P.dtype][2]
  if not t or not M.VEC[t.dtype] then
    L[#L + 1] = string.format("  constexpr bool %s_blk = false; using %s_BT = XT; constexpr int %s_BV = XT::V;", name, name, name)
    L[#L + 1] = string.format("  auto %s_blkr = [&](kiln_i64, kiln_i64, int) { return XT::R{}; };", name)
    L[#L + 1] = string.format("  auto %s_blkw = [&](kiln_i64, kiln_i64, int, const float *) {};", name)
    return table.concat(L, "\n")
  end
  local vt, BV = M.VEC[t.dtype][1], M.VEC[t.dtype][2]
  local s, p = t.strides, K:ptr(t.uid, write)
  local at = string.format("%s + (kiln_i64)(b) * %s + (kiln_i64)(c) * %d + k * %d", p, cdim(s[1]), E, BV)
  local whole = (V * E) % BV == 0
  local inner = E == 1 and string.format("%s == 1", cdim(s[2])) or string.format("%s == 1 && %s == %d", cdim(s[3]), cdim(s[2]), E)
  L[#L + 1] = string.format("  using %s_BT = %s; constexpr int %s_BV = %d;", name, vt, name, BV)
  L[#L + 1] = string.format("  const bool %s_blk = %s && (((kiln_u64)%s & 15) == 0) && %s %% %d == 0 && %s;", name,
    whole and "true" or "false", p, cdim(s[1]), BV, inner)
  if write then
    L[#L + 1] = string.format("  auto %s_blkw = [&](kiln_i64 b, kiln_i64 c, int k, const float *v) { %s::stv(%s, v); };", name, vt, at)
    L[#L + 1] = string.format("  auto %s_blkr = [&](kiln_i64, kiln_i64, int) { return %s::R{}; };", name, vt)
  else
    L[#L + 1] = string.format("  auto %s_blkr = [&](kiln_i64 b, kiln_i64 c, int k) { return %s::ldr(%s); };", name, vt, at)
    L[#L + 1] = string.format("  auto %s_blkw = [&](kiln_i64, kiln_i64, int, const float *) {};", name)
  end
  return table.concat(L, "\n")
end

-- The setup lines of a kernel of problem P: `main` lists the main tensors it uses ({name,
-- tensor, layout, writable}); `small` the small ones by accessor name.
function M.setup(K, P, main, small)
  local L = {}
  K:note_dyn(P.x.dims)
  L[#L + 1] = string.format("  using XT = %s;  // x's element type", M.VEC[P.dtype][1])
  L[#L + 1] = string.format("  const kiln_i64 B = %s, D = %s, L = %s;", cdim(P.B), cdim(P.D), cdim(P.L))
  L[#L + 1] = "  (void)B; (void)L;"
  for _, m in ipairs(main) do main_fns(K, L, m[1], m[2], m[3], m[4]) end
  local S = {}
  for _, n in ipairs(small) do S[n] = true end
  if S.w then scalar_fn(K, L, "w_get", P.weight, { "c", "j" }) end
  if S.bias then scalar_fn(K, L, "bias_get", P.bias, { "c" }) end
  if S.init then scalar_fn(K, L, "init_get", P.init, { "b", "c", "s" }) end
  if S.fin then scalar_fn(K, L, "fin_put", P.fin, { "b", "c", "s" }, true) end
  if S.dfin then scalar_fn(K, L, "dfin_get", P.dfin, { "b", "c", "s" }) end
  if S.dinit then scalar_fn(K, L, "dinit_put", P.dinit, { "b", "c", "s" }, true) end
  if S.dw then scalar_fn(K, L, "dw_put", P.dweight, { "c", "j" }, true) end
  if S.dbias then scalar_fn(K, L, "dbias_put", P.dbias, { "c" }, true) end
  if S.seq then
    if P.seq then
      L[#L + 1] = string.format("  auto seq_get = [&](kiln_i64 b, kiln_i64 t) -> int { return %s[%s]; };", K:ptr(P.seq.uid),
        offset(P.seq, { "b", "t" }))
    else
      L[#L + 1] = "  auto seq_get = [&](kiln_i64 b, kiln_i64 t) -> int { return 0; };"
    end
  end
  local flags = { INIT = P.init, FIN = P.fin, SEQ = P.seq, SILU = P.silu, DFIN = P.dfin, DINIT = P.dinit, DBIAS = P.dbias }
  local f = {}
  for _, n in ipairs { "INIT", "FIN", "SEQ", "SILU", "DFIN", "DINIT", "DBIAS" } do
    f[#f + 1] = string.format("%s = %s", n, flags[n] and "true" or "false")
  end
  L[#L + 1] = "  constexpr bool " .. table.concat(f, ", ") .. ";"
  L[#L + 1] = "  (void)INIT; (void)FIN; (void)SEQ; (void)SILU; (void)DFIN; (void)DINIT; (void)DBIAS;"
  return table.concat(L, "\n")
end

return M
