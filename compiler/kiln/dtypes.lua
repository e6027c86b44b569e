-- kiln.dtypes: the element types kiln knows, their sizes and classes.
local M = {}

M.info = {
  fp32     = { size = 4, float = true },
  fp16     = { size = 2, float = true },
  bf16     = { size = 2, float = true },
  fp8_e4m3 = { size = 1, float = true, fp8 = true },
  fp8_e5m2 = { size = 1, float = true, fp8 = true },
  fp8_e8m0 = { size = 1, float = true, fp8 = true },
  int32    = { size = 4, int = true },
  int64    = { size = 8, int = true },
  bool     = { size = 1, bool = true },
}

-- cuDNN-style spellings users may write.
M.aliases = {
  float = "fp32", float32 = "fp32", half = "fp16", float16 = "fp16", bfloat16 = "bf16",
  e4m3 = "fp8_e4m3", e5m2 = "fp8_e5m2", fp8 = "fp8_e4m3", int = "int32", boolean = "bool",
}

function M.canonical(name)
  if type(name) ~= "string" then return nil end
  name = name:lower()
  name = M.aliases[name] or name
  return M.info[name] and name or nil
end

function M.size(name) return M.info[name].size end

function M.names()
  local t = {}
  for k in pairs(M.info) do t[#t + 1] = k end
  table.sort(t)
  return t
end

return M
