#!/usr/bin/env bash
# add_packs.sh KILN DIR: the packs the launch tests use: DIR/add.kpack (add_fp32 for sm_80,
# sm_90a and sm_100a) and DIR/foreign.kpack, with no image gpu0 runs (sm_100a's for Hopper
# and older, sm_90a's for the rest).
set -euo pipefail
kiln=$1 dir=$2
"$kiln" build tests/specs/gpu/add_fp32.lua --sm 80 --sm 90a --sm 100a -o "$dir/add.kpack" >/dev/null
cc=$("$kiln" env | sed -n 's/^gpu0: .*compute capability \([0-9]*\)\..*/\1/p')
other=100a; [ "${cc:-9}" -ge 10 ] && other=90a
"$kiln" build tests/specs/gpu/add_fp32.lua --sm "$other" -o "$dir/foreign.kpack" >/dev/null
