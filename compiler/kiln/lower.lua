-- kiln.lower: splits a graph instance into kernel groups. Pointwise nodes fuse into the
-- group of their latest pointwise producer; every other node is a group of its own
-- (engines of later families absorb pointwise prologues and epilogues).
local M = {}

function M.lower(g)
  local groups, group_of_tensor = {}, {}
  for _, node in ipairs(g.nodes) do
    local latest = 0
    for _, uid in pairs(node.inputs) do
      latest = math.max(latest, group_of_tensor[uid] or 0)
    end
    local grp
    if node.def.family == "pointwise" and latest > 0 and groups[latest].family == "pointwise" then
      grp = groups[latest]
    else
      grp = { index = #groups + 1, family = node.def.family, nodes = {} }
      groups[#groups + 1] = grp
    end
    grp.nodes[#grp.nodes + 1] = node
    for _, uid in pairs(node.outputs) do group_of_tensor[uid] = grp.index end
  end
  local consumers = g:consumers()
  for _, grp in ipairs(groups) do
    local produced, inputs, outputs, spills = {}, {}, {}, {}
    for _, node in ipairs(grp.nodes) do
      for _, uid in pairs(node.outputs) do produced[uid] = true end
    end
    local seen = {}
    for _, node in ipairs(grp.nodes) do
      for _, uid in pairs(node.inputs) do
        if not produced[uid] and not seen[uid] then seen[uid] = true; inputs[#inputs + 1] = uid end
      end
      for _, uid in pairs(node.outputs) do
        local t = g.by_uid[uid]
        if t.role == "output" then outputs[#outputs + 1] = uid
        else
          for _, consumer in ipairs(consumers[uid] or {}) do
            if group_of_tensor[uid] ~= nil and not M.in_group(grp, consumer) then spills[#spills + 1] = uid; break end
          end
        end
      end
    end
    table.sort(inputs)
    table.sort(outputs)
    grp.inputs, grp.outputs, grp.spills = inputs, outputs, spills
  end
  return groups
end

function M.in_group(grp, node)
  for _, n in ipairs(grp.nodes) do if n == node then return true end end
  return false
end

return M
