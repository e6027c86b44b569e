-- kiln.run: `kiln run SPEC --check [--bench]` — JIT the spec for this machine's GPU, run
-- it on fresh random inputs and compare every output with the reference executor.
local c = require "kiln.c"
local errors = require "kiln.errors"
local plan = require "kiln.plan"

local M = {}

-- Dynamic dims not given with --set: an odd size, so tails and predication are exercised.
local DEFAULT_DYNAMIC = 1031

-- Does instance key "Bt=4,K=1056,N=1032" have every pair of the filter "K=1056,N=1032"?
function M.matches(key, filter)
  if not filter or filter == "" then return true end
  local have = {}
  for pair in key:gmatch("[^,]+") do have[pair] = true end
  for pair in filter:gmatch("[^,]+") do if not have[pair] then return false end end
  return true
end

-- Integer inputs that index their tensors, drawn over their whole range rather than as small
-- random integers: sdpa's lengths (0 to S) and page tables (any block of the container), the
-- sequence boundaries of gdn and the experts' offsets of moe_grouped_matmul. And sdpa_backward's
-- Stats, drawn where a forward's log-sum-exp lies (whole numbers from ln(Skv) up by 2), not as
-- normals: below the scores' own log-sum-exp, P = e^(s - Stats) grows past what the forward
-- gives (1 at most) and bf16 rounding of P outgrows the check's tolerance.
function M.index_ranges(g, dims)
  local function value(d) return math.type(d) == "integer" and d or dims[d] end
  local ranges = {}
  local function add(uid, hi, kind, lo)
    if uid and hi then ranges[#ranges + 1] = { uid = uid, lo = lo or 0, hi = hi, kind = kind } end
  end
  for _, n in ipairs(g.nodes) do
    if n.op == "sdpa_backward" then
      local skv = value(g.by_uid[n.inputs.k].dims[3])
      local lo = skv and math.floor(math.log(math.max(skv, 1)))
      add(n.inputs.stats, lo and lo + 2, 0, lo)
    end
    if n.op == "sdpa" then
      local ins, by = n.inputs, g.by_uid
      local q, k = by[ins.q], by[ins.k]
      local paged = ins.paged_attention_k_table
      add(ins.seq_len_q, value(q.dims[3]))
      add(ins.seq_len_kv, paged and n.attrs.paged_attention_max_seq_len_kv or value(k.dims[3]))
      if paged then
        local blocks = value(k.dims[1])
        add(ins.paged_attention_k_table, blocks and blocks - 1)
        add(ins.paged_attention_v_table, blocks and value(by[ins.v].dims[1]) - 1)
      end
    end
    if n.op == "moe_grouped_matmul" then
      -- experts' first rows: sorted 0 .. T (kind 1), uneven groups, some empty
      add(n.inputs.first_token_offset, value(g.by_uid[n.inputs.token].dims[1]), 1)
    end
    if n.op == "gdn" or n.op == "gdn_bwd" then
      -- sequence boundaries 0 .. T (kind 1, sorted); pool rows distinct (kind 2), so an
      -- in-place state update has one writer a row
      local ins, by = n.inputs, g.by_uid
      add(ins.cu_seqlens, value(by[ins.q].dims[1]), 1)
      add(ins.state_indices, ins.initial_state and value(by[ins.initial_state].dims[1]) and
        value(by[ins.initial_state].dims[1]) - 1, 2)
    end
  end
  return ranges
end

function M.run(args)
  if #args.positional == 0 then errors.raise_at(nil, nil, "E_USAGE", "run needs a SPEC") end
  if not args.check and not args.bench then args.check = true end
  local arch, device = c.device_arch()
  local target = plan.target(args.sm[1] or arch)
  local mismatches, runs = 0, 0
  for _, path in ipairs(args.positional) do
    local graphs = require("kiln.build").load_all({ positional = { path }, set = args.set, graph = args.graph }, { keep_dynamic = true })
    for _, g in ipairs(graphs) do
      if M.matches(g:instance_key(), args.instance) then
      local dims = {}
      for _, name in ipairs(g:dynamic_dims()) do dims[name] = args.set[name] or DEFAULT_DYNAMIC end
      local m = plan.manifest(g, target)
      local jobs = {}
      for i, k in ipairs(m.kernels) do
        jobs[i] = { name = k.symbol .. "_" .. target.arch, symbol = k.symbol, source = k.source, arch = target.arch,
                    options = k.options }
      end
      local results = c.compile(jobs)
      local images = { {} }
      for i, r in ipairs(results) do images[1][i] = r.cubin end
      for _, k in ipairs(m.kernels) do k.source, k.cuda = nil, nil end
      local pack = c.pack_build { { manifest = c.json_encode(m), archs = { target.arch }, images = images } }
      local r = c.run { packs = { pack }, graph = g.name, instance = m.instance, dims = dims, check = args.check,
                        bench = args.bench, iters = tonumber(args.iters or "0") or 0,
                        seed = math.tointeger(tonumber(c.getenv("KILN_SEED") or "0")) or 0,
                        ranges = M.index_ranges(g, dims) }[1]
      mismatches = mismatches + r.mismatched_outputs
      runs = runs + 1
      end
    end
  end
  if runs == 0 then errors.raise_at(nil, nil, "E_USAGE", "no instance matches --instance %s", tostring(args.instance)) end
  io.write(string.format("%d instance%s run on %s (%s)%s\n", runs, runs == 1 and "" or "s", device, target.arch,
    args.check and (mismatches == 0 and ", all outputs match the reference" or "") or ""))
  if mismatches > 0 then
    errors.raise_at(nil, nil, "E_NUMERIC", "%d output%s differ from the reference executor", mismatches, mismatches == 1 and "" or "s")
  end
  return 0
end

return M
