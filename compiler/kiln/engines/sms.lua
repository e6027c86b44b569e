-- kiln.engines.sms: persistent grids sized by the SM count of the device a pack runs on.
-- A plan says "at most per_sm CTAs per SM" as rule fields (sm_mul, sm_div); the runtime
-- applies them with the launching context's SM count (pack format 5), and kernels that
-- need that count (a finalize that sums one partial row per CTA) take it as an "sms" param.
local c = require "kiln.c"

local M = {}

-- The most SMs the runtime ever reports (KILN_PACK_MAX_SMS): sizes that must hold anywhere.
M.MAX = c.max_sms
-- The most SMs of a GPU kiln targets today (a B300's 160; a B200 has 148): what per-CTA
-- slots and unrolled loops are sized for, with a slower path beyond.
M.LARGE = 160

-- Rule fields capping a grid axis or a workspace at max(1, floor(SMS * mul / div)).
function M.cap(mul, div)
  assert(math.type(mul) == "integer" and mul >= 1, "kiln.engines.sms: per-SM multiple must be a positive integer")
  return { sm_mul = mul, sm_div = div or 1 }
end

-- The cap's value on a device of n SMs.
function M.at(cap, n) return math.max(1, n * cap.sm_mul // cap.sm_div) end

-- A rule: { mul = factors, div = div, sm_mul, sm_div } (plus add when given).
function M.rule(mul, div, cap, add)
  return { mul = mul, div = div, sm_mul = cap.sm_mul, sm_div = cap.sm_div, add = add }
end

-- C expression of the cap for a kernel holding the SM count in `sms` (an int64).
function M.expr(cap, sms)
  local v = cap.sm_div > 1 and string.format("%s * %dLL / %d", sms, cap.sm_mul, cap.sm_div)
    or string.format("%s * %dLL", sms, cap.sm_mul)
  return string.format("(%s > 1 ? %s : 1)", v, v)
end

return M
