#!/bin/sh
# C unit tests of compiler/cache.c: the running size, its collection, an unwritable cache (TAP).
cd "$(dirname "$0")/.." && exec build/tests/test_cache_size
