-- kiln.engines.axissoftmax: softmax, log_softmax and their backwards over an axis that is not
-- the last (row.lua takes the last): [Ko, R, Ki] with the softmax axis R, softmax(x, dim = 1)
-- of an NCHW tensor or of [B, S, H] over S. A CTA's 256 threads split the R rows RS ways and
-- take 256 / RS lanes of V adjacent columns each (16-byte loads); a column's statistics (max,
-- then sum of exps; the backward's sum of dy * y or of dy) combine over the splits in a fixed
-- order through shared memory, so every thread of a column holds the same bits. Where the
-- CTA's R x TW values fit in shared memory they are staged there, as loaded, by the first pass
-- (x read once, 4 rows in flight; the later passes a row at a time); else the first pass keeps
-- each column's running max and sum of exps (the sum rescaled when the max moves) and the
-- output pass reads x again (from L2). A pointwise prologue and epilogue fuse; a sink logit is
-- declined.
local shape = require "kiln.shape"
local pw = require "kiln.engines.pwexpr"
local rowgen = require "kiln.engines.rowgen"
local rowptx = require "kiln.engines.rowptx"
local lower = require "kiln.lower"
local dtypes = require "kiln.dtypes"
local axissoftmax_ptx = require "kiln.engines.axissoftmax_ptx"

local E = { id = "axissoftmax", version = 1 }
-- The row code's settings its PTX forms read (kiln.settings, rowgen.SETTINGS, rowptx.SETTINGS).
E.settings = rowgen.settings(rowgen.SETTINGS, rowptx.SETTINGS)

E.BLOCK = 256          -- threads a CTA
E.MAX_SPLIT = 32       -- the most ways a CTA splits the rows (at least 8 lanes of columns)
E.STAGE_BYTES = 73728  -- shared memory for a CTA's staged values: 3 CTAs an SM
E.STEP = 4             -- rows a thread loads a step (loads in flight)
E.SPLITS = { 1, 2, 4, 8, 16, 32 }  -- the splits a plan may force (knob RS), for measuring

local LOG2E = "1.4426950408889634f"
local NEG_INF = "__int_as_float(0xff800000)"

local KIND = { softmax = "fwd", log_softmax = "fwd", softmax_backward = "bwd", log_softmax_backward = "bwd" }

local function fail(fmt_, ...) return nil, string.format(fmt_, ...) end

