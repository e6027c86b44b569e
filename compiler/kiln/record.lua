-- kiln.record: with KILN_RECORD=FILE every build (`kiln build`, the JIT library, the Python
-- binding's kiln.build) appends what it built to FILE, one JSON line a spec: the spec's
-- absolute path, its dim settings, the graphs asked for and the SMs. `kiln build --from FILE`
-- builds that set again, ahead of time, into one pack: a deployment warmed once ships it and
-- needs no compiler.
local c = require "kiln.c"
local errors = require "kiln.errors"

local M = {}

M.SCHEMA = "kiln.record"

-- Appends the builds of args (positional specs, set, graph, sm) to $KILN_RECORD, if set.
function M.note(args)
  local path = c.getenv("KILN_RECORD")
  if not path or path == "" then return end
  for _, spec in ipairs(args.positional) do
    local set = {}
    for k, v in pairs(args.set or {}) do set[#set + 1] = string.format("%s=%d", k, v) end
    table.sort(set)
    local graph = {}
    for _, g in ipairs(args.graph or {}) do graph[#graph + 1] = g end
    c.append_line(path, c.json_encode({ schema = M.SCHEMA, spec = c.realpath(spec) or spec,
      set = c.json_array(set), graph = c.json_array(graph), sm = c.json_array(args.sm) }))
  end
end

local function bad(path, n, fmt, ...)
  errors.raise_at(path, n, "E_JSON", fmt, ...)
end

-- The builds a record file holds, one per distinct (spec, settings, graphs), each with the
-- SMs of every line that named it: { positional = { spec }, set = {...}, graph = {...}, sm = {...} }.
function M.read(path)
  local text, err = c.read_file(path)
  if not text then errors.raise_at(nil, nil, "E_IO", "cannot read the record %s", err) end
  local builds, by_key, n = {}, {}, 0
  for line in text:gmatch("[^\n]+") do
    n = n + 1
    local ok, r = pcall(c.json_decode, line)
    if not ok or type(r) ~= "table" or r.schema ~= M.SCHEMA or type(r.spec) ~= "string" then
      bad(path, n, "not a kiln build record (want one JSON object a line with schema '%s')", M.SCHEMA)
    end
    local set = {}
    for _, s in ipairs(r.set or {}) do
      local k, v = tostring(s):match("^([%a_][%w_]*)=(%d+)$")
      if not k then bad(path, n, "bad dim setting '%s'", tostring(s)) end
      set[k] = math.tointeger(tonumber(v))
    end
    local key = table.concat({ r.spec, table.concat(r.set or {}, ","), table.concat(r.graph or {}, ",") }, "|")
    local b = by_key[key]
    if not b then
      b = { positional = { r.spec }, set = set, graph = {}, sm = {}, seen = {} }
      for _, g in ipairs(r.graph or {}) do b.graph[#b.graph + 1] = g end
      by_key[key] = b
      builds[#builds + 1] = b
    end
    for _, sm in ipairs(r.sm or {}) do
      if not b.seen[sm] then b.seen[sm], b.sm[#b.sm + 1] = true, sm end
    end
  end
  if #builds == 0 then errors.raise_at(nil, nil, "E_USAGE", "the record %s holds no build", path) end
  return builds
end

return M
