-- kiln.engines.gdn.engine: Gated DeltaNet (docs/OPS.md §8).
local E = { id = "gdn", version = 1 }

function E.propose(group, g, target)
  local _, _ = g, target
  if group.family ~= "gdn" then return nil, string.format("group is a %s op, not gdn", group.family) end
  return nil, "gdn has no kiln kernel yet"
end

return E
