-- kiln.shape: dims whose entries are integers (fixed) or names (dynamic dims).
local M = {}

function M.same_dim(a, b) return a == b end

function M.copy(dims)
  local t = {}
  for i, d in ipairs(dims) do t[i] = d end
  return t
end

function M.format(dims)
  local t = {}
  for i, d in ipairs(dims or {}) do t[i] = tostring(d) end
  return "[" .. table.concat(t, ", ") .. "]"
end

-- A product of dims as {names..., const}: the normal form of sizes and strides.
function M.product(dims, from, to)
  local names, const = {}, 1
  for i = from or 1, to or #dims do
    local d = dims[i]
    if type(d) == "string" then names[#names + 1] = d else const = const * d end
  end
  return names, const
end

-- Formats a product as an integer or "T*4096" (the stride form of graph JSON).
function M.product_value(names, const)
  if #names == 0 then return const end
  local parts = {}
  for i, n in ipairs(names) do parts[i] = n end
  if const ~= 1 then parts[#parts + 1] = tostring(const) end
  return table.concat(parts, "*")
end

function M.row_major(dims)
  local s = {}
  for i = #dims, 1, -1 do s[i] = M.product_value(M.product(dims, i + 1, #dims)) end
  return s
end

function M.is_row_major(dims, strides)
  local rm = M.row_major(dims)
  for i = 1, #dims do
    if dims[i] ~= 1 and rm[i] ~= strides[i] then return false end
  end
  return true
end

-- Numpy broadcasting, right-aligned. Returns dims, or nil and the reason.
function M.broadcast(a, b)
  local n = math.max(#a, #b)
  local out = {}
  for i = 1, n do
    local x = a[#a - n + i] or 1
    local y = b[#b - n + i] or 1
    if x == y then out[i] = x
    elseif x == 1 then out[i] = y
    elseif y == 1 then out[i] = x
    else
      return nil, string.format("cannot broadcast %s with %s (axis %d: %s vs %s)", M.format(a), M.format(b), i - 1,
        tostring(x), tostring(y))
    end
  end
  return out
end

-- Substitutes values for dim names: dims {"T", 4096} with {T = 8} -> {8, 4096}.
function M.bind(dims, values)
  local out = {}
  for i, d in ipairs(dims) do out[i] = type(d) == "string" and values[d] or d end
  return out
end

return M
