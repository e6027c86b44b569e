-- kiln.engines.gdn.chunk: the chunked GDN forward (chunks of 64 tokens, WY form).
local M = {}

-- Plans for problem P on target (none yet).
function M.propose(P, target)
  local _, _ = P, target
  return {}
end

return M
