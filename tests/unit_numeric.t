#!/bin/sh
# C unit tests of compiler/numeric*.c (TAP).
cd "$(dirname "$0")/.." && exec build/tests/test_numeric
