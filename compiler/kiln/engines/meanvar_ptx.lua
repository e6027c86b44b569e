-- kiln.engines.meanvar_ptx: a row's mean and variance in one reduction. Each part of the row
-- (a thread's elements, a trip of a re-read row, a warp, a CTA) is a pair (S, M2): its sum and
-- its sum of squared deviations from its own mean; pairs combine by Chan's formula
--   S = Sa + Sb,  M2 = M2a + M2b + (Sb/nb - Sa/na)^2 * na*nb/(na+nb)
-- which, unlike the sum of squares less the squared sum, loses nothing to a large mean. So
-- layernorm meets its threads (and its cluster) once a row, not once for the mean and again
-- for the deviations. Every combine here gives the same bits in every thread that makes it.
local ptx = require "kiln.ptx"

local M = {}

-- (s, m2) of `lanes` lanes of a warp, each of n elements, combined over the warp by
-- butterflies: at each step both halves hold equally many elements, so the deviation term is
-- (Sb - Sa)^2 / (2 n), whose sign-free square keeps both partners' bits equal.
function M.butterfly(P, s, m2, lanes, n)
  return P:butterfly_pair(s, m2, lanes, function(sa, ma, sb, mb, k)
    local d = P:def("b32", "sub.f32 %s, %s, %s;", sb, sa)
    local dd = P:def("b32", "mul.f32 %s, %s, %s;", d, d)
    local m = P:def("b32", "fma.rn.f32 %s, %s, %s, %s;", dd, ptx.f32(1.0 / (2 * n * k)), P:def("b32", "add.f32 %s, %s, %s;", ma, mb))
    return P:def("b32", "add.f32 %s, %s, %s;", sa, sb), m
  end)
end

-- The pair of the fp32 registers xs: { s = their sum, m2 = their squared deviations from
-- their mean, n = how many }.
function M.of_values(P, xs)
  local s = xs[1]
  for i = 2, #xs do s = P:def("b32", "add.f32 %s, %s, %s;", s, xs[i]) end
  local neg_mean = P:def("b32", "mul.f32 %s, %s, %s;", s, ptx.f32(-1.0 / #xs))
  local m2
  for _, x in ipairs(xs) do
    local d = P:def("b32", "add.f32 %s, %s, %s;", x, neg_mean)
    m2 = m2 and P:def("b32", "fma.rn.f32 %s, %s, %s, %s;", d, d, m2) or P:def("b32", "mul.f32 %s, %s, %s;", d, d)
  end
  return { s = s, m2 = m2, n = #xs }
end

-- Pair a (nil: none yet) and pair b combined (counts known when the kernel is written).
function M.add(P, a, b)
  if not a then return b end
  local neg_mean = P:def("b32", "mul.f32 %s, %s, %s;", a.s, ptx.f32(-1.0 / a.n))
  local d = P:def("b32", "fma.rn.f32 %s, %s, %s, %s;", b.s, ptx.f32(1.0 / b.n), neg_mean)
  local m2 = P:def("b32", "fma.rn.f32 %s, %s, %s, %s;", P:def("b32", "mul.f32 %s, %s, %s;", d, d),
    ptx.f32(a.n * b.n / (a.n + b.n)), P:def("b32", "add.f32 %s, %s, %s;", a.m2, b.m2))
  return { s = P:def("b32", "add.f32 %s, %s, %s;", a.s, b.s), m2 = m2, n = a.n + b.n }
end

-- A running pair of a loop's trips, updated in place by the trip's (s, m2) of n elements:
-- the running mean, M2 and trip count (registers the caller set to 0 before the loop). The
-- weight 1 / (trips so far) is an IEEE reciprocal, so every thread computes the same bits.
function M.merge(P, run, s, m2, n)
  P:put("add.f32 %s, %s, 0f3F800000;", run.k, run.k)
  local w = P:def("b32", "rcp.rn.f32 %s, %s;", run.k)
  local d = P:def("b32", "fma.rn.f32 %s, %s, %s, %s;", s, ptx.f32(1.0 / n), P:def("b32", "neg.f32 %s, %s;", run.mean))
  -- na * nb / (na + nb) = n * (k - 1) / k = n * (1 - w)
  local c = P:def("b32", "mul.f32 %s, %s, %s;", P:def("b32", "sub.f32 %s, 0f3F800000, %s;", w), ptx.f32(n))
  P:put("fma.rn.f32 %s, %s, %s, %s;", run.mean, d, w, run.mean)
  P:put("fma.rn.f32 %s, %s, %s, %s;", run.m2, P:def("b32", "mul.f32 %s, %s, %s;", d, d), c, P:def("b32", "add.f32 %s, %s, %s;", run.m2, m2))
end

return M