local function analyze(group, g)
  local a = group.anchor
  local kind = a and KIND[a.op]
  if not kind then return fail("group is a %s op (%s), not a softmax", group.family, (group.anchor or group.nodes[1]).op) end
  local spec = lower.ANCHORS[a.op]
  local x = g.by_uid[a.inputs[spec.ins[1]]]
  local n = #x.dims
  local axis = a.attrs.axis or -1
  if axis < 0 then axis = axis + n end
  if axis == n - 1 then return fail("%s over the last axis (the row engine's)", a.op) end
  if a.inputs.SINK then return fail("a sink logit over a non-last axis") end
  if #(group.amax or {}) + #(group.rowred or {}) > 0 then return fail("amax or per-row reductions in the epilogue") end
  local ok, why = pw.supported(group.prologue or {}, g)
  if ok then ok, why = pw.supported(group.epilogue or {}, g) end
  if not ok then return nil, why end
  local E_ = x.dims
  for _, p in ipairs(spec.ins) do
    local t = g.by_uid[a.inputs[p]]
    if not pw.dims_equal(t.dims, E_) then return fail("%s %s and %s differ in shape", p, shape.format(t.dims), shape.format(E_)) end
  end
  local info = { anchor = a, kind = kind, op = a.op, E = E_, axis = axis + 1 }
  info.Ko, info.Ko_f = rowgen.extent(E_, 1, axis)
  local R_c, Ki_c
  info.R, info.R_f, R_c = rowgen.extent(E_, axis + 1, axis + 1)
  info.Ki, info.Ki_f, Ki_c = rowgen.extent(E_, axis + 2, n)
  info.Ki_c = Ki_c
  info.ins, info.out_uid = {}, a.outputs[spec.outs[1]]
  for i, p in ipairs(spec.ins) do info.ins[i] = a.inputs[p] end
  -- what is read or written per element, whole: V from their dtypes
  local whole = {}
  for _, uid in ipairs(group.inputs) do
    local t = g.by_uid[uid]
    if t.role ~= "constant" and t.role ~= "scalar" then
      local bad = rowgen.source_declines(t, E_)
      if bad then return nil, bad end
      if pw.dims_equal(t.dims, E_) and shape.is_row_major(t.dims, t.strides) then whole[#whole + 1] = t end
    end
  end
  info.elem, info.stats = {}, {}
  local stat_ports = {}
  for _, p in ipairs({ "Stats", "Max", "Sum_exp" }) do if a.outputs[p] then stat_ports[a.outputs[p]] = p end end
  local stats_dims = {}
  for i, d in ipairs(E_) do stats_dims[i] = i == axis + 1 and 1 or d end
  for _, uid in ipairs(group.outputs) do
    local t = g.by_uid[uid]
    if not pw.STORAGE[t.dtype] then return fail("dtype %s of output '%s' is not supported", t.dtype, t.name) end
    if not shape.is_row_major(t.dims, t.strides) then return fail("output '%s' is not row-major", t.name) end
    if stat_ports[uid] then
      info.stats[#info.stats + 1] = uid
    elseif pw.dims_equal(t.dims, E_) then
      info.elem[#info.elem + 1] = uid
      whole[#whole + 1] = t
    else
      return fail("output '%s' %s is neither per element nor one per column", t.name, shape.format(t.dims))
    end
  end
  -- V divides Ki's compile-time part (all of it when Ki is static)
  local kc = Ki_c
  if not kc then
    kc = 1
    for _, f in ipairs(info.Ki_f) do if type(f) == "number" then kc = kc * f end end
  end
  info.V = rowgen.load_width(whole, kc)  -- every tensor read or written whole: one 16-byte word at most
  -- staged: the anchor's inputs of the CTA's rows and columns kept in shared memory by the
  -- first pass, as loaded (a graph tensor read whole) or as fp32 values (the prologue's), at
  -- the fewest splits whose columns fit E.STAGE_BYTES; else as many splits as keep E.STEP
  -- rows in flight twice over, and x read again
  local stageable = R_c ~= nil
  local made_after = { [a.outputs[spec.outs[1]]] = true }
  local is_in = {}
  for _, p in ipairs(spec.ins) do is_in[a.inputs[p]] = true end
  -- staging holds the anchor's inputs only: an epilogue reading anything else from memory or
  -- from the prologue reads x again
  for _, node in ipairs(group.epilogue or {}) do
    for _, uid in pairs(node.inputs) do
      local t = g.by_uid[uid]
      if not (made_after[uid] or is_in[uid] or t.role == "constant" or t.role == "scalar") then stageable = false end
    end
    for _, uid in pairs(node.outputs) do made_after[uid] = true end
  end
  local made = rowgen.made(group)
  info.stage = {}
  local per_col = 0
  for i, p in ipairs(spec.ins) do
    local t = g.by_uid[a.inputs[p]]
    local raw = not made[t.uid] and pw.dims_equal(t.dims, E_) and shape.is_row_major(t.dims, t.strides)
    info.stage[i] = { fp32 = not raw, size = raw and dtypes.size(t.dtype) or 4 }
    per_col = per_col + info.stage[i].size
  end
  info.stageable, info.per_col, info.R_static = stageable, per_col, R_c
  return info
end

-- The plan of info with the rows split `split` ways (nil: the engine's choice) and staged in
-- shared memory unless `reread` (or they do not fit): knobs of the plan, for measuring.
local function variant(info, reread, split)
  local v = rowgen.plan_info(info, {})
  local R_c = v.R_static
  if v.stageable and not reread then
    local RS = split or 1
    while RS <= E.MAX_SPLIT do
      local bytes = R_c * (E.BLOCK // RS) * v.V * v.per_col
      if bytes <= E.STAGE_BYTES then v.RS, v.staged, v.R_c, v.smem = RS, true, R_c, bytes; break end
      if split then break end
      RS = RS * 2
    end
  end
  if not v.staged then
    v.RS = split or rowgen.row_splits(R_c, E.STEP, E.MAX_SPLIT)
  end
  if v.smem then v.smem = rowgen.dynamic_smem(v.smem, E.BLOCK * v.V * 4) end  -- beside red_
  v.id = string.format("axissoftmax:v%d:%s:b%dv%ds%d%s", E.version, v.anchor.op, E.BLOCK, v.V, v.RS,
    v.staged and ":staged" or ":reread")
  return { id = v.id, knobs = { staged = v.staged == true, RS = v.RS }, info = v }
end

-- The engine's choice first, then every other split, staged where it fits and re-read.
function E.propose(group, g, target)
  if target.sm < 80 then return nil, "needs sm_80 or later (max.NaN)" end
  local info, why = analyze(group, g)
  if not info then return nil, why end
  local plans, seen = {}, {}
  local function add(reread, split)
    local p = variant(info, reread, split)
    if seen[p.id] then return end
    seen[p.id], p.rank = true, 1 - #plans / 100
    plans[#plans + 1] = p
  end
  add(false, nil)
  add(true, nil)
  for _, split in ipairs(E.SPLITS) do add(false, split); add(true, split) end
  return plans
end

-- The kernel's shared state: the plan's arguments, the kernel K and its shape.
local function build_state(plan, group, g, target, symbol)
  local info = plan.info
  local S = { plan = plan, group = group, g = g, target = target, symbol = symbol, info = info, a = info.anchor,
              V = info.V, RS = info.RS, B = E.BLOCK, U = E.STEP, ins = info.ins, staged = info.staged,
              out_uid = info.out_uid }
  S.LO = S.B // S.RS  -- lanes along the columns
  S.TW = S.LO * S.V   -- columns a CTA
  return S
end

-- The kernel K (S.K) and its head: the extents, the thread's split and columns, the shared
-- arrays.
local function kernel_head(S)
  local info, LO, TW = S.info, S.LO, S.TW
  local K = rowgen.kernel(S.g, S.symbol)
  S.K = K
  K.src:need("common/nanmax.cuh")
  K.src:need("common/exp2.cuh")
  K:note_dyn(info.E)
  S.read_later = pw.read_set(S.group.nodes)
  K:add("  const kiln_i64 n_out = %s * %s, R = %s, Ki = %s;", info.Ko, info.Ki, info.R, info.Ki)
  K:add("  const int s = threadIdx.x / %d, lane = threadIdx.x %% %d;", LO, LO)
  K:add("  const kiln_i64 o = (kiln_i64)blockIdx.x * %d + lane * %d;", TW, S.V)
  K:add("  const bool live_ = o < n_out;")
  K:add("  const kiln_i64 ko = o / Ki, base = ko * R * Ki + (o - ko * Ki);")
  K.shared[#K.shared + 1] = string.format("  __shared__ float red_[%d][%d];", S.RS, TW)
  -- staged: input i's vector of row r at sl<i>_ + (r * LO + lane) * its bytes, as loaded
  -- (its dtype) or, when the prologue computes it, as fp32 values
  if S.staged then
    K.shared[#K.shared + 1] = "  extern __shared__ __align__(16) kiln_u8 dsm_[];"
    local off = 0
    for i, st in ipairs(info.stage) do
      K:add("  kiln_u8 *const sl%d_ = dsm_ + %d;", i - 1, off)
      off = off + info.R_c * TW * st.size
    end
  end
end

-- Input i's staged vector of row r (kernel_head's layout).
local function slot(S, i) return string.format("sl%d_ + ((int)r * %d + lane) * %d", i - 1, S.LO, S.V * S.info.stage[i].size) end

-- The column statistics over the splits, in split order (acc: an array of V; comb(a, b)).
local function combine(S, acc, comb)
  local K, V, LO = S.K, S.V, S.LO
  K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) red_[s][j * %d + lane] = %s[j];", V, LO, acc)
  K:add("  __syncthreads();")
  -- the splits outermost: V independent chains a step, the loads issued ahead
  K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) %s[j] = red_[0][j * %d + lane];", V, acc, LO)
  K:add("#pragma unroll 4\n  for (int k = 1; k < %d; k++) {", S.RS)
  K:add("#pragma unroll\n    for (int j = 0; j < %d; j++) { const float a = %s[j], b = red_[k][j * %d + lane]; %s[j] = %s; }",
    V, acc, LO, acc, comb("a", "b"))
  K:add("  }")
  K:add("  __syncthreads();")
end

local function add_expr(x, y) return string.format("%s + %s", x, y) end
local function max_expr(x, y) return string.format("kiln_fmax_nan(%s, %s)", x, y) end

-- The thread's rows r = s, s + RS, ... in steps of n: `row(indent)` emits the body of row r,
-- then `after(indent)` (if given) its end.
local function rows(S, n, row, after)
  local K = S.K
  K:add("  if (live_) {")
  K:add("    for (kiln_i64 r0 = s; r0 < R; r0 += %d) {", n * S.RS)
  K:add("#pragma unroll\n      for (int u = 0; u < %d; u++) {", n)
  K:add("        const kiln_i64 r = r0 + u * %d;", S.RS)
  K:add("        if (r < R) {")
  K:add("          const kiln_i64 e = base + r * Ki;")
  row("          ")
  if after then after("          ") end
  K:add("        }")
  K:add("      }")
  K:add("    }")
  K:add("  }")
end

-- A pass reading memory: body(lines, vals, indent, value) per element j (vals[i]: anchor
-- input i); staged, the loads are kept in shared memory.
local function load_pass(S, body, after)
  local K, info, V, ins, staged = S.K, S.info, S.V, S.ins, S.staged
  rows(S, S.U, function(indent)
    rowgen.elements(K, S.group, S.g, info.E, "e", indent, V, function(lines, value, inner)
      local vals = {}
      for i, uid in ipairs(ins) do
        vals[i] = value[uid]
        if staged and info.stage[i].fp32 then
          lines[#lines + 1] = string.format("%sreinterpret_cast<float *>(%s)[j] = %s;", inner, slot(S, i), vals[i])
        end
      end
      body(lines, vals, inner, value)
    end, staged and function(inner, words)
      for i, uid in ipairs(ins) do
        local st = info.stage[i]
        if not st.fp32 then
          local w = rowgen.WORD[V * st.size]
          K:add("%s*reinterpret_cast<%s *>(%s) = *reinterpret_cast<const %s *>(%s);", inner, w, slot(S, i), w, words[uid])
        end
      end
    end or nil)
  end, after)
end

-- A staged row's element j: the constants and the anchor inputs (vals[i], value), their lines
-- into `lines`.
local function staged_values(S, lines, inner)
  local K, g = S.K, S.g
  local vals, value = {}, {}
  for _, uid in ipairs(S.group.inputs) do
    local t = g.by_uid[uid]
    if t.role == "constant" or t.role == "scalar" then value[uid] = K:scalar(uid) end
  end
  for i, uid in ipairs(S.ins) do
    local st = S.info.stage[i]
    local v = st.fp32 and string.format("reinterpret_cast<const float *>(%s)[j]", slot(S, i))
      or pw.fmt(pw.storage(K.src, g.by_uid[uid].dtype).load, string.format("s%d_[j]", i - 1))
    lines[#lines + 1] = string.format("%sconst float x%d_ = %s;", inner, i - 1, v)
    vals[i] = string.format("x%d_", i - 1)
    value[uid] = vals[i]
  end
  return vals, value
end

-- A pass over the staged values: body as load_pass's (value: constants and the anchor inputs).
local function staged_pass(S, body, after)
  local K, V = S.K, S.V
  rows(S, 1, function(indent)
    for i, uid in ipairs(S.ins) do
      local st = S.info.stage[i]
      if not st.fp32 then
        local w = rowgen.WORD[V * st.size]
        K:add("%salignas(16) %s s%d_[%d];", indent, pw.storage(K.src, S.g.by_uid[uid].dtype).ctype, i - 1, V)
        K:add("%s*reinterpret_cast<%s *>(s%d_) = *reinterpret_cast<const %s *>(%s);", indent, w, i - 1, w, slot(S, i))
      end
    end
    K:add("#pragma unroll\n%sfor (int j = 0; j < %d; j++) {", indent, V)
    local inner = indent .. "  "
    local lines = {}
    local vals, value = staged_values(S, lines, inner)
    body(lines, vals, inner, value)
    for _, l in ipairs(lines) do K:add("%s", l) end
    K:add("%s}", indent)
  end, after)
end

-- The forward's statistics m_ and z_ with the values staged: pass 1 the max, pass 2 the sum
-- of exps from shared memory.
local function staged_max_sum(S)
  local K, V = S.K, S.V
  load_pass(S, function(lines, vals, inner) lines[#lines + 1] = string.format("%sm_[j] = kiln_fmax_nan(m_[j], %s);", inner, vals[1]) end)
  combine(S, "m_", max_expr)
  K:add("  float mb_[%d];", V)
  K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) mb_[j] = m_[j] == %s ? 0.0f : m_[j];  // a -inf column has no terms", V, NEG_INF)
  staged_pass(S, function(lines, vals, inner)
    lines[#lines + 1] = string.format("%sz_[j] += kiln_exp2((%s - mb_[j]) * %s);", inner, vals[1], LOG2E)
  end)
end

-- The forward's statistics m_ and z_ in one pass: each column's running max and sum of exps,
-- rescaled once a row.
local function running_max_sum(S)
  local K, V = S.K, S.V
  load_pass(S, function(lines, vals, inner)
    lines[#lines + 1] = string.format("%s{ const float mn_ = kiln_fmax_nan(m_[j], %s), mb = mn_ == %s ? 0.0f : mn_;", inner, vals[1], NEG_INF)
    lines[#lines + 1] = string.format("%s  z_[j] = (m_[j] == mn_ ? z_[j] : z_[j] * kiln_exp2((m_[j] - mn_) * %s)) + kiln_exp2((%s - mb) * %s);",
      inner, LOG2E, vals[1], LOG2E)
    lines[#lines + 1] = string.format("%s  m_[j] = mn_; }", inner)
  end)
  -- the splits' pairs: the max first, then each split's sum rescaled to it, in split order
  K:add("  float tm_[%d];", V)
  K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) tm_[j] = m_[j];", V)
  combine(S, "m_", max_expr)
  K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) z_[j] = tm_[j] == m_[j] ? z_[j] : z_[j] * kiln_exp2((tm_[j] - m_[j]) * %s);", V, LOG2E)
  K:add("  float mb_[%d];", V)
  K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) mb_[j] = m_[j] == %s ? 0.0f : m_[j];", V, NEG_INF)
end

-- The forward's statistics: value_of(vals), the output's expression, and each statistics
-- output's expression.
local function forward(S)
  local K, V, a = S.K, S.V, S.a
  local is_log = a.op == "log_softmax"
  K:add("  float m_[%d], z_[%d];", V, V)
  K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) { m_[j] = %s; z_[j] = 0.0f; }", V, NEG_INF)
  if S.staged then staged_max_sum(S) else running_max_sum(S) end
  combine(S, "z_", add_expr)
  if is_log then
    K:add("  float lz_[%d];", V)
    K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) lz_[j] = logf(z_[j]);", V)
  else
    K:add("  float iz_[%d];", V)
    K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) iz_[j] = m_[j] == %s ? 0.0f : __frcp_rn(z_[j]);", V, NEG_INF)
  end
  local function value_of(vals)
    if is_log then return string.format("m_[j] == %s ? %s : (%s - m_[j]) - lz_[j]", NEG_INF, NEG_INF, vals[1]) end
    return string.format("kiln_exp2((%s - mb_[j]) * %s) * iz_[j]", vals[1], LOG2E)
  end
  local stat_expr = {}
  local o = a.outputs
  if o.Stats then
    stat_expr[o.Stats] = a.attrs.stats_use_log2 and string.format("(m_[j] + logf(z_[j])) * %s", LOG2E) or "m_[j] + logf(z_[j])"
  end
  if o.Max then stat_expr[o.Max] = "m_[j]" end
  if o.Sum_exp then stat_expr[o.Sum_exp] = "z_[j]" end
  return value_of, stat_expr
end

-- The backward's column sums c_: value_of(vals), the output's expression.
local function backward(S)
  local K, V = S.K, S.V
  local is_log = S.a.op == "log_softmax_backward"
  K:add("  float c_[%d];", V)
  K:add("#pragma unroll\n  for (int j = 0; j < %d; j++) c_[j] = 0.0f;", V)
  load_pass(S, function(lines, vals, inner)
    if is_log then lines[#lines + 1] = string.format("%sc_[j] += %s;", inner, vals[1])
    else lines[#lines + 1] = string.format("%sc_[j] = fmaf(%s, %s, c_[j]);", inner, vals[1], vals[2]) end
  end)
  combine(S, "c_", add_expr)
  return function(vals)
    if is_log then return string.format("%s - kiln_exp2(%s * %s) * c_[j]", vals[1], vals[2], LOG2E) end
    return string.format("%s * (%s - c_[j])", vals[2], vals[1])
  end
end

-- The output pass: y, the epilogue, a vector store of each element output a row.
local function output_pass(S, value_of)
  local K, g, V, out_uid = S.K, S.g, S.V, S.out_uid
  local out_pass = S.staged and staged_pass or load_pass
  local stores = {}
  for _, uid in ipairs(S.info.elem) do
    local st = pw.storage(K.src, g.by_uid[uid].dtype)
    local bytes = V * dtypes.size(g.by_uid[uid].dtype)
    K:need_align(uid, bytes)
    stores[#stores + 1] = { uid = uid, st = st, word = rowgen.WORD[bytes] }
  end
  -- the output words are declared once, before the pass
  for _, o in ipairs(stores) do K:add("  alignas(16) %s w%d_[%d];", o.st.ctype, o.uid, V) end
  local yt = g.by_uid[out_uid]
  out_pass(S, function(lines, vals, inner, value)
    lines[#lines + 1] = string.format("%sfloat v%d = %s;", inner, out_uid, value_of(vals))
    if yt.dtype ~= "fp32" and S.read_later[out_uid] then
      -- (y as its dtype holds it where the epilogue reads it, as the reference does)
      local st = pw.storage(K.src, yt.dtype)
      lines[#lines + 1] = string.format("%sv%d = %s;", inner, out_uid, pw.fmt(st.load, pw.fmt(st.store, "v" .. out_uid)))
    end
    value[out_uid] = "v" .. out_uid
    pw.emit_nodes(S.group.epilogue or {}, value, lines, { g = g, src = K.src, space = S.info.E, index = "(e + j)",
                                                           indent = inner, read_later = S.read_later })
    for _, o in ipairs(stores) do
      lines[#lines + 1] = string.format("%sw%d_[j] = %s;", inner, o.uid, pw.fmt(o.st.store, value[o.uid]))
    end
  end, function(indent)
    for _, o in ipairs(stores) do
      K:add("%s*reinterpret_cast<%s *>(%s + e) = *reinterpret_cast<const %s *>(w%d_);", indent, o.word,
        K:ptr(o.uid, true), o.word, o.uid)
    end
  end)
end

-- Statistics, one per column: the first split's threads.
local function store_stats(S, stat_expr)
  local K, info = S.K, S.info
  if #info.stats == 0 then return end
  K:add("  if (live_ && s == 0) {")
  K:add("#pragma unroll\n    for (int j = 0; j < %d; j++) {", S.V)
  for _, uid in ipairs(info.stats) do
    K:add("      %s[o + j] = %s;", K:ptr(uid, true), pw.fmt(pw.storage(K.src, S.g.by_uid[uid].dtype).store, stat_expr[uid]))
  end
  K:add("    }")
  K:add("  }")
end

-- The kernel rendered, with its PTX form where axissoftmax_ptx takes it.
local function finish(S)
  local K, info, a, RS, TW = S.K, S.info, S.a, S.RS, S.TW
  local params = K:finish_params()
  K.src:add(rowgen.render_fill("axissoftmax.cuh", {
    what = string.format("%s over axis %d of %s: %d columns a CTA, %d a thread, the rows split %d ways, %d rows a step, %s",
      a.op, info.axis - 1, shape.format(info.E), TW, S.V, RS, S.U,
      S.staged and "the CTA's values staged in shared memory" or "x read again from L2 for the output"),
    block = S.B, symbol = S.symbol, params = params, shared = table.concat(K.shared, "\n"), body = table.concat(K.lines, "\n"),
  }))
  local k = rowgen.columns_kernel(K, S.plan, E.id, S.symbol, info.Ko_f, info.Ki_f, TW, S.B, info.smem or 0)
  -- the same in PTX, for a PTX module (no NVRTC front end and NVVM)
  local ptx_ok, why = axissoftmax_ptx.accepts(S.group, S.g, info, S.target)
  k.cuda_why = why
  if ptx_ok then
    local cuda = k.source
    K.lines, K.target = {}, S.target
    K.shared = {}
    if RS > 1 then K.shared[1] = string.format("  __shared__ __align__(16) float red_[%d][%d];", RS, TW) end
    if S.staged then K.shared[#K.shared + 1] = "  extern __shared__ __align__(16) kiln_u8 dsm_[];" end
    axissoftmax_ptx.emit(K, S.group, S.g, info, S.B, S.U)
    rowgen.with_source(k, K, cuda)
  end
  return k
end

function E.build(plan, group, g, target, symbol)
  local S = build_state(plan, group, g, target, symbol)
  kernel_head(S)
  local value_of, stat_expr
  if S.info.kind == "fwd" then value_of, stat_expr = forward(S)
  else value_of, stat_expr = backward(S), {} end
  output_pass(S, value_of)
  store_stats(S, stat_expr)
  return finish(S)
end

return E
