#!/usr/bin/env bash
# The GDN engine's chunked forward (kiln.engines.gdn.chunk, templates/gdn_chunk.cuh): every graph
# of tests/specs/gdn/chunk.lua and the shipped GDN prefill spec build for sm_80, sm_90a and
# sm_100a on the chunk plans, ptxas spills nothing, the plan of 128 state rows a CTA where shared
# memory allows it (not sm_80), the in-place pool update forced onto the chunk kernel, head dims
# past 128 left to the recurrent kernel (cold compile time per chunk kernel: tests/timing/compile_times.t). The split chunked
# plans (kiln.engines.gdn.chunk_split: pre-pass, state pass, output): offered ahead of the fused
# ones where T or the cu_seqlens length is static, forced by KILN_PLAN, three kernels a group, built for every target without spills,
# declined where T and the cu_seqlens length are both dynamic. Correctness runs on
# the GPU (tests/gpu/steps/gdn.sh: every graph of tests/specs/gdn/chunk.lua against the fp64
# reference).
. "$(dirname "$0")/lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
spec=tests/specs/gdn/chunk.lua
plan 27

KILN_PLAN=gdn:v1:chunk:c64:bv64 KILN_DUMP_DIR=$TMP/dump run_kiln build $spec --sm 80 --sm 90a --sm 100a -o "$TMP/chunk.kpack" -j 2
expect_rc 0 "build $spec for sm_80 sm_90a sm_100a"
for sm in 90a 80 100a; do
  run_kiln explain $spec --sm $sm
  groups=$(grep -c '^  group .*(gdn)' "$OUTF"); chunk=$(grep -c '(gdn): plan gdn:v1:chunk:c64:bv64$' "$OUTF")
  split=$(grep -c '(gdn): plan gdn:v1:chunk:split:c64:bv16$' "$OUTF")
  ok "explain sm_$sm: $split of $groups gdn groups take the split plan bv16 (3 sequences x 4 heads), $chunk the fused plan (T and N dynamic)" \
    test "$groups" = 4 -a "$split" = 3 -a "$chunk" = 1
done

# sm_80's 163 KB take no plan of 128 state rows (179 KB at K = V = 128); sm_90a's 227 KB do
run_kiln explain $spec --graph gva_d128_safe --sm 80
ok "sm_80: no bv128 plan (shared memory)" test "$(grep -c 'chunk:c64:bv128' "$OUTF")" = 0
KILN_PLAN=gdn:v1:chunk:c64:bv128 run_kiln explain $spec --graph gva_d128_safe --sm 90a
expect_out "plan gdn:v1:chunk:c64:bv128$" "KILN_PLAN forces the plan of 128 state rows a CTA on sm_90a"
KILN_PLAN=gdn:v1:chunk:c64:bv128 KILN_DUMP_DIR=$TMP/dump run_kiln build $spec --graph gqa_pool_bf16 --sm 90a --sm 100a \
  -o "$TMP/bv128.kpack" -j 2
expect_rc 0 "the bv128 kernel builds for sm_90a and sm_100a"

# the shipped prefill spec (dynamic T) on the split plan; the decode spec's in-place pool
# update (overwrite_initial_state) forced onto the fused chunk plan
run_kiln explain specs/gdn_layer.lua --sm 90a
expect_out "plan gdn:v1:chunk:split:c64:bv64$" "specs/gdn_layer.lua takes the split plan"
KILN_DUMP_DIR=$TMP/dump run_kiln build specs/gdn_layer.lua --sm 80 --sm 90a --sm 100a -o "$TMP/layer.kpack" -j 2
expect_rc 0 "specs/gdn_layer.lua builds for sm_80 sm_90a sm_100a"
KILN_PLAN=gdn:v1:chunk:c64:bv64 KILN_DUMP_DIR=$TMP/dump run_kiln build specs/gdn_decode.lua --sm 80 --sm 90a --sm 100a \
  -o "$TMP/decode.kpack" -j 2
expect_rc 0 "specs/gdn_decode.lua (state pool, overwrite) builds on the chunk plan"
KILN_PLAN=gdn:v1:chunk:c64:bv64 run_kiln explain specs/gdn_decode.lua --sm 90a
expect_out "plan gdn:v1:chunk:c64:bv64$" "KILN_PLAN forces the chunk plan on the decode spec"

