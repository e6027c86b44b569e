-- kiln.jit: the front end as a library call (compiler/jit.h): spec file, SMs and dim
-- settings in, pack bytes out — compiling only what the cache lacks. Prints nothing but the
-- notes of a plans.lock named by KILN_PLANS_LOCK (kiln.lock) that it passes over.
local build = require "kiln.build"
local record = require "kiln.record"

local M = {}

-- archs: {"sm_90a", ...}; sets: {"H=4096", ...}
function M.build(path, archs, sets)
  require("kiln.lock").use(nil, false)
  local args = { positional = { path }, sm = archs, set = {} }
  for _, s in ipairs(sets) do
    local k, v = s:match("^([%a_][%w_]*)=(%d+)$")
    if not k then require("kiln.errors").raise_at(nil, nil, "E_USAGE", "bad dim setting '%s' (want NAME=N)", s) end
    args.set[k] = math.tointeger(tonumber(v))
  end
  local plans, jobs = build.plans(args)
  build.compile(plans, jobs)
  local bytes = build.pack_bytes(plans, archs)
  record.note(args)
  return bytes
end

return M
