-- kiln.graphjson: reads graph JSON (docs/INTERNALS.md) back into a graph, rejecting
-- malformed versions, duplicate UIDs, dangling references and inconsistent shapes.
local c = require "kiln.c"
local errors = require "kiln.errors"
local dtypes = require "kiln.dtypes"
local graph = require "kiln.graph"
local ops = require "kiln.ops"
local shape = require "kiln.shape"

local M = {}

local ROLES = { input = true, output = true, virtual = true, constant = true, scalar = true }

-- One graph of decoded graph JSON; what names it in errors ("" or " (graph #2)").
local function parse_graph(data, path, what)
  local function fail(code, fmt, ...) errors.raise_at(path, nil, code, "%s" .. fmt, what, ...) end
  if type(data) ~= "table" then fail("E_JSON", "graph JSON must be an object") end
  if data.schema ~= "kiln.graph" then fail("E_JSON_VERSION", "schema is '%s', expected 'kiln.graph'", tostring(data.schema)) end
  if data.version ~= 1 then fail("E_JSON_VERSION", "graph JSON version %s is not supported (this kiln reads version 1)", tostring(data.version)) end
  if type(data.name) ~= "string" then fail("E_JSON", "graph has no name") end
  if type(data.tensors) ~= "table" or type(data.nodes) ~= "table" then fail("E_JSON", "graph needs 'tensors' and 'nodes' arrays") end
  local dims = {}
  for name, d in pairs(type(data.dims) == "table" and data.dims or {}) do
    if type(d) ~= "table" or (d.kind ~= "dynamic" and d.kind ~= "fixed") then fail("E_JSON", "dim '%s' must have kind dynamic or fixed", tostring(name)) end
    if d.kind == "fixed" and (math.type(d.value) ~= "integer" or d.value <= 0) then fail("E_JSON", "fixed dim '%s' needs a positive integer value", name) end
    dims[name] = { kind = d.kind, value = d.value }
  end
  local function dtype_of(v, what)
    return dtypes.canonical(v) or fail("E_DTYPE", "%s: unknown dtype '%s'", what, tostring(v))
  end
  local g = graph.new { name = data.name, io_dtype = dtype_of(data.io_dtype or "fp32", "io_dtype"),
                        intermediate_dtype = dtype_of(data.intermediate_dtype or "fp32", "intermediate_dtype"),
                        compute_dtype = dtype_of(data.compute_dtype or "fp32", "compute_dtype"), dims = dims }
  local function check_dims(list, what, allow_product)
    if type(list) ~= "table" then fail("E_JSON", "%s must be an array", what) end
    local out = {}
    for i, d in ipairs(list) do
      if math.type(d) == "integer" and d > 0 then out[i] = d
      elseif math.type(d) == "integer" and d >= 0 and allow_product then out[i] = d
      elseif type(d) == "string" then
        for name in d:gmatch("[^*]+") do
          if not name:match("^%d+$") and not (dims[name] and dims[name].kind == "dynamic") then
            fail("E_DANGLING", "%s refers to unknown dynamic dim '%s'", what, name)
          end
        end
        if not allow_product and not dims[d] then fail("E_DANGLING", "%s refers to unknown dim '%s'", what, d) end
        out[i] = d
      else fail("E_JSON", "%s has a bad entry %s", what, tostring(d)) end
    end
    return out
  end
  for i, t in ipairs(data.tensors) do
    local what = "tensor #" .. i
    if type(t) ~= "table" then fail("E_JSON", "%s is not an object", what) end
    if math.type(t.uid) ~= "integer" or t.uid <= 0 then fail("E_JSON", "%s has no positive integer uid", what) end
    if g.by_uid[t.uid] then fail("E_UID", "duplicate uid %d", t.uid) end
    if not ROLES[t.role] then fail("E_JSON", "tensor %d has unknown role '%s'", t.uid, tostring(t.role)) end
    local tdims = check_dims(t.dims, "tensor " .. t.uid .. " dims")
    local strides = t.strides and check_dims(t.strides, "tensor " .. t.uid .. " strides", true) or nil
    if strides and #strides ~= #tdims then fail("E_SHAPE", "tensor %d has %d dims but %d strides", t.uid, #tdims, #strides) end
    if t.role == "constant" and type(t.value) ~= "number" then fail("E_JSON", "constant tensor %d needs a numeric value", t.uid) end
    g:add_tensor { uid = t.uid, name = type(t.name) == "string" and t.name or ("t" .. t.uid),
                   dtype = dtype_of(t.dtype, "tensor " .. t.uid), dims = tdims, strides = strides, role = t.role,
                   value = t.value }
  end
  local produced = {}
  for i, n in ipairs(data.nodes) do
    if type(n) ~= "table" or type(n.op) ~= "string" then fail("E_JSON", "node #%d has no op", i) end
    local def = ops.by_name[n.op] or fail("E_UNKNOWN_OP", "node #%d: unknown op '%s'", i, n.op)
    local name = type(n.name) == "string" and n.name or (n.op .. "_" .. i)
    local where = string.format("%s '%s'", def.name, name)
    local ins, inputs, outputs = {}, {}, {}
    for port, uid in pairs(type(n.inputs) == "table" and n.inputs or {}) do
      local t = g.by_uid[uid] or fail("E_DANGLING", "%s: input '%s' refers to missing uid %s", where, port, tostring(uid))
      if t.role ~= "input" and t.role ~= "constant" and t.role ~= "scalar" and not produced[uid] then
        fail("E_CYCLE", "%s: input '%s' (uid %d) is used before the node that produces it", where, port, uid)
      end
      ins[port] = t
      inputs[port] = uid
    end
    local known = {}
    for _, p in ipairs(def.input_ports) do
      known[p.name] = true
      if not ins[p.name] and not p.optional then fail("E_PORT", "%s: missing input '%s'", where, p.name) end
    end
    for port in pairs(ins) do if not known[port] then fail("E_PORT", "%s: unknown input port '%s'", where, port) end end
    local attrs = graph.check_attrs(def, type(n.attrs) == "table" and n.attrs or {}, where)
    local compute = n.compute_dtype and dtype_of(n.compute_dtype, where .. " compute_dtype") or g.compute_dtype
    local inferred = def.infer(graph.make_ctx(g, where, compute), ins, attrs) or {}
    for _, p in ipairs(def.output_ports) do
      local uid = type(n.outputs) == "table" and n.outputs[p.name]
      if uid then
        local t = g.by_uid[uid] or fail("E_DANGLING", "%s: output '%s' refers to missing uid %s", where, p.name, tostring(uid))
        if produced[uid] then fail("E_JSON", "%s: tensor %d has two producers", where, uid) end
        if t.role ~= "output" and t.role ~= "virtual" then fail("E_JSON", "%s: output %d has role %s", where, uid, t.role) end
        local want = inferred[p.name]
        if not want then fail("E_PORT", "%s: output '%s' is not produced with these inputs and attributes", where, p.name) end
        if shape.format(want.dims) ~= shape.format(t.dims) then
          fail("E_SHAPE", "%s: output '%s' (uid %d) is declared %s but the op makes %s", where, p.name, uid, shape.format(t.dims), shape.format(want.dims))
        end
        produced[uid] = true
        outputs[p.name] = uid
      elseif not p.optional then
        fail("E_PORT", "%s: missing output '%s'", where, p.name)
      end
    end
    local node = { op = def.name, name = name, inputs = inputs, outputs = outputs, attrs = attrs, compute_dtype = compute, def = def }
    for _, uid in pairs(outputs) do g.producers[uid] = node end
    g.nodes[#g.nodes + 1] = node
  end
  for _, t in ipairs(g.tensors) do
    if (t.role == "output" or t.role == "virtual") and not produced[t.uid] then
      fail("E_DANGLING", "tensor %d ('%s') is an %s that no node produces", t.uid, t.name, t.role)
    end
  end
  return g
end

-- Returns the graph of a graph JSON object, or one graph per element of an array of them
-- (what `kiln check --json` prints for a spec of several instances), as several results.
function M.parse(text, path)
  local ok, data = pcall(c.json_decode, text)
  if not ok then
    local e = errors.from_lua(data, "E_JSON")
    e.file = path
    error(e, 0)
  end
  if type(data) ~= "table" or data.schema ~= nil or #data == 0 then return parse_graph(data, path, "") end
  local graphs = {}
  for i, one in ipairs(data) do graphs[i] = parse_graph(one, path, string.format("graph #%d: ", i)) end
  return table.unpack(graphs)
end

return M
