-- kiln.engines.gdn.recurrent: the GDN forward as the token loop of OPS.md §8.1, right for
-- every sequence length and the decode kernel (templates/gdn_recurrent.cuh). A CTA takes one
-- (sequence, state head, tile of BV state rows); each row of K fp32 values is held by 8 lanes
-- (K/8 values a lane, R rows a thread), serial over the sequence's tokens, which arrive C at a
-- time through a double-buffered cp.async ring.
local render = require "kiln.render"
local rowgen = require "kiln.engines.rowgen"
local pw = require "kiln.engines.pwexpr"
local problem = require "kiln.engines.gdn.problem"

local M = {}

M.LANES = 8  -- lanes a state row: a row's reductions take 3 shuffles
M.OPTIONS = { "--std=c++17", "--ptxas-options=-v" }

-- Candidates, best first: state rows a CTA (BV), rows a thread (R), tokens a stage (C).
-- Decode: 16 KB of state a CTA of 128 threads, eight 16-byte loads a thread in flight, little
-- shared memory (many CTAs an SM). Longer sequences: more, smaller CTAs (the loop is serial
-- over tokens) and stages of 32 tokens.
M.SHORT = { { bv = 32, r = 2, c = 4 }, { bv = 16, r = 1, c = 4 }, { bv = 64, r = 4, c = 4 } }
M.LONG = { { bv = 8, r = 1, c = 32 }, { bv = 16, r = 1, c = 32 }, { bv = 32, r = 2, c = 16 } }

-- Registers of state and of q/k a thread holds, at most (K 256 past it would spill).
M.MAX_HELD = 128

function M.threads(c) return c.bv // c.r * M.LANES end

-- Dynamic shared memory: two stages of C tokens' q, k (K each) and v tile (BV), the tokens'
-- five scalars and their outputs in fp32.
function M.smem(P, c)
  return 2 * c.c * (4 * P.K + 2 * c.bv) + c.c * 5 * 4 + c.c * c.bv * 4
end

