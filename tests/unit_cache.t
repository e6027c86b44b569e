#!/bin/sh
# C unit tests of compiler/cache.c (TAP).
cd "$(dirname "$0")/.." && exec build/tests/test_cache
