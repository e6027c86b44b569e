#!/usr/bin/env bash
# `kiln build --emit-c` output, compiled with plain gcc against libkilnrt, runs a kernel
# on the GPU from an ordinary C program (tests/gpu/emit_c_main.c). Skips without a device.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
plan 3
run_kiln build tests/specs/gpu/add_fp32.lua --sm 80 --sm 90a --sm 100a -o "$TMP/add.kpack" --emit-c "$TMP/gen"
expect_rc 0 "kiln build --emit-c"
cuda=${KILN_CUDA_HOME:-${CUDA_HOME:-/usr/local/cuda}}
ok "the generated C and a plain C main compile and link with gcc against libkilnrt" \
  gcc -std=c11 -Wall -Wextra -Werror -I"$TMP/gen" -Iruntime -I"$cuda/include" tests/gpu/emit_c_main.c "$TMP/gen/add.c" \
      build/libkilnrt.a -ldl -lpthread -lm -o "$TMP/app"
ok "the program runs the embedded kernel and gets y = a + b" "$TMP/app"
done_testing
