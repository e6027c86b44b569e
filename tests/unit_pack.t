#!/bin/sh
# C unit tests of the pack format, libkilnrt (no GPU needed) and emit-c (TAP).
cd "$(dirname "$0")/.." && exec build/tests/test_pack
