#!/bin/sh
# C unit tests of compiler/ref*.c (TAP).
cd "$(dirname "$0")/.." && exec build/tests/test_ref
