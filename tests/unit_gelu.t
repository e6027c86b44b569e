#!/bin/sh
# C unit test of the narrow-output GELU (templates/common/gelu.cuh) on the host (TAP).
cd "$(dirname "$0")/.." && exec build/tests/test_gelu
