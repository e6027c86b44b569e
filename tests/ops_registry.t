#!/bin/sh
# The op registry's self-test (shapes, dtypes, attributes, device expressions) in plain Lua.
cd "$(dirname "$0")/.." || exit 1
command -v lua5.4 >/dev/null || { echo "1..0 # SKIP lua5.4 not installed (./configure installs it)"; exit 0; }
exec lua5.4 tests/ops_registry.lua
