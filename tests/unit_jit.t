#!/bin/sh
# kiln as a library: kiln_jit_build from C (TAP).
cd "$(dirname "$0")/.." && exec build/tests/test_jit