function M.propose(P, target, short)
  local _ = target
  if short == nil then short = require("kiln.engines.gdn.engine").short(P) end
  local plans = {}
  for _, c in ipairs(short and M.SHORT or M.LONG) do
    if P.V % c.bv == 0 and c.r * P.K // M.LANES + 2 * P.K // M.LANES <= M.MAX_HELD then
      local grid = { mul = rowgen.with_const({ P.cu.dims[1] }, P.HO * (P.V // c.bv)), div = 1, max = 0 }
      plans[#plans + 1] = {
        id = string.format("gdn:v1:recurrent:bv%d:r%d:c%d", c.bv, c.r, c.c),
        knobs = { path = "recurrent", bv = c.bv, r = c.r, c = c.c }, P = P,
        launch = { block = { M.threads(c), 1, 1 }, grid = { grid, 1, 1 }, smem = M.smem(P, c), cluster = { 1, 1, 1 } },
      }
    end
  end
  return plans
end

local GATE = { log = "KILN_GDN_GATE_LOG", linear = "KILN_GDN_GATE_LINEAR", safe = "KILN_GDN_GATE_SAFE" }

local function load_of(K, t, expr) return pw.fmt(pw.storage(K.src, t.dtype).load, expr) end

-- The kernel's set-up lines: sizes, pointers, loaders of each dtype, gate and beta modes.
local function setup(K, P)
  local cdim = pw.cdim
  local L = {}
  local function add(f, ...) L[#L + 1] = string.format(f, ...) end
  K:note_dyn({ P.T, P.cu.dims[1] })
  add("  constexpr int H = %d, HK = %d, HV = %d, HO = %d;", P.H, P.HK, P.HV, P.HO)
  add("  const kiln_i64 T = %s, N = %s - 1;", cdim(P.T), cdim(P.cu.dims[1]))
  for _, x in ipairs { P.q, P.k, P.v, P.O } do K:need_align(x.uid, 16) end
  -- the state first: writable where the final state goes back into the pool
  local st = P.state_dtype == "fp32" and "float" or "kiln_u16"
  if P.h0 then
    add("  %s%s *__restrict__ h0 = %s;", P.overwrite and "" or "const ", st, K:ptr(P.h0.uid, P.overwrite))
    K:need_align(P.h0.uid, 16)
  else
    add("  const %s *h0 = nullptr;", st)
  end
  add("  const kiln_u16 *__restrict__ gq = %s, *__restrict__ gk = %s, *__restrict__ gv = %s;",
    K:ptr(P.q.uid), K:ptr(P.k.uid), K:ptr(P.v.uid))
  add("  kiln_u16 *__restrict__ go = %s;", K:ptr(P.O.uid, true))
  add("  const %s *__restrict__ gcu = %s;", P.cu_int64 and "kiln_i64" or "int", K:ptr(P.cu.uid))
  if P.final then
    add("  %s *__restrict__ fin = %s;", st, K:ptr(P.final.uid, true))
    K:need_align(P.final.uid, 16)
  else
    add("  %s *fin = nullptr;", st)
  end
  if P.idx then
    K:note_dyn({ P.h0.dims[1] })
    add("  const int *__restrict__ gidx = %s;", K:ptr(P.idx.uid))
    add("  const kiln_i64 POOL = %s;", cdim(P.h0.dims[1]))
  else
    add("  const int *gidx = nullptr;")
    add("  const kiln_i64 POOL = 0;")
  end
  -- the sequences every per-sequence tensor has rows for (a dynamic mismatch skips the rest)
  local caps = { "N" }
  for _, t in ipairs { P.idx or false, (not P.idx) and P.h0 or false, P.final or false } do
    if t then K:note_dyn({ t.dims[1] }); caps[#caps + 1] = cdim(t.dims[1]) end
  end
  local cap = caps[1]
  for i = 2, #caps do cap = string.format("(%s < %s ? %s : %s)", cap, caps[i], cap, caps[i]) end
  add("  const kiln_i64 N_RUN = %s;", cap)
  add("  constexpr bool HAS_H0 = %s, IDX = %s, FINAL = %s, OVERWRITE = %s, L2 = %s;", tostring(P.h0 ~= nil),
    tostring(P.idx ~= nil), tostring(P.final ~= nil), tostring(P.overwrite and P.h0 ~= nil), tostring(P.l2))
  add("  (void)h0; (void)fin; (void)gidx; (void)POOL;")
  local io = P.dtype == "bf16" and "bf16" or "fp16"
  add("  auto ld_io = [](kiln_u16 h) -> float { return kiln_%s_to_f32(h); };", io)
  add("  auto pack_io = [](float lo, float hi) -> kiln_u32 { return kiln_f32x2_to_%sx2(lo, hi); };", io)
  local gp, bp = K:ptr(P.g.uid), K:ptr(P.beta.uid)
  add("  auto ld_g = [&](kiln_i64 i) -> float { return %s; };", load_of(K, P.g, gp .. "[i]"))
  add("  auto ld_b = [&](kiln_i64 i) -> float { return %s; };", load_of(K, P.beta, bp .. "[i]"))
  add("  constexpr int GATE = %s, BETA = %s;", GATE[P.safe_gate and "safe" or P.linear_gate and "linear" or "log"],
    P.neg_eigval and "KILN_GDN_BETA_2SIGMOID" or P.beta_sigmoid and "KILN_GDN_BETA_SIGMOID" or "KILN_GDN_BETA_RAW")
  -- the safe gate's per-head amplitude e^(a_log) and dt_bias (1 and 0 where absent)
  local amp = P.alog and string.format("kiln_exp2(%s * 1.4426950408889634f)", load_of(K, P.alog, K:ptr(P.alog.uid) .. "[ho]"))
    or "1.0f"
  local bias = P.dtb and load_of(K, P.dtb, K:ptr(P.dtb.uid) .. "[ho]") or "0.0f"
  add("  auto gate_params = [&](int ho, float &amp, float &bias) { (void)ho; amp = %s; bias = %s; };", amp, bias)
  add("  const float scale = %s;", render.float_literal(P.scale))
  return table.concat(L, "\n")
end

function M.build(plan, g, symbol, target)
  local _ = target
  local P, kn = plan.P, plan.knobs
  local K = rowgen.kernel(g, symbol)
  local src = K.src
  src:need("common/bf16.cuh")
  src:need("common/fp16.cuh")
  src:need("common/exp2.cuh")
  src:need("common/cp_async.cuh")
  src:need("gdn_common.cuh")
  local vars = { what = problem.describe(P), symbol = symbol, K = P.K, V = P.V, BV = kn.bv, R = kn.r, C = kn.c,
                 THREADS = M.threads(kn), STATE_T = P.state_dtype == "fp32" and "float" or "kiln_u16" }
  vars.setup = setup(K, P)
  vars.params = K:finish_params()
  src:add(render.fill(render.template("gdn_recurrent.cuh"), vars, "gdn_recurrent.cuh"))
  local l = plan.launch
  return {
    symbol = symbol, engine = "gdn", plan_id = plan.id, options = M.OPTIONS, source = src:text(),
    block = l.block, grid = l.grid, smem = l.smem, cluster = l.cluster, params = K.mparams, align = K.align,
  }
end

return M
