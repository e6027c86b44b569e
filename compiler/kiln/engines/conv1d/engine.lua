-- kiln.engines.conv1d.engine: causal depthwise conv1d forward and backward (docs/OPS.md §9).
local E = { id = "conv1d", version = 1 }

function E.propose(group, g, target)
  local _, _ = g, target
  if group.family ~= "conv1d" then return nil, string.format("group is a %s op, not conv1d", group.family) end
  return nil, "causal_conv1d has no kiln kernel yet"
end

return E
