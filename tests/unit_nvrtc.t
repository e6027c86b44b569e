#!/bin/sh
# C unit tests of compiler/nvrtc.c (TAP).
cd "$(dirname "$0")/.." && exec build/tests/test_nvrtc