# spills: none in any kernel built above
logs=$(grep -l 'chunked forward' "$TMP"/dump/*.cu 2>/dev/null | sed 's/\.cu$/.log/')
ok "the ptxas reports of the chunk kernels were kept ($(echo $logs | wc -w) kernels)" test "$(echo $logs | wc -w)" -ge 18
spilled=$(grep -L ' 0 bytes spill stores, 0 bytes spill loads' $logs 2>/dev/null | xargs -r -n1 basename)
ok "ptxas spills nothing in the chunk kernels (spilled: $(echo $spilled))" test -z "$spilled"
echo "# registers a thread: $(grep -ho 'Used [0-9]* registers' $logs | awk '{print $2}' | sort -n | uniq | tr '\n' ' ')"

# the split chunked plans: ranked ahead of the fused ones, another forced by KILN_PLAN (three kernels)
SPLIT=gdn:v1:chunk:split:c64:bv32
run_kiln explain $spec --graph gva_d128_safe --sm 90a
ok "split plans offered before the fused chunk plans (3 sequences x 4 heads: bv16 leads)" \
  sh -c "grep -q 'accepted: gdn:v1:chunk:split:c64:bv16, gdn:v1:chunk:split:c64:bv32, gdn:v1:chunk:split:c64:bv64, gdn:v1:chunk:c64:bv64, gdn:v1:chunk:c64:bv128' '$OUTF'"
expect_out "plan gdn:v1:chunk:split:c64:bv16$" "the split plan leads"
KILN_PLAN=$SPLIT run_kiln explain $spec --graph gva_d128_safe --sm 90a
expect_out "plan $SPLIT$" "KILN_PLAN forces the split plan"
ok "the split plan builds three kernels (pre-pass, state pass, output)" \
  sh -c "grep -q 'kernel kiln_gva_d128_safe_k0_prep:' '$OUTF' && grep -q 'kernel kiln_gva_d128_safe_k0:' '$OUTF' && grep -q 'kernel kiln_gva_d128_safe_k0_out:' '$OUTF'"
run_kiln explain $spec --graph d64_fp16_linear --sm 90a
ok "T and the cu_seqlens length both dynamic: no split plan" sh -c "! grep -q 'chunk:split' '$OUTF'"
KILN_PLAN=$SPLIT KILN_DUMP_DIR=$TMP/split run_kiln build $spec --sm 80 --sm 90a --sm 100a -o "$TMP/split.kpack" -j 2
expect_rc 0 "chunk.lua builds on the split plan bv32 for sm_80 sm_90a sm_100a"
for p in gqa_pool_bf16=bv64 k64_v128_scale=bv16; do
  KILN_PLAN=gdn:v1:chunk:split:c64:${p#*=} KILN_DUMP_DIR=$TMP/split run_kiln build $spec --graph ${p%=*} --sm 80 --sm 90a --sm 100a \
    -o "$TMP/split_${p#*=}.kpack" -j 2
  expect_rc 0 "the split plan ${p#*=} builds for sm_80 sm_90a sm_100a (${p%=*})"
done
KILN_PLAN=$SPLIT KILN_DUMP_DIR=$TMP/split run_kiln build specs/gdn_layer.lua tests/specs/gdn/bench.lua --sm 90a -o "$TMP/split_layer.kpack" -j 2
expect_rc 0 "specs/gdn_layer.lua and tests/specs/gdn/bench.lua build on the split plan"
KILN_PLAN=$SPLIT run_kiln explain specs/gdn_layer.lua --sm 90a
expect_out "plan $SPLIT$" "specs/gdn_layer.lua takes the forced split plan"
# (kernels the default-ranked builds above compiled first were dumped there, not here: the cache)
slogs=$(grep -l 'split chunked forward, ' "$TMP"/split/*.cu "$TMP"/dump/*.cu 2>/dev/null | sed 's/\.cu$/.log/')
ok "the ptxas reports of the split kernels were kept ($(echo $slogs | wc -w) kernels)" test "$(echo $slogs | wc -w)" -ge 33
spilled=$(grep -L ' 0 bytes spill stores, 0 bytes spill loads' $slogs 2>/dev/null | xargs -r -n1 basename)
ok "ptxas spills nothing in the split kernels (spilled: $(echo $spilled))" test -z "$spilled"
echo "# split kernels, registers a thread: $(grep -ho 'Used [0-9]* registers' $slogs | awk '{print $2}' | sort -n | uniq | tr '\n' ' ')"

# head dims past 128: the chunk kernel declines, the recurrent one takes the group
cat > "$TMP/d256.lua" <<'EOF'
local k = require "kiln"
return k.graph "d256" {
  dims = { T = k.dynamic }, dtype = "bf16",
  inputs = { q = { "T", 2, 256 }, kk = { "T", 2, 256 }, v = { "T", 2, 256 }, g = { "T", 2, dtype = "fp32" },
             b = { "T", 2 }, cu = { 3, dtype = "int32" } },
  body = function(gr, q, kk, v, g, b, cu)
    return { o = gr:gdn(q, kk, v, g, b, cu, { safe_gate = true, use_beta_sigmoid = true, use_qk_l2norm = true }) }
  end,
}
EOF
run_kiln explain "$TMP/d256.lua" --sm 90a
ok "K = V = 256: no chunk plan, the recurrent kernel takes it" \
  sh -c "! grep -q 'chunk:' '$OUTF' && grep -q 'plan gdn:v1:recurrent' '$OUTF'"
KILN_PLAN=gdn:v1:chunk:c64:bv64 run_kiln explain "$TMP/d256.lua" --sm 90a
ok "K = V = 256: KILN_PLAN cannot force a chunk plan" sh -c "! grep -q 'plan gdn:v1:chunk' '$OUTF'"

done_testing
