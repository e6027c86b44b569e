#!/usr/bin/env bash
# The memory-bound engines (row: norms, softmax, row reductions; colreduce; axisreduce): every such spec
# is taken by them (explain), fused as one kernel group where it should be, builds for sm_80,
# sm_90a and sm_100a, gives the same source in every process, and declines clearly where it
# cannot fuse (cold compile times: tests/timing/compile_times.t).
. "$(dirname "$0")/lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || [ -n "${KILN_NVRTC_PATH:-}" ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
use_shared_cache   # (the cold compile timings below take caches of their own)
specs=(specs/rmsnorm.lua specs/rmsnorm_residual.lua specs/rmsnorm_residual_fp8.lua specs/rmsnorm_residual_fp8_rowwise.lua
       specs/add_rmsnorm_silu_gate.lua
       specs/layernorm.lua specs/layernorm_bwd.lua specs/softmax.lua specs/softmax_bwd.lua
       tests/specs/mem/reduce.lua tests/specs/mem/variants.lua tests/specs/mem/forward.lua tests/specs/mem/backward.lua
       tests/specs/mem/rowred.lua tests/specs/mem/reduce_sweep.lua tests/specs/mem/norm_axes.lua
       tests/specs/mem/softmax_axes.lua tests/specs/mem/batchnorm.lua tests/specs/mem/norm_bwd_axes.lua
       tests/specs/mem/row_epilogue.lua tests/specs/mem/odd_vectors.lua tests/specs/mem/masks.lua
       specs/rmsnorm_fp8_block.lua tests/specs/mem/quantize.lua tests/specs/mem/unit_axes.lua)
# spec | --set | what the instance exercises
edges=("specs/rmsnorm.lua H=128 sub-warp rows" "specs/rmsnorm.lua H=100 4-wide vectors, ragged"
       "specs/add_rmsnorm_silu_gate.lua H=65536 re-read row, fp32 prologue value"
       "specs/softmax.lua H=65536 online softmax, re-read row" "specs/layernorm_bwd.lua H=16384 backward, 1 row per CTA"
       "specs/softmax_bwd.lua H=11008 ragged vectors" "tests/specs/mem/reduce.lua H=96 narrow rows and columns")
# spec | ops that must share one kernel group
fused=("specs/rmsnorm_residual.lua add rmsnorm" "specs/rmsnorm_residual_fp8.lua add rmsnorm mul identity reduction"
       "specs/rmsnorm_residual_fp8_rowwise.lua add rmsnorm reduction max mul identity div identity"
       "tests/specs/mem/rowred.lua layernorm swish reduction max min mul identity swish div identity"
       "tests/specs/mem/rowred.lua rmsnorm mul reduction reduction div identity sub"
       "specs/add_rmsnorm_silu_gate.lua add rmsnorm swish mul" "tests/specs/mem/variants.lua mul add layernorm gelu"
       "tests/specs/mem/variants.lua softmax_backward add"
       "specs/rmsnorm_fp8_block.lua rmsnorm block_scale_quantize"
       "tests/specs/mem/quantize.lua add rmsnorm block_scale_quantize" "tests/specs/mem/quantize.lua layernorm block_scale_quantize"
       "tests/specs/mem/quantize.lua rmsnorm swish mul block_scale_quantize")
plan $(( ${#specs[@]} * 4 + ${#edges[@]} + ${#fused[@]} + 223 + 27 ))

for s in "${specs[@]}"; do
  run_kiln explain "$s"
  if grep -q "NO ENGINE" "$OUTF" || ! grep -Eq "^ +(row|colreduce|axisreduce|axissoftmax) +accepted" "$OUTF"; then
    fail "explain $s: the reduction engines take every group"; sed 's/^/#   /' "$OUTF" | head -20
  else
    pass "explain $s: the reduction engines take every group"
  fi
  run_kiln build "$s" --sm 80 --sm 90a --sm 100a -v
  expect_rc 0 "build $s for sm_80 sm_90a sm_100a"
  run_kiln source "$s"; cp "$OUTF" "$TMP/src1"
  run_kiln source "$s"; cp "$OUTF" "$TMP/src2"
  ok "kiln source $s is the same in two processes" cmp -s "$TMP/src1" "$TMP/src2"
  ok "kiln source $s is header-free" bash -c "! grep -q '#include' '$TMP/src1'"
done

for e in "${edges[@]}"; do
  set -- $e
  run_kiln build "$1" --set "$2" --sm 80 --sm 90a --sm 100a
  expect_rc 0 "build $1 --set $2 (${*:3})"
done

for f in "${fused[@]}"; do
  set -- $f
  spec=$1; shift
  run_kiln explain "$spec"
  expect_out "group 0 \($*\): plan (row|colreduce):" "$spec: $* fuse into one kernel"
done

# instance norm and adaptive layer norm: layer norms over their own axes, scale and bias per channel
# (one value a row, at row % C) or per sample (a row of columns at (row / S) * D), body in PTX
run_kiln source tests/specs/mem/norm_axes.lua --sm 90a
ok "instance norm and adaptive layer norm run as row kernels with their body in PTX, under a dynamic sequence length too" \
  test "$(grep -c '^// kiln row engine: \(instancenorm\|adalayernorm\);.*body in PTX\.$' "$OUTF")" = 6
run_kiln source tests/specs/mem/norm_axes.lua --graph adaln_dynamic_seq --sm 90a --ptx
ok "a dynamic sequence length: the row's sample is row / T, divided once a row by the kernel's T (no division per element)" \
  bash -c "grep -q 'compiled as a PTX module' '$OUTF' && test \$(grep -c 'div.u32 %kr[0-9]*, %kr[0-9]*, %kr[0-9]*;' '$OUTF') = 2 && ! grep -q 'div.[us]64' '$OUTF'"
KILN_PLAN=*.code=cuda run_kiln source tests/specs/mem/norm_axes.lua --graph adaln_dynamic_seq --sm 90a
ok "and in the CUDA form: the per-sample row's start once a row, read by vectors" \
  bash -c "grep -q 'const kiln_i64 s[0-9]*_ = (row / (kiln_i64)((dim_T))) \* 1024LL;' '$OUTF' && ! grep -q '/ (dim_T\*1024)' '$OUTF'"
run_kiln source tests/specs/mem/norm_axes.lua --sm 90a
ok "per channel: the row's channel is row % C" grep -q 'rem.u32 %%kr[0-9]*, %%kr[0-9]*, 8;' "$OUTF"
ok "per sample: the row's sample is row / S, a row of D columns on" \
  bash -c "grep -A1 'div.u32 %%kr[0-9]*, %%kr[0-9]*, 5;' '$OUTF' | grep -q 'mad.wide.u32 %%kd[0-9]*, %%kr[0-9]*, 4096,'"
run_kiln explain tests/specs/mem/norm_axes.lua --sm 90a
ok "statistics per (sample, channel) over the spatial axes: instancenorm of [T, 3, 7, 143] rows of 1001" \
  grep -q 'group 0 (instancenorm): plan row:v1:instancenorm:p256n4v1r1:regs' "$OUTF"
ok "batch norm in inference is elementwise: one pointwise kernel with its ReLU" \
  grep -q 'group 0 (batchnorm_inference relu): plan pointwise:' "$OUTF"

cat > "$TMP/norm_missing.lua" <<EOF
local k = require "kiln"
return k.graph "norm_missing" { dims = { N = k.dynamic, C = { 8 }, HW = { 64 } }, dtype = "bf16",
  inputs = { x = { "N", "C", "HW" }, g = { 1, "C", 1 }, b = { 1, "C", 1 } },
  body = function(G, x, g, b) return { y = G:batchnorm(x, g, b, { epsilon = 1e-5, name = "bn" }) } end }
EOF
run_kiln explain "$TMP/norm_missing.lua" --sm 90a
expect_out "group 0 \(reduction\): plan axisreduce" "batch norm in training is built from its decomposition (no norm kernel of its own)"

# softmax over a non-last axis (axissoftmax.lua): staged in shared memory where the CTA's rows fit,
# else read again; the row engine declines it by name
run_kiln explain tests/specs/mem/softmax_axes.lua --sm 90a
ok "softmax over channels and a middle axis staged in shared memory (300 bf16 rows of 64 columns, 21 fp32 of 256)" \
  bash -c "grep -q 'plan axissoftmax:v1:softmax:b256v8s32:staged$' '$OUTF' && grep -q 'plan axissoftmax:v1:log_softmax:b256v1s1:staged$' '$OUTF'"
ok "rows that do not fit, or an epilogue reading memory: x read again" \
  bash -c "grep -q 'plan axissoftmax:v1:log_softmax_backward:b256v8s32:reread$' '$OUTF' && grep -q '(mul add softmax mul identity): plan axissoftmax:v1:softmax:b256v4s2:reread$' '$OUTF'"
ok "the row engine declines a softmax over axis 1" grep -q 'row        declined: softmax over axis 1, not the last axis' "$OUTF"
ok "axis 0 of [37, T, 40]: vectors of 8 from the columns' compile-time factor" grep -q 'plan axissoftmax:v1:softmax:b256v8s1:staged$' "$OUTF"
ok "axissoftmax ranks every split below its choice, staged where it fits and re-read" \
  grep -q 'axissoftmax accepted: axissoftmax:v1:softmax:b256v8s32:staged, axissoftmax:v1:softmax:b256v8s32:reread, axissoftmax:v1:softmax:b256v8s1:reread, .*, axissoftmax:v1:softmax:b256v8s16:reread$' "$OUTF"
KILN_PLAN=axissoftmax:v1:softmax:b256v8s32:reread run_kiln explain tests/specs/mem/softmax_axes.lua --graph softmax_mid_bf16 --sm 90a
expect_out "plan axissoftmax:v1:softmax:b256v8s32:reread$" "KILN_PLAN forces the re-read candidate of a staged softmax over an axis"
run_kiln explain tests/specs/mem/reduce.lua --graph col_avg --sm 90a
expect_out "colreduce  accepted: colreduce:v1:avg:lead:p128n4v8r4, colreduce:v1:avg:lead:p128n4v8r4:rows1, .*:rows8:ctas1$" \
  "colreduce ranks every rows-a-slot and CTAs-an-SM knob below its default"
KILN_PLAN=colreduce:v1:avg:lead:p128n4v8r4:rows4:ctas1 run_kiln source tests/specs/mem/reduce.lua --graph col_avg --sm 90a
ok "KILN_PLAN forces a column reduction of 4 rows a slot, one CTA an SM, by id" \
  grep -q '^// ---- col_avg .*plan colreduce:v1:avg:lead:p128n4v8r4:rows4:ctas1,' "$OUTF"
KILN_PLAN=colreduce.ctas=1 run_kiln explain tests/specs/mem/reduce.lua --graph col_avg --sm 90a
expect_out "plan colreduce:v1:avg:lead:p128n4v8r4:ctas1$" "... and by knob (colreduce.ctas=1: the best-ranked such, its rows the default)"
KILN_PLAN=axissoftmax.staged=false,axissoftmax.RS=8 run_kiln explain tests/specs/mem/softmax_axes.lua --graph softmax_mid_bf16 --sm 90a
expect_out "plan axissoftmax:v1:softmax:b256v8s8:reread$" "KILN_PLAN knob filters combine (axissoftmax.staged=false,axissoftmax.RS=8)"
KILN_PLAN=colreduced.rows=4 run_kiln explain tests/specs/mem/reduce.lua --graph col_avg --sm 90a
expect_err "E_USAGE: KILN_PLAN: no engine 'colreduced'" "a knob filter naming no engine is a usage error, not a quiet default"
cat > "$TMP/sink_axis.lua" <<EOF
local k = require "kiln"
return k.graph "sink_axis" { dims = { T = k.dynamic, S = { 16 }, H = { 64 } }, dtype = "bf16",
  inputs = { x = { "T", "S", "H" }, s = { "T", 1, "H", dtype = "fp32" } },
  body = function(g, x, s) return { y = g:softmax(x, s, { axis = 1 }) } end }
EOF
run_kiln explain "$TMP/sink_axis.lua" --sm 90a
expect_out "axissoftmax declined: a sink logit over a non-last axis" "a sink logit over a non-last axis is declined by name"
run_kiln source tests/specs/mem/softmax_axes.lua --sm 90a --ptx
ok "softmax over other axes: PTX modules (7 kernels), columns of a dynamic count too (axis 0 of [37, T, 40])" \
  bash -c "test \$(grep -c '^// ---- .*plan axissoftmax.*compiled as a PTX module' '$OUTF') = 7 &&
           grep -q '^// ---- softmax_axis0_fp16 .*plan axissoftmax:v1:softmax:b256v8s4:staged, sm_90a, compiled as a PTX module' '$OUTF'"
ok "a staged forward over 32 row splits keeps the CUDA form (slower in PTX)" \
  grep -q '^// ---- softmax_mid_bf16 .*plan axissoftmax:v1:softmax:b256v8s32:staged, sm_90a$' "$OUTF"
awk '/kiln_log_softmax_bwd_mid_bf16_k0, a PTX/{on=1} on{print} on&&/^}$/{exit}' "$OUTF" > "$TMP/axsm.ptx"
ok "re-read over 32 splits: a trip's later rows loaded under predicates, unfilled, and skipped at the end; one fold between two barriers" \
  bash -c "test \$(grep -c '^@%kp[0-9]* ld.global.nc.v4' '$TMP/axsm.ptx') = 12 && ! grep -q 'mov.b32 %kr[0-9]*, 0;' '$TMP/axsm.ptx' &&
           test \$(grep -c '^@!%kp[0-9]* bra' '$TMP/axsm.ptx') = 6 && test \$(grep -c 'bar.sync 0;' '$TMP/axsm.ptx') = 2"
cat > "$TMP/dyn_ko.lua" <<EOF
local k = require "kiln"
return k.graph "dyn_ko" { dims = { B = { 2 }, S = { 37 }, T = k.dynamic, H = { 40 } }, dtype = "bf16",
  inputs = { x = { "B", "S", "T", "H" } },
  body = function(g, x) return { y = g:softmax(x, { axis = 1 }) } end }
EOF
run_kiln source "$TMP/dyn_ko.lua" --sm 90a
ok "columns of a dynamic count after leading axes keep the CUDA form" \
  grep -q '^// ---- dyn_ko .*plan axissoftmax:v1:softmax:b256v8s4:staged, sm_90a$' "$OUTF"
KILN_PLAN=*.code=cuda run_kiln source tests/specs/mem/softmax_axes.lua --sm 90a
ok "*.code=cuda: softmax over other axes in CUDA" bash -c "! grep -q 'PTX module' '$OUTF'"

# reductions over other axes (axisreduce.lua): a middle block by lanes over adjacent outputs, a leading and
# a trailing block (per channel) a CTA per channel and slice, then the finalize; more blocks declined
run_kiln explain tests/specs/mem/reduce_sweep.lua --sm 90a
ok "a middle axis of [B, S, H], its kept axes named in 'dims' (H specialized): lanes over adjacent outputs" \
  test "$(grep -Ec 'plan axisreduce:v1:[a-z0-9_]*:strided:b256v[1-8]s[0-9]+$' "$OUTF")" = 7
ok "300 or 512 rows split 32 ways over a CTA's threads (8 lanes of 8 outputs), 7 rows not split" \
  bash -c "test \$(grep -c 'plan axisreduce.*strided:b256v8s32$' '$OUTF') = 4 && grep -A1 'middle_axis .H=256,S=7' '$OUTF' | grep -q 'strided:b256v8s1$'"
ok "per channel [N, C, H, W] -> [1, C, 1, 1]: a CTA per channel and slice of rows (the sum of squares and the mean in one kernel)" \
  bash -c "test \$(grep -c 'plan axisreduce:v1:[a-z0-9+]*:inner:b256v4$' '$OUTF') = 2 && grep -q 'plan axisreduce:v1:norm2+avg:inner:b256v4$' '$OUTF'"
run_kiln build tests/specs/mem/reduce_sweep.lua --graph per_channel --sm 90a -o "$TMP/chan.kpack"
run_kiln pack inspect "$TMP/chan.kpack"
expect_out "grid \[min\(N, SMS\*4/64\), 64, 1\]" "per channel: a CTA a slice of rows and channel, the slices capped by the SM count"
cat > "$TMP/bad_axes.lua" <<EOF
local k = require "kiln"
return k.graph "bad_axes" { dims = { A = k.dynamic, B = { 8 }, C = { 16 }, D = { 32 } }, dtype = "fp32",
  inputs = { x = { "A", "B", "C", "D" } },
  body = function(g, x) return { y = g:reduction(x, { mode = "add", dims = { 1, "B", 1, "D" } }) } end }
EOF
run_kiln explain "$TMP/bad_axes.lua" --sm 90a
expect_out "axisreduce +declined: the reduced axes of \[A, 8, 16, 32\] form RKRK" "reduced axes in two blocks with kept ones between: declined by name"
cat > "$TMP/named_dims.lua" <<EOF
local k = require "kiln"
return k.graph "named_dims" { dims = { T = k.dynamic, H = { 64 } }, dtype = "fp32", inputs = { x = { "T", "H" } },
  body = function(g, x) return { y = g:reduction(x, { mode = "add", dims = { 1, "H" } }) } end }
EOF
run_kiln check "$TMP/named_dims.lua"
expect_rc 0 "a reduction's 'dims' may name a specialized dim"

# the persistent backward and the column reduction ask for a workspace; fp8 amax zeroes first
run_kiln build specs/layernorm_bwd.lua --set H=4096 --sm 90a -o "$TMP/bwd.kpack"
expect_rc 0 "pack of layernorm_bwd"
run_kiln pack inspect "$TMP/bwd.kpack"
expect_out "workspace: min\(T\*32768, SMS\*32768\)" "layernorm_bwd needs a workspace of T x 2 x 4096 fp32, a partial row per SM at most"
expect_out "grid \[min\(ceil\(T/16\), SMS\), 1, 1\]" "its persistent grid: a CTA per SM of the device it runs on"
expect_out "kiln_layernorm_bwd_k0_final" "a second kernel adds the partial rows"
expect_out "grid \[256, 1, 1\].*  pdl$" "the second kernel starts early (pdl) and waits in-kernel"
run_kiln build specs/rmsnorm_residual_fp8.lua --set H=4096 --sm 90a -o "$TMP/fp8.kpack"
run_kiln pack inspect "$TMP/fp8.kpack"
expect_out "kiln_rmsnorm_residual_fp8_k0_init" "the fp8 plan zeroes amax before the atomics"
expect_out "grid \[T, 1, 1\].*  pdl$" "the fp8 kernel starts with its init kernel (pdl) and waits before its atomics"
# the staged backward takes rmsnorm at H = 2048 too (measured faster than the legacy kernel)
run_kiln explain specs/rmsnorm_bwd.lua --set H=2048 --sm 90a
expect_out "rmsnorm_backward:p128n2v8r4:staged-async" "rmsnorm_bwd at H = 2048 builds the staged kernel"
# a misspelt build-time setting is a typed error, not the default build
KILN_PLAN=*.fast_compile=fast run_kiln build specs/rmsnorm.lua --set H=4096 --sm 90a
expect_err "E_USAGE: KILN_PLAN: \*.fast_compile=fast: want 0, min, mid or max" "*.fast_compile=fast is E_USAGE, by name"
# (the kernel's NVRTC options are part of its cache key: cache why names them)
KILN_PLAN=*.code=cuda run_kiln build specs/rmsnorm.lua --graph rmsnorm --set H=4096 --sm 90a
KILN_PLAN=*.code=cuda,*.fast_compile=min run_kiln cache why specs/rmsnorm.lua --graph rmsnorm --set H=4096 --sm 90a
ok "*.fast_compile=min: the CUDA form through NVRTC at --Ofast-compile=min" \
  grep -q 'differs in: options (cached \[-minimal\], now \[-minimal --Ofast-compile=min\])$' "$OUTF"
KILN_FAST_COMPILE=min KILN_PLAN=*.code=cuda run_kiln cache why specs/rmsnorm.lua --graph rmsnorm --set H=4096 --sm 90a
ok "the environment variable KILN_FAST_COMPILE is no longer read" grep -q 'is cached (a lookup hits)$' "$OUTF"
# layernorm's row held in registers compiles at ptxas -O1 (measured faster), the rest at -O3;
# the setting *.ptxas_opt sets every module's level (for measuring), a bad one is named
run_kiln source specs/layernorm.lua specs/rmsnorm.lua specs/layernorm_bwd.lua --set H=4096 --sm 90a --ptx
ok "layernorm and layernorm_train at ptxas -O1, rmsnorm and layernorm_bwd at its default" \
  test "$(grep -c '^// ---- layernorm.* at -O1$' "$OUTF") $(grep -c ' at -O' "$OUTF")" = "2 2"
run_kiln source specs/rmsnorm.lua specs/rmsnorm_residual.lua specs/rmsnorm_residual_fp8.lua --set H=65536 --sm 90a --ptx
ok "at H = 65536 rmsnorm_residual at ptxas -O1, plain and fp8 RMSNorm at its default" \
  test "$(grep -c '^// ---- rmsnorm_residual .* at -O1$' "$OUTF") $(grep -c ' at -O' "$OUTF")" = "1 1"
run_kiln source specs/softmax_bwd.lua --set H=4096 --sm 90a --ptx
ok "the softmax backwards' rows held by one CTA at ptxas -O1" test "$(grep -c '^// ---- .*softmax_bwd .* at -O1$' "$OUTF")" = 2
run_kiln source specs/softmax_bwd.lua --set H=65536 --sm 90a --ptx
ok "and over a cluster at its default" test "$(grep -c ' at -O' "$OUTF")" = 0
KILN_PLAN=*.ptxas_opt=3 run_kiln source specs/layernorm.lua --set H=4096 --sm 90a --ptx
ok "*.ptxas_opt=3: layernorm at ptxas's default" test "$(grep -c ' at -O' "$OUTF")" = 0
KILN_PLAN=row.ptxas_opt=2 run_kiln source specs/rmsnorm.lua --set H=4096 --sm 90a --ptx
ok "row.ptxas_opt=2: rmsnorm at -O2" test "$(grep -c '^// ---- rmsnorm.* at -O2$' "$OUTF")" = 2
KILN_PLAN=*.ptxas_opt=fast run_kiln build specs/rmsnorm.lua --set H=4096 --sm 90a
expect_err "E_USAGE: KILN_PLAN: \*.ptxas_opt=fast: want auto, 0, 1, 2 or 3" "*.ptxas_opt=fast is E_USAGE, by name"
KILN_PTXAS_OPT=3 run_kiln source specs/layernorm.lua --set H=4096 --sm 90a --ptx
ok "the environment variable KILN_PTXAS_OPT is no longer read" test "$(grep -c ' at -O1$' "$OUTF")" = 2
# the row engine's n setting sets the forward kernels' vectors per thread; a bad value is named
KILN_PLAN=row.n=8 run_kiln explain specs/rmsnorm.lua --set H=8192 --sm 90a
expect_out "plan row:v1:rmsnorm:p128n8v8r1:regs" "row.n=8: rmsnorm at H = 8192 takes 8 vectors per thread"
KILN_PLAN=row.n=3 run_kiln build specs/rmsnorm.lua --set H=4096 --sm 90a -o "$TMP/n3.kpack"
expect_err "E_USAGE: KILN_PLAN: row.n=3: want auto, 1, 2, 4, 8 or 16" "row.n=3 is refused by name"

# rows wider than the staged and legacy kernels take: on sm_90+ the staged kernel over a
# cluster (each CTA stages and sums its part of the row; a partial row per cluster), else the
# split backward (the row kernel keeps the row sums, a column-tiled kernel writes dx and the
# column sums, then the finalize); the row engine's cluster setting 2|4|8|16 takes a cluster for any row, 0
# none; column reductions that wide take column tiles
KILN_PLAN=row.cluster=8 run_kiln build specs/layernorm_bwd.lua --set H=65536 --sm 90a -o "$TMP/bwd65c.kpack"
run_kiln pack inspect "$TMP/bwd65c.kpack"
expect_out "staged-async:cluster8" "row.cluster=8: layernorm_bwd at H = 65536 takes the staged kernel over 8 CTAs"
expect_out "grid \[min\(T\*8, SMS\*8\), 1, 1\]  cluster \[8, 1, 1\]" "a cluster of 8 a row, one per SM at most (a multiple of 8 CTAs)"
expect_out "workspace: min\(T\*524288, SMS\*524288\) \\(bytes" "workspace: a partial row per cluster"
run_kiln build specs/rmsnorm_bwd.lua --set H=65536 --sm 90a -o "$TMP/rbwd65.kpack"
run_kiln pack inspect "$TMP/rbwd65.kpack"
expect_out "rmsnorm_backward:p256n4v8r1:staged-twocta:cluster8" "rmsnorm_bwd at H = 65536: the staged kernel over 8 CTAs of 256 threads, 2 CTAs per SM"
expect_out "grid \[min\(T\*8, SMS\*16\), 1, 1\]  cluster \[8, 1, 1\]" "rmsnorm_bwd: a cluster a row, two per SM at most"
run_kiln explain specs/rmsnorm_bwd.lua --set H=32768 --sm 90a
expect_out "rmsnorm_backward:p256n4v8r1:staged-twocta:cluster4" "rmsnorm_bwd at H = 32768: over 4 CTAs of 256 threads"
run_kiln build specs/layernorm_bwd.lua --set H=65536 --sm 90a -o "$TMP/bwd65l.kpack"
run_kiln pack inspect "$TMP/bwd65l.kpack"
expect_out "layernorm_backward:p256n4v8r1:staged-twocta:cluster8" "layernorm_bwd at H = 65536: over 8 CTAs of 256 threads, 64 column sums a thread"
expect_out "workspace: min\(T\*524288, SMS\*1048576\) \\(bytes" "workspace: two partial rows' sums per cluster, two clusters an SM"
run_kiln explain specs/layernorm_bwd.lua --set H=24576 --sm 90a
expect_out "layernorm_backward:p256n3v8r1:staged-twocta:cluster4" "layernorm_bwd at H = 24576: over 4 CTAs of 256 threads"
KILN_PLAN=row.cluster=0 run_kiln build specs/layernorm_bwd.lua --set H=65536 --sm 90a -o "$TMP/bwd65k.kpack"
expect_rc 0 "layernorm_bwd at H = 65536 without clusters builds (the split backward)"
run_kiln pack inspect "$TMP/bwd65k.kpack"
expect_out "kiln_layernorm_bwd_k0_dx .*reread\+colsum:dx" "dx and the column sums are a kernel of their own"
expect_out "grid \[min\(ceil\(T/16\), SMS\*8/32\), 32, 1\]" "32 column tiles of 2048, 8 CTAs per SM at most (33 row chunks on 132 SMs)"
expect_out "workspace: T\*8 \+ 33554432 \\(bytes" "workspace: the row sums (8 bytes a row) after 64 partial rows (the most on any device)"
KILN_PLAN=row.bwd=split run_kiln explain specs/rmsnorm_bwd.lua --set H=4096 --sm 90a
expect_out "rmsnorm_backward:p256n2v8r2:regs\+colsum" "row.bwd=split forces the split backward"
run_kiln explain tests/specs/mem/reduce.lua --sm 90a
expect_out "colreduce:v1:add:lead:p5632n1v8r1:t22" "a column sum over 45000 columns takes 22 column tiles"
run_kiln build tests/specs/mem/reduce.lua --sm 90a -o "$TMP/reduce.kpack"
run_kiln pack inspect "$TMP/reduce.kpack"
expect_out "workspace: min\(T\*262144, SMS\*2097152/32\) \+ 262144 \\(bytes" \
  "32 tiles: 8 CTAs per 32 SMs, and a partial row more (fewer than 4 SMs still run one CTA)"
# the norms' bodies in PTX (docs/INTERNALS.md): taken where the forms have everything, the
# CUDA form elsewhere (fp8 outputs need sm_89) and with *.code=cuda
run_kiln source specs/layernorm.lua
expect_out 'asm volatile\("\{' "layernorm's body is one asm statement"
run_kiln source tests/specs/mem/forward.lua --sm 90a
ok "the 10 forward norms of forward.lua take the PTX form on sm_90a (the ragged row and the GELU epilogue too)" \
  test "$(grep -c '^// kiln row engine: .*body in PTX' "$OUTF")" = 10
ok "of the 2 at H = 65536 the rmsnorm splits its row over a cluster of CTAs (one reduction)" \
  test "$(grep -c "row held in the cluster's registers" "$OUTF")" = 1
ok "and the fp16 layernorm (two reductions) is staged over a cluster of 8" test "$(grep -c 'layernorm_fp16_train.*staged-fwd:cluster8' "$OUTF")" = 1
KILN_PLAN=row.cluster=0 run_kiln source tests/specs/mem/forward.lua --sm 90a
ok "row.cluster=0: both re-read the row, the layer norm in PTX, the sigmoid- and exp-gated RMSNorm of x and r in CUDA" \
  bash -c "test \$(grep -c 'row re-read (L2), body in PTX' '$OUTF') = 1 && test \$(grep -c 'row re-read (L2)\.\$' '$OUTF') = 1"
# wide rows (tests/specs/mem/wide.lua): the cluster's CTAs each hold a part, reductions through
# distributed shared memory; sm_90+ only, and a pack with an older SM keeps one kernel list
run_kiln explain tests/specs/mem/wide.lua --sm 90a
expect_out "rmsnorm:p256n4v8r1:regs:occ:cluster8" "rmsnorm training at H = 65536: 8 CTAs of 256 threads a row, 8 CTAs an SM"
expect_out "softmax_backward:p256n4v8r1:regs:cluster8$" "the softmax backward over a cluster keeps its registers"
expect_out "softmax_backward:p256n4v8r1:regs:cluster8" "softmax backward at H = 65536 likewise"
expect_out "log_softmax_backward:p512n4v4r1:regs:cluster8" "fp32 log_softmax backward at H = 65536: 8 CTAs of 512 threads"
expect_out "rmsnorm:p1024n8v8r1:reread" "the rowwise fp8 norm (two reductions) re-reads its row"
expect_out "layernorm:p1024n4v8r1:reread$" "layernorm at H = 32768 re-reads its row (held, one CTA an SM)"
expect_out "log_softmax:p1024n4v8r1:reread$" "log_softmax at H = 32768 likewise"
expect_out "log_softmax:p1024n8v8r1:reread$" "fp16 log_softmax at H = 65536: re-read, pipelined (bf16 measured 1.11-1.14x the staged form)"
expect_out "layernorm:p512n4v4r1:staged-fwd:cluster8$" "fp32 layernorm at H = 65536: staged over a cluster of 8 CTAs of 512 threads"
expect_out "layernorm:p1024n5v4r1:staged-fwd:cluster2$" "and at H = 40960 over 2 CTAs of 1024 threads"
ok "16-bit layernorm rows of 65536 are staged over 8 CTAs of 256 threads (measured 1.02-1.11x the re-read)" \
  test "$(grep -c 'plan row:v1:layernorm:p256n4v8r1:staged-fwd:cluster8$' "$OUTF")" = 1
for H in 32768 131072; do
  run_kiln explain specs/layernorm.lua --set H=$H --sm 90a
  ok "bf16 layernorm rows of $H keep the re-read (staged: clusters of 4, or CTAs past 256 threads)" \
    test "$(grep -c 'plan row:v1:layernorm:p1024n[0-9]*v8r1:reread$' "$OUTF")" = 2
done
KILN_PLAN=row.stage=s2c4b256r2 run_kiln source specs/layernorm.lua --set H=65536 --sm 90a --ptx
ok "row.stage=...r2: two rows a cluster meeting (both rows' sums in one barrier, the second row's stores predicated)" \
  bash -c "test \$(grep -c 'st.shared::cluster' '$OUTF') = 8 && test \$(grep -c 'cp.async.cg.shared.global' '$OUTF') = 32 &&
           grep -q '^@%kp[0-9]* st.global' '$OUTF'"
# softmax's wide row staged the same way (with its log-sum-exp), where measured faster
run_kiln explain specs/softmax.lua --set H=65536 --sm 90a
ok "bf16 softmax and log_softmax rows of 65536 are re-read by 1024 threads (pipelined: 1.11-1.14x the staged form)" \
  bash -c "grep -q 'plan row:v1:softmax:p1024n8v8r1:reread$' '$OUTF' && grep -q 'plan row:v1:log_softmax:p1024n8v8r1:reread$' '$OUTF'"
# rows of 5-7 vectors a thread (tests/specs/mem/odd_vectors.lua): held up to 8 and re-read in
# trips of a divisor in PTX; the forms measured slower keep CUDA, each with its reason
run_kiln explain tests/specs/mem/odd_vectors.lua --sm 90a
ok "rows of 5 and 6 vectors held (fp32 RMSNorm, layer norm over x + r; bf16 RMSNorm) are PTX modules" \
  test "$(grep -A12 -E 'plan row:v1:(rmsnorm|layernorm):p1024n[56]v[48]r1:regs' "$OUTF" | grep -c 'a PTX module')" = 5
ok "re-read rows of 5, 6 and 7 vectors (softmax, log_softmax, layer norm) are PTX modules" \
  test "$(grep -A12 -E 'plan row:v1:(softmax|log_softmax|layernorm):p1024n[567]v[48]r1:reread' "$OUTF" | grep -c 'a PTX module')" = 7
expect_out "CUDA through NVRTC, RMSNorm re-read in trips of one vector \(slower in PTX\)" "RMSNorm re-read over 7 vectors keeps the CUDA form"
expect_out "CUDA through NVRTC, layer norm re-reading more than one row tensor \(slower in PTX\)" "so does layer norm re-reading x and r"
run_kiln source tests/specs/mem/odd_vectors.lua --graph odd_layernorm_fp16 --set H=40960 --sm 90a --ptx
ok "layer norm re-read over 5 vectors loads them in one trip (16-byte loads of x: 5 a pass, 2 passes)" \
  test "$(grep -c 'ld.global.nc.L2::cache_hint.v4' "$OUTF")" = 10
run_kiln source tests/specs/mem/odd_vectors.lua --graph odd_softmax_fp32 --set H=24576 --sm 90a --ptx
ok "softmax re-read over 6 vectors keeps trips of 3 (pipelined: the first trip and the next, 2 passes)" \
  test "$(grep -c 'ld.global.nc.L2::cache_hint.v4' "$OUTF")" = 12
for sm in 80 90a; do
  KILN_PLAN=row.cluster=0 run_kiln explain specs/add_rmsnorm_silu_gate.lua --set H=32768 --sm $sm
  expect_out "CUDA through NVRTC, exp, sigmoid or swish on a re-read row of more than one row tensor" \
    "sm_$sm without clusters: the gated RMSNorm re-read at 32768 keeps the CUDA form (0.85-0.87x in PTX)"
done
KILN_PLAN=row.cluster=0 run_kiln source tests/specs/mem/wide.lua --graph wide_layernorm_fp32 --set H=40960 --sm 90a --ptx
ok "fp32 layer norm re-read over 10 vectors takes trips of 5 (not 2)" \
  test "$(grep -c 'ld.global.nc.L2::cache_hint.v4' "$OUTF")" = 10
# softmax_spec DTYPE: a softmax with its log-sum-exp at H = 32768 and 65536, as $TMP/sm_DTYPE.lua
softmax_spec() {
  cat > "$TMP/sm_$1.lua" <<EOF
local k = require "kiln"
return k.graph "sm_$1" { dims = { T = k.dynamic, H = { 32768, 65536 } }, dtype = "$1", inputs = { x = { "T", "H" } },
  body = function(g, x) local y, lse = g:softmax(x, { generate_stats = true }); return { y = y, lse = lse } end }
EOF
}
softmax_spec fp16
run_kiln explain "$TMP/sm_fp16.lua" --sm 90a
ok "fp16 softmax: re-read at H = 65536 (pipelined) and at 32768 (staged measured 0.81x)" \
  bash -c "grep -q 'plan row:v1:softmax:p1024n8v8r1:reread$' '$OUTF' && grep -q 'plan row:v1:softmax:p1024n4v8r1:reread$' '$OUTF'"
cat > "$TMP/ls_fp32.lua" <<EOF
local k = require "kiln"
return k.graph "ls_fp32" { dims = { T = k.dynamic, H = { 65536 } }, dtype = "fp32", inputs = { x = { "T", "H" } },
  body = function(g, x) return { y = g:log_softmax(x) } end }
EOF
run_kiln explain "$TMP/ls_fp32.lua" --sm 90a
expect_out "plan row:v1:log_softmax:p512n4v4r1:staged-fwd:cluster8$" "fp32 log_softmax at H = 65536: staged as fp32 softmax (measured 1.21-1.24x the re-read)"
# a re-read row's vectors a trip: 2 where it reads a residual too, else 4; the trip setting sets them
trips() { grep -A1 -E '^setp.lt.s32 %kp[0-9]*, %kr[0-9]*, [0-9]*;$' "$OUTF" | grep -B1 '^@%kp[0-9]* bra.uni' | grep -o ', [0-9]*;' | sed 's/, //; s/;//' | sort -u | tr '\n' ' '; }
run_kiln source specs/rmsnorm_residual_fp8_rowwise.lua --set H=65536 --sm 90a --ptx
ok "rmsnorm_residual_fp8_rowwise at 65536 (x and r re-read): 8 vectors a thread in 4 trips of 2" test "$(trips)" = "4 "
run_kiln source tests/specs/mem/wide.lua --graph wide_softmax_sink_stats --set H=65536 --sm 90a --ptx
ok "a softmax with a sink at 65536 (x alone, re-read): in 2 trips of 4" test "$(trips)" = "2 "
KILN_PLAN=*.trip=1 run_kiln source tests/specs/mem/wide.lua --graph wide_softmax_sink_stats --set H=65536 --sm 90a --ptx
ok "*.trip=1: in 8 trips of 1" test "$(trips)" = "8 "
KILN_PLAN=*.trip=3 run_kiln build tests/specs/mem/wide.lua --graph wide_softmax_sink_stats --sm 90a
expect_err "E_USAGE: KILN_PLAN: \\*\\.trip=3: want auto, 1, 2, 4 or 8" "*.trip=3 is E_USAGE, by name"
# layernorm's mean and variance in one reduction (Chan's combine), where every thread holds as
# many elements; a ragged row (H = 1000) keeps the mean's reduction and the deviations'
run_kiln source specs/layernorm.lua --graph layernorm --set H=4096 --sm 90a --ptx
ok "layernorm held at H = 4096 meets its CTA once a row" test "$(grep -c 'bar.sync' "$OUTF")" = 1
KILN_PLAN=*.reductions=2 run_kiln source specs/layernorm.lua --graph layernorm --set H=4096 --sm 90a --ptx
ok "*.reductions=2: twice" test "$(grep -c 'bar.sync' "$OUTF")" = 2
run_kiln source specs/layernorm.lua --graph layernorm --set H=32768 --sm 90a --ptx
ok "layernorm re-read at H = 32768 reads x twice, not three times (no pass for the deviations)" \
  test "$(grep -c 'ld.global.nc.L2::cache_hint' "$OUTF")" = 8
run_kiln source specs/layernorm.lua --graph layernorm --set H=1000 --sm 90a --ptx
ok "a ragged row (H = 1000) keeps two reductions" test "$(grep -c 'shfl.sync.bfly' "$OUTF")" = 10
KILN_PLAN=*.reductions=3 run_kiln build specs/layernorm.lua --set H=4096 --sm 90a
expect_err "E_USAGE: KILN_PLAN: \\*\\.reductions=3: want 1 or 2" "*.reductions=3 is E_USAGE, by name"
# softmax's max and sum of exps in one reduction of (max, sum) pairs where a row spans 1024
# threads (held or re-read) or a cluster; rows of fewer threads meet twice (measured faster)
meets() { printf '%s ' "$(grep -c 'bar.sync' "$OUTF")" "$(grep -c 'barrier.cluster.arrive' "$OUTF")"; }
run_kiln source specs/softmax.lua --set H=4096 --sm 90a --ptx
a=$(meets); run_kiln source specs/softmax.lua --set H=16384 --sm 90a --ptx
a=$a$(meets); run_kiln source specs/softmax.lua --set H=65536 --sm 90a --ptx
ok "softmax and log_softmax meet twice a row at H = 4096 (256 threads), once at 16384 and 65536 (1024)" \
  test "$a$(meets)" = "4 0 2 0 2 0 "
KILN_PLAN=*.reductions=2 run_kiln source specs/softmax.lua --set H=16384 --sm 90a --ptx
a=$(meets); KILN_PLAN=*.reductions=2 run_kiln source specs/softmax.lua --set H=65536 --sm 90a --ptx
ok "*.reductions=2: twice" test "$a$(meets)" = "4 0 4 0 "
run_kiln explain tests/specs/mem/wide.lua --sm 90a
ok "a softmax with a sink logit keeps the re-read" bash -c "grep -A1 'graph wide_softmax_sink_stats' '$OUTF' | grep -q 'reread$'"
softmax_spec fp32
run_kiln explain "$TMP/sm_fp32.lua" --sm 90a
ok "fp32 softmax: staged over 8 CTAs of 512 threads at H = 65536, the re-read at 32768 (not measured staged)" \
  bash -c "grep -q 'plan row:v1:softmax:p512n4v4r1:staged-fwd:cluster8$' '$OUTF' && grep -q 'plan row:v1:softmax:p1024n8v4r1:reread$' '$OUTF'"
KILN_PLAN=row.stage=s3c4b256 run_kiln source specs/softmax.lua --set H=65536 --sm 90a --ptx
ok "the staged softmax: exps by ex2.approx, the max folded NaN-first over the cluster, the lse by one thread" \
  bash -c "grep -q 'ex2.approx.ftz.f32' '$OUTF' && grep -q 'max.NaN.f32' '$OUTF' && grep -q 'st.shared::cluster' '$OUTF' &&
           grep -q '^@%kp[0-9]* st.global.f32' '$OUTF'"
KILN_PLAN=row.stage=s2c4b256r3 run_kiln explain specs/layernorm.lua --set H=65536 --sm 90a
expect_err "E_USAGE: KILN_PLAN: row.stage=s2c4b256r3: want auto, off or sNcM.bB..rR." "row.stage with 3 rows a meeting is refused by name"
cat > "$TMP/ln32r.lua" <<'EOF'
local k = require "kiln"
return k.graph "ln32r" { dims = { T = k.dynamic, H = { 65536 } }, dtype = "fp32",
  inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" }, b = { "H" } },
  body = function(g, x, r, w, b) return { y = g:layernorm(x + r, w, b, { epsilon = 1e-5 }) } end }
EOF
run_kiln explain "$TMP/ln32r.lua" --sm 90a
expect_out "plan row:v1:layernorm:p1024n16v4r1:reread$" "an fp32 layernorm fusing a residual add keeps the re-read (the staged form takes no fused ops)"
KILN_PLAN=row.stage=off run_kiln explain tests/specs/mem/wide.lua --sm 90a
ok "row.stage=off: the fp32 layernorm re-reads too" test "$(grep -c 'staged-fwd' "$OUTF")" = 0
KILN_PLAN=row.stage=s9c9 run_kiln explain tests/specs/mem/wide.lua --sm 90a
expect_err "E_USAGE: KILN_PLAN: row.stage=s9c9: want auto, off or sNcM\[bB\]" "row.stage=s9c9 is refused by name"
KILN_PLAN=row.stage=s3c2b512 run_kiln explain specs/layernorm.lua --set H=65536 --sm 90a
expect_out "layernorm:p512n4v8r1:staged-fwd:cluster4$" "row.stage=s3c2b512 stages a bf16 row too, over 4 CTAs of 512 threads"
run_kiln source tests/specs/mem/wide.lua --set H=65536 --graph wide_layernorm_fp32 --sm 90a
ok "the staged layernorm meets its cluster once a row (and once at its start): mean and variance in one reduction" \
  test "$(grep -c 'barrier.cluster.arrive' "$OUTF")" = 2
KILN_PLAN=*.reductions=2 run_kiln source tests/specs/mem/wide.lua --set H=65536 --graph wide_layernorm_fp32 --sm 90a
ok "*.reductions=2: twice a row, the mean's reduction and then the deviations'" \
  test "$(grep -c 'barrier.cluster.arrive' "$OUTF")" = 3
expect_out "cp.async.cg.shared.global" "its CTAs copy their part of the next rows by cp.async"
run_kiln explain specs/rmsnorm.lua --set H=24576 --sm 90a
expect_out "rmsnorm:p1024n3v8r1:regs:occ$" "plain RMSNorm held by 1024 threads at H = 24576: two CTAs an SM"
run_kiln explain specs/rmsnorm_residual.lua --set H=24576 --sm 90a
expect_out "rmsnorm:p1024n3v8r1:regs$" "with a fused residual it keeps one CTA an SM (measured level at 32 registers)"
run_kiln explain specs/softmax_bwd.lua --set H=24576 --sm 90a
expect_out "softmax_backward:p1024n3v8r1:regs$" "the softmax backward keeps its held row at H = 24576"
expect_out "log_softmax_backward:p256n3v8r1:regs:cluster4$" "the log-softmax backward takes a cluster of 4 there"
cat > "$TMP/f32.lua" <<'EOF'
local k = require "kiln"
local dims = { T = k.dynamic, H = { 16384 } }
return {
  k.graph "rmsnorm32" { dims = dims, dtype = "fp32", inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end },
  k.graph "layernorm32" { dims = dims, dtype = "fp32", inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
    body = function(g, x, w, b) return { y = g:layernorm(x, w, b, { epsilon = 1e-5 }) } end },
  k.graph "rmsnorm16" { dims = { T = k.dynamic, H = { 24576 } }, dtype = "fp16", inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w) return { y = g:rmsnorm(x, w, { epsilon = 1e-6 }) } end },
}
EOF
run_kiln explain "$TMP/f32.lua" --sm 90a
ok "fp32 rows held by 1024 threads keep their held row (measured faster than re-read or 32 registers)" \
  test "$(grep -c 'plan row.*p1024n4v4r1:regs$' "$OUTF")" = 2
expect_out "plan row:v1:rmsnorm:p1024n3v8r1:regs$" "so does fp16 RMSNorm (its conversions spill at 32 registers)"
run_kiln explain specs/add_rmsnorm_silu_gate.lua --set H=65536 --sm 90a
expect_out "rmsnorm:p256n4v8r1:regs:cluster8$" "an RMSNorm fusing swish over a cluster keeps its registers (its code spills at 32)"
run_kiln source tests/specs/mem/wide.lua --set H=65536 --graph wide_softmax_bwd --sm 90a
expect_out "mapa.shared::cluster.u32" "the partial results go to the peers' shared memory"
ok "one cluster barrier opens the row, one closes its reduction" \
  test "$(grep -c 'barrier.cluster.arrive' "$OUTF")" = 2
KILN_PLAN=row.cluster=8 run_kiln explain tests/specs/mem/wide.lua --set H=65536 --graph wide_softmax --sm 90a
expect_out "softmax:p512n2v8r1:regs:occ:cluster8" "row.cluster=8 splits even a softmax over 8 CTAs"
run_kiln explain tests/specs/mem/wide.lua --sm 80
ok "sm_80 re-reads the wide rows" test "$(grep -c ':cluster' "$OUTF")" = 0
run_kiln build tests/specs/mem/wide.lua --set H=65536 --sm 80 --sm 90a -o "$TMP/wide.kpack"
ok "a pack for sm_80 and sm_90a builds (one kernel list: no cluster)" test -s "$TMP/wide.kpack"
run_kiln build tests/specs/mem/wide.lua --set H=65536 --sm 90a --sm 100a -o "$TMP/wide9.kpack"
run_kiln pack inspect "$TMP/wide9.kpack"
expect_out "cluster" "a pack for sm_90a and sm_100a keeps the clusters"
KILN_PLAN=row.cluster=3 run_kiln explain tests/specs/mem/wide.lua --sm 90a
expect_err "E_USAGE: KILN_PLAN: row.cluster=3: want 1, 0, 2, 4, 8 or 16" "row.cluster=3 is refused by name"
run_kiln source tests/specs/mem/forward.lua --sm 80
ok "8 of them on sm_80 (not the fp8 outputs)" test "$(grep -c '^// kiln row engine: .*body in PTX' "$OUTF")" = 8
run_kiln source tests/specs/mem/backward.lua --sm 90a
ok "11 of the 12 backwards of backward.lua take the PTX form (not the split one of 5 vectors per thread re-read)" \
  test "$(grep -c 'body in PTX' "$OUTF")" = 11
run_kiln source specs/softmax.lua specs/softmax_bwd.lua
ok "the shipped softmax kernels' bodies are in PTX" test "$(grep -c 'body in PTX' "$OUTF")" = 12
# PTX modules (docs/INTERNALS.md): by default every kernel with its body in PTX through kiln's
# PTX compiler library (of the toolkit ptxas's version), or the toolkit's ptxas executable
# (KILN_PTXAS=exe); through nvJitLink (KILN_PTXAS=nvjitlink) the finalize and the amax init
# kernel only, unless the module setting is all
SPX="specs/layernorm_bwd.lua specs/rmsnorm_residual_fp8.lua"
PTXC_VERSION=$(sed -n 's/^ptxc_version = //p' config.ninja)
BY_LIB="compiled as a PTX module by nvptxcompiler/$PTXC_VERSION"
run_kiln source $SPX --set H=4096 --sm 90a --ptx
ok "by default all four kernels compile as PTX modules by the PTX compiler library $PTXC_VERSION, and --ptx prints the modules" \
  bash -c "test -n '$PTXC_VERSION' && test \$(grep -c '$BY_LIB\$' '$OUTF') = 4 && test \$(grep -c '^\.version 8\.0' '$OUTF') = 4 &&
           grep -q '^\.visible \.entry kiln_layernorm_bwd_k0_final(' '$OUTF' && grep -q 'griddepcontrol.wait' '$OUTF'"
KILN_PTXAS=exe run_kiln source $SPX --set H=4096 --sm 90a
ok "KILN_PTXAS=exe: all four by the toolkit's ptxas executable" test "$(grep -c 'compiled as a PTX module by ptxas$' "$OUTF")" = 4
KILN_PTXC_PATH=/nonexistent/libkilnptx.so run_kiln source $SPX --set H=4096 --sm 90a
ok "a KILN_PTXC_PATH that names nothing: the ptxas executable, not another library" \
  test "$(grep -c 'compiled as a PTX module by ptxas$' "$OUTF")" = 4
KILN_PLAN=*.module=own run_kiln source $SPX --set H=4096 --sm 90a
ok "*.module=own: the finalize and the amax init kernel only" \
  bash -c "test \$(grep -c 'compiled as a PTX module' '$OUTF') = 2 && grep -q '_final.*compiled as a PTX module' '$OUTF' &&
           grep -q '_init.*compiled as a PTX module' '$OUTF'"
KILN_PTXAS=nvjitlink run_kiln source $SPX --set H=4096 --sm 90a
ok "KILN_PTXAS=nvjitlink: the finalize and the amax init kernel through nvJitLink, the row kernels from CUDA" \
  bash -c "test \$(grep -c 'compiled as a PTX module by nvjitlink$' '$OUTF') = 2 && grep -q '_final.*by nvjitlink' '$OUTF' &&
           grep -q '_init.*by nvjitlink' '$OUTF'"
KILN_PTXAS=nvjitlink KILN_PLAN=*.module=all run_kiln source $SPX --set H=4096 --sm 90a
ok "KILN_PTXAS=nvjitlink, *.module=all: all four through nvJitLink" \
  test "$(grep -c 'compiled as a PTX module by nvjitlink$' "$OUTF")" = 4
KILN_PLAN=*.module=off run_kiln source specs/layernorm_bwd.lua --set H=4096 --sm 90a
ok "*.module=off: none" bash -c "! grep -q 'compiled as a PTX module' '$OUTF'"
KILN_PLAN=*.module=off run_kiln explain specs/layernorm_bwd.lua --set H=4096 --sm 90a
ok "... and explain says why" grep -q 'kernel kiln_layernorm_bwd_k0: CUDA through NVRTC, PTX modules not wanted here (the module setting)$' "$OUTF"
KILN_PLAN=*.module=on run_kiln build specs/layernorm.lua --sm 90a
expect_err "E_USAGE: KILN_PLAN: \*.module=on: want auto, all, own or off" "*.module=on is refused by name"
KILN_PTX_MODULE=off run_kiln source specs/layernorm_bwd.lua --set H=4096 --sm 90a
ok "the environment variable KILN_PTX_MODULE is no longer read" test "$(grep -c 'compiled as a PTX module' "$OUTF")" = 2
KILN_PTXAS=ptxas run_kiln build specs/layernorm.lua --sm 90a
expect_err "E_USAGE.*KILN_PTXAS=ptxas: want exe or nvjitlink" "KILN_PTXAS=ptxas is refused by name"
run_kiln build $SPX specs/softmax.lua --sm 80 --sm 90a --sm 100a -o "$TMP/mod.kpack"
ok "modules through the PTX compiler library build for sm_80, sm_90a and sm_100a" test -s "$TMP/mod.kpack"
KILN_PTXAS=exe run_kiln build $SPX --sm 80 --sm 100a -o "$TMP/mod_exe.kpack"
ok "modules through the ptxas executable build for sm_80 and sm_100a" test -s "$TMP/mod_exe.kpack"
KILN_PTXAS=nvjitlink KILN_PLAN=*.module=all run_kiln build $SPX specs/softmax.lua --sm 80 --sm 90a --sm 100a -o "$TMP/mod_jl.kpack"
ok "modules through nvJitLink build for sm_80, sm_90a and sm_100a" test -s "$TMP/mod_jl.kpack"
# pointwise kernels with their bodies in PTX (pointwise_ptx.lua), modules by the PTX compiler library
run_kiln source specs/swiglu.lua specs/scale_residual_cast.lua tests/specs/mem/pointwise.lua --sm 90a
ok "the pointwise kernels take the PTX form, a repeating bias too (GELU into fp32 keeps the CUDA form)" \
  bash -c "test \$(grep -c '^// kiln pointwise engine: 8 elements a thread, 256 threads a CTA, body in PTX' '$OUTF') = 13 &&
           test \$(grep -c 'plan pointwise.*$BY_LIB\$' '$OUTF') = 13 &&
           grep -q '^// ---- pw_gelu_fp32 .H=4096. .*, sm_90a$' '$OUTF' && grep -q '^// ---- pw_row_broadcast .H=1000. .*$BY_LIB$' '$OUTF'"
run_kiln source specs/bias_gelu.lua --sm 90a --ptx
ok "bias_gelu's bias: its vector masked in 32 bits, the count compared in vectors" \
  bash -c "grep -q 'and.b32 %kr[0-9]*, %kr[0-9]*, 1023;' '$OUTF' && grep -q 'mad.wide.u32 %kd[0-9]*, %kr[0-9]*, 16, %kd' '$OUTF' && grep -q 'mov.b64 %kd[0-9]*, 1024;' '$OUTF'"
KILN_PLAN=pointwise.repeat=cuda run_kiln source tests/specs/mem/pointwise.lua specs/bias_gelu.lua --sm 90a
ok "pointwise.repeat=cuda: the repeating bias keeps the CUDA form (and bias_gelu)" \
  test "$(grep -c "plan pointwise.*$BY_LIB\$" "$OUTF")" = 8
KILN_PLAN=pointwise.repeat=cpu run_kiln build specs/bias_gelu.lua --sm 90a
expect_err "E_USAGE: KILN_PLAN: pointwise.repeat=cpu: want ptx or cuda" "pointwise.repeat=cpu is E_USAGE, by name"
KILN_PW_REPEAT=cuda run_kiln source specs/bias_gelu.lua --sm 90a
ok "the environment variable KILN_PW_REPEAT is no longer read" test "$(grep -c "plan pointwise.*$BY_LIB\$" "$OUTF")" = 2
KILN_PLAN=*.code=cuda run_kiln source specs/swiglu.lua --sm 90a
ok "*.code=cuda keeps the pointwise CUDA form" bash -c "! grep -q 'body in PTX' '$OUTF' && ! grep -q 'PTX module' '$OUTF'"
run_kiln source tests/specs/mem/variants.lua --sm 90a --ptx
ok "softmax and log_softmax with fused ops on held rows: PTX modules" \
  bash -c "for k in 'softmax_fused .H=1000.' 'softmax_fused .H=4096.' 'log_softmax_fused_fp32 .H=2048.'; do grep -q \"^// ---- \$k .*compiled as a PTX module\" '$OUTF' || exit 1; done"
ok "fused ops on a re-read row or on the softmax backward: the CUDA form (slower in PTX)" \
  bash -c "for k in 'softmax_fused .H=32768.' 'log_softmax_fused_fp32 .H=32768.' 'softmax_bwd_fused .H=1000.' 'softmax_bwd_fused .H=4096.' 'softmax_bwd_residual'; do grep -q \"^// ---- \$k .*, sm_90a\$\" '$OUTF' || exit 1; done"
awk '/kiln_softmax_fused_k0, a PTX/{n++} n==2' "$OUTF" | awk '/^}$/{exit} 1' > "$TMP/sm_fused.ptx"
ok "a held softmax with a prologue: its two vectors of h and of z stored, x and r loaded once" \
  bash -c "test \$(grep -c 'st.global.v4.b32' '$TMP/sm_fused.ptx') = 4 && test \$(grep -c 'ld.global' '$TMP/sm_fused.ptx') = 4"
KILN_PLAN=*.code=cuda run_kiln source specs/layernorm.lua specs/layernorm_bwd.lua
ok "*.code=cuda keeps the CUDA form" bash -c "! grep -q 'body in PTX' '$OUTF'"
KILN_PLAN=*.code=asm run_kiln build specs/layernorm.lua --sm 90a
expect_err "E_USAGE: KILN_PLAN: \\*\\.code=asm: want ptx or cuda" "*.code=asm is refused by name"
KILN_PLAN=*.hint=evict run_kiln build specs/layernorm.lua --sm 90a
expect_err "E_USAGE: KILN_PLAN: \\*\\.hint=evict: want auto, none, last, load, store, both or plain" "*.hint=evict is refused by name"
# the row reads' L2 policy: evict_last from 2^28 bytes of a row input (rmsnorm, bf16, H = 8192:
# 16384 rows), picked at run time; the persistent backward reads under it too
run_kiln source specs/rmsnorm.lua --set H=8192 --sm 90a
ok "rmsnorm picks evict_last from 16384 rows of 8192 bf16, else evict_normal" \
  bash -c "grep -q 'createpolicy.fractional.L2::evict_last' '$OUTF' && grep -q 'createpolicy.fractional.L2::evict_normal' '$OUTF' &&
           grep -q 'setp.ge.s64 %%kp[0-9]*, %[0-9]*, 16384;' '$OUTF' && grep -q 'ld.global.nc.L2::cache_hint.v4.b32 .*, %%kd[0-9]*;' '$OUTF'"
run_kiln source specs/softmax_bwd.lua specs/layernorm_bwd.lua --set H=16384 --sm 90a
ok "both softmax backwards and the persistent layernorm_bwd at H = 16384 read under it, from 8192 rows" \
  bash -c "test \$(grep -c 'createpolicy.fractional.L2::evict_last' '$OUTF') = 3 &&
           test \$(grep -c 'setp.ge.s64 %%kp[0-9]*, %[0-9]*, 8192;' '$OUTF') = 3"
KILN_PLAN=*.hint=none run_kiln source specs/rmsnorm.lua --sm 90a
ok "*.hint=none reads rows without a policy" bash -c "! grep -q 'createpolicy\|cache_hint' '$OUTF'"
KILN_PLAN=*.hint=last run_kiln source specs/rmsnorm.lua --set H=8192 --sm 90a
ok "*.hint=last reads them evict_last at any size" \
  bash -c "grep -q 'L2::evict_last' '$OUTF' && ! grep -q 'L2::evict_normal' '$OUTF'"
# a norm reading a tensor another kernel wrote loads it (it was taken for a fused value)
run_kiln explain tests/specs/mem/forward.lua --sm 90a
expect_out "group 1 \(rmsnorm\): plan row:" "rmsnorm_after_kernel's norm is its own kernel group"

# batch norm in training (the op) runs as its decomposition: two per-channel reductions, the
# per-channel 1 / sqrt(var + eps) it writes, the element output; running statistics need the
# batch fixed at build time (the unbiased variance's n / (n - 1))
run_kiln explain tests/specs/mem/batchnorm.lua --graph batchnorm_train
ok "batchnorm: the mean, the variance with (x - mean)^2 as its prologue, inv_variance, the output" \
  bash -c "grep -q 'group 1 (sub mul reduction): plan axisreduce:' '$OUTF' && grep -q 'group 2 (add rsqrt): plan pointwise:' '$OUTF' && grep -q 'group 3 (sub mul add rsqrt mul mul add identity): plan pointwise:' '$OUTF'"
sed 's/B = 6,/B = k.dynamic,/' tests/specs/mem/batchnorm.lua > "$TMP/bn_dynamic.lua"
run_kiln explain "$TMP/bn_dynamic.lua" --graph batchnorm_running
expect_err "E_NO_ENGINE.*batchnorm 'batchnorm_1': running statistics need the elements a channel has .* dim B is dynamic" \
  "running statistics over a dynamic batch are declined by name"
# the norm backwards from their decompositions: batch norm's four per-channel reductions share
# one kernel (sibling reductions), dx is one pointwise kernel computing x_hat again; instance
# and adaptive layer norm: the per-row means and dx in one row kernel (its epilogue), the
# per-channel / per-sample sums in one kernel (instance norm with a fixed spatial size: m times
# the sums of the rows' means instead)
run_kiln explain tests/specs/mem/norm_bwd_axes.lua --graph instancenorm_bwd_bf16
ok "instancenorm_backward, fixed spatial size: the rows' means and dx (one kernel), the channel sums from the means" \
  bash -c "grep -q 'group 0 (sub mul mul reduction reduction sub mul sub mul mul identity): plan row:v1:reductionx2:[a-z0-9]*:regs' '$OUTF' && grep -q 'group 1 (mul reduction mul reduction): plan colreduce:v1:add+add:lead:' '$OUTF' && ! grep -q 'group 2' '$OUTF'"
run_kiln explain tests/specs/mem/norm_bwd_axes.lua --graph instancenorm_bwd_dynamic_spatial
ok "instancenorm_backward, dynamic spatial size: the channel sums read x and dy again (one kernel)" \
  bash -c "grep -q 'group 2 (sub mul mul reduction reduction): plan axisreduce:v1:add+add:inner:' '$OUTF'"
run_kiln explain tests/specs/mem/norm_bwd_axes.lua --graph batchnorm_bwd_bf16
ok "batchnorm_backward: the four per-channel reductions in one kernel, then dx" \
  bash -c "grep -q 'group 0 (sub mul mul reduction reduction reduction reduction): plan axisreduce:v1:avg+avg+add+add:inner:' '$OUTF' && grep -q 'group 1 (sub mul mul sub mul sub mul mul identity): plan pointwise:' '$OUTF' && ! grep -q 'group 2' '$OUTF'"
run_kiln explain tests/specs/mem/norm_bwd_axes.lua --graph batchnorm_bwd_dx_only
ok "batchnorm_backward's dx alone: the two means (one kernel) and dx; the sums nothing reads are not built" \
  bash -c "grep -q 'group 0 (sub mul mul reduction reduction): plan axisreduce:v1:avg+avg:inner:' '$OUTF' && ! grep -q 'group 2' '$OUTF'"
run_kiln explain tests/specs/mem/norm_bwd_axes.lua --graph adaln_bwd_dscale_only
ok "adalayernorm_backward's dscale alone: one kernel" \
  bash -c "grep -q 'group 0 (sub mul mul reduction): plan axisreduce:v1:add:strided:' '$OUTF' && ! grep -q 'group 1' '$OUTF'"
cat > "$TMP/dead.lua" <<'EOF'
local k = require "kiln"
return k.graph "dead" {
  dims = { T = k.dynamic, H = 512 }, dtype = "bf16",
  inputs = { x = { "T", "H" }, w = { "H" }, b = { "H" } },
  body = function(G, x, w, b)
    local unused = G:reduction(x * x, { mode = "add", dims = { "T", 1 } })
    return { y = G:layernorm(x, w, b, { epsilon = 1e-5 }) }
  end,
}
EOF
run_kiln explain "$TMP/dead.lua"
ok "a value the spec computes and drops builds no kernel" bash -c "grep -q 'group 0 (layernorm): plan row:' '$OUTF' && ! grep -q 'group 1' '$OUTF'"
KILN_PLAN=*.fuse=strict run_kiln explain tests/specs/mem/norm_bwd_axes.lua --graph batchnorm_bwd_bf16
ok "*.fuse=strict: no sibling reductions (each reduction its own kernel, for measuring)" \
  bash -c "test \$(grep -c '^  group [0-9]* (reduction): plan axisreduce:v1:[a-z]*:inner:' '$OUTF') = 4"
run_kiln explain tests/specs/mem/norm_bwd_axes.lua --graph batchnorm_bwd_fp32_2d
ok "batchnorm_backward over [T, C]: the four column reductions in one kernel (colreduce), then dx" \
  bash -c "grep -q 'group 0 (sub mul mul reduction reduction reduction reduction): plan colreduce:v1:avg+avg+add+add:lead:' '$OUTF' && ! grep -q 'group 2' '$OUTF'"
run_kiln explain tests/specs/mem/norm_bwd_axes.lua --graph sibling_reductions
ok "sibling reductions: per channel (inner), over a middle axis (strided) and per row each one kernel; a max beside sums its own" \
  bash -c "grep -q 'plan axisreduce:v1:add+avg+norm2:inner:' '$OUTF' && grep -q 'plan axisreduce:v1:add+avg:strided:' '$OUTF' && grep -q 'group 2 (mul reduction reduction): plan row:v1:reductionx2:' '$OUTF' && grep -q 'group 3 (reduction): plan row:v1:reduction:' '$OUTF'"
# a reduction over a middle axis: a persistent grid of (column block, row slice) items, the
# rows of too few outputs split over several CTAs whose partials a second kernel adds
run_kiln build tests/specs/mem/reduce_sweep.lua --graph middle_axis --set S=4096 --sm 90a -o "$TMP/middle.kpack"
run_kiln pack inspect "$TMP/middle.kpack"
ok "middle-axis reduction over 4096 rows: grid capped at 8 CTAs an SM, the slices' partials added by a second kernel (pdl)" \
  bash -c "grep -q 'grid \[min(ceil(B\*8192/64), SMS\*8), 1, 1\]' '$OUTF' && grep -q 'kiln_middle_axis_k0_final .*:slices:final' '$OUTF' && grep -q 'params 4  pdl' '$OUTF'"
run_kiln build tests/specs/mem/reduce_sweep.lua --graph middle_axis --set S=512 --sm 90a -o "$TMP/middle.kpack"
run_kiln pack inspect "$TMP/middle.kpack"
ok "and over 512 rows a CTA a column block, one kernel, no workspace" \
  bash -c "grep -q 'grid \[ceil(B\*256/64), 1, 1\]' '$OUTF' && ! grep -q '_final' '$OUTF' && grep -q 'workspace: none' '$OUTF'"
run_kiln source tests/specs/bench/norm_bwd.lua --graph bn_bwd_64x3136 --sm 90a
ok "sibling reductions of one input and update share an accumulator (batch norm's backward: sums and means of dy and dy * x_hat, two)" \
  bash -c "grep -q 'float acc_\[2\]\[4\];' '$OUTF' && grep -q 'ws\[gi \* 128LL + col\]' '$OUTF'"
run_kiln source tests/specs/bench/norm_bwd.lua --graph adaln_bwd_4096x3072 --sm 90a
ok "axisreduce reads a per-row value at its row's offset and a per-column block once before the row loop (no index divided per element or row)" \
  bash -c "grep -q 'p4\[o4_ + row_ \* 1LL\]' '$OUTF' && grep -q 'f3_\[j\] = p3\[o3_ + j\];' '$OUTF' && ! grep -q '((e + j) /' '$OUTF' && ! grep -q '(e / 12582912LL)' '$OUTF'"
# the finalize of partial rows is a PTX module for every combine and final map, as is the
# strided form's sum of its row slices (no NVRTC: a third of their cold compile)
run_kiln source tests/specs/mem/reduce.lua --sm 90a --ptx
ok "the finalize of column means, maxima, products and a fold over everything: PTX modules (the mean's count a reciprocal, NaN-propagating maxima)" \
  bash -c "for k in col_avg col_amax col_mul all_amax all_norm1; do grep -q \"kernel kiln_\${k}_k0_final, .*compiled as a PTX module\" '$OUTF' || exit 1; done; grep -q 'rcp.rn.f32' '$OUTF' && grep -q 'max.NaN.f32' '$OUTF' && grep -q 'mul.f32' '$OUTF'"
ok "colreduce's main kernels too (column sums, means, maxima, products; amax and norm of everything): PTX modules, the slots of a warp combined by a reduce-scatter (one value a lane after the shuffles)" \
  bash -c "for k in col_avg col_amax col_mul all_amax all_norm1; do grep -q \"kernel kiln_\${k}_k0, .*compiled as a PTX module\" '$OUTF' || exit 1; done; awk '/kiln_all_amax_k0, a PTX/,/^}\$/' '$OUTF' > '$TMP/all_amax.ptx'; test \$(grep -c 'shfl.sync.bfly' '$TMP/all_amax.ptx') = 31"
ok "column tiles (partial rows wider than shared memory) keep colreduce's CUDA form" \
  bash -c "! grep -q 'kernel kiln_col_add_wide_k0, .*compiled as a PTX module' '$OUTF' && grep -q 'kernel kiln_col_add_wide_k0, plan .*:t22, sm_90a\$' '$OUTF'"
run_kiln source tests/specs/mem/norm_bwd_axes.lua --sm 90a --ptx
ok "sibling column reductions (batch norm's backward over [T, C]: 96 columns, 8 rows a warp): colreduce's PTX form" \
  bash -c "grep -q 'plan colreduce:v1:avg+avg+add+add:lead:p8n3v4r64, sm_90a, compiled as a PTX module' '$OUTF'"
KILN_PLAN=*.code=cuda run_kiln source tests/specs/mem/reduce.lua --sm 90a --ptx
ok "*.code=cuda: colreduce's CUDA form" bash -c "! grep -q 'kernel kiln_col_avg_k0, .*compiled as a PTX module' '$OUTF'"
run_kiln source tests/specs/mem/reduce_sweep.lua --sm 90a --ptx
ok "row reductions of every mode (siblings, products, ragged 1000) compile as PTX modules in one pass; rows of 1024 threads (65536) keep the CUDA form" \
  bash -c "test \$(grep -c '^// ---- row_.*plan row:v1:reduction.*:stream, sm_90a, compiled as a PTX module' '$OUTF') = 30 && ! grep '^// ---- row_' '$OUTF' | grep -v 'H=65536' | grep -vq 'PTX module' && test \$(grep '^// ---- row_.*H=65536' '$OUTF' | grep -c 'PTX module') = 0 && grep -q 'setp.neu.f32' '$OUTF'"
run_kiln explain tests/specs/mem/reduce_sweep.lua --graph row_fp32_fp32 --sm 90a
ok "kiln explain: each kernel's form, and why one compiles through NVRTC" \
  bash -c "grep -q '^    kernel kiln_row_fp32_fp32_k0: a PTX module (ptxas alone)$' '$OUTF' && grep -q '^    kernel kiln_row_fp32_fp32_k0: CUDA through NVRTC, a row of 1024 threads$' '$OUTF'"
run_kiln explain tests/specs/mem/masks.lua --graph mask_sqrt_pow --sm 90a
ok "kiln explain: a pointwise op without a PTX form, by name (pow by 0.5)" grep -q 'kernel kiln_mask_sqrt_pow_k0: CUDA through NVRTC, op pow has no PTX form here' "$OUTF"
# comparisons into bool outputs and pow by small integer constants (tests/specs/mem/masks.lua)
run_kiln explain tests/specs/mem/masks.lua --sm 90a
ok "the mask chains and the norm with a mask and a cube are PTX modules" test "$(grep -c 'a PTX module' "$OUTF")" = 5
run_kiln explain tests/specs/fusion/siblings.lua --sm 90a
ok "and so is siblings.lua (a bool output, x^2, an fp8 output) on sm_90a" grep -q 'kernel kiln_siblings_k0: a PTX module' "$OUTF"
run_kiln explain tests/specs/fusion/siblings.lua --sm 80
ok "on sm_80 its fp8 output keeps the CUDA form" grep -q 'kernel kiln_siblings_k0: CUDA through NVRTC, fp8 outputs before sm_89' "$OUTF"
run_kiln source tests/specs/mem/masks.lua --graph mask_chain_bf16 --sm 90a --ptx
ok "a bool vector of 8 is two words of bytes inserted in order, stored as one v2" \
  bash -c "test \$(grep -c 'bfi.b32 %kr[0-9]*, %kr[0-9]*, %kr[0-9]*, 24, 8;' '$OUTF') = 6 && test \$(grep -c 'st.global.v2.b32' '$OUTF') = 3"
ok "x^-1 and x^-2 divide once (IEEE), the other powers multiply" test "$(grep -c 'div.rn.f32 %kr[0-9]*, 0f3F800000' "$OUTF")" = 16
KILN_PTXAS=ptxas run_kiln explain tests/specs/mem/wide.lua --graph wide_softmax_sink_stats --sm 90a
ok "kiln explain: the groups still listed where the kernels cannot be generated, and why" \
  bash -c "grep -q 'group 0 (softmax): plan row:' '$OUTF' && grep -q '^  kernels not generated: E_USAGE: KILN_PTXAS=ptxas: want exe or nvjitlink$' '$OUTF'"
# a re-read row's trips software pipelined: each loads the next one's vectors before its own work
run_kiln source specs/softmax.lua --graph softmax --set H=65536 --sm 90a --ptx
ok "softmax re-read at 65536: each of a pass's 2 trips of 4 vectors loads the next trip's first (4 predicated loads a pass, 16 words moved on)" \
  bash -c "test \$(grep -c '^@%kp[0-9]* ld.global.nc.L2::cache_hint.v4.b32' '$OUTF') = 8 && test \$(grep -c '^mov.b32 %kr[0-9]*, %kr[0-9]*;' '$OUTF') -ge 32"
KILN_PLAN=*.pipe=0 run_kiln source specs/softmax.lua --graph softmax --set H=65536 --sm 90a --ptx
ok "*.pipe=0: no trip loads the next one's" bash -c "! grep -q '^@%kp[0-9]* ld.global' '$OUTF'"
KILN_PLAN=*.pipe=1 run_kiln source tests/specs/mem/reduce_sweep.lua --graph row_fp32_fp32 --set H=65536 --sm 90a --ptx
ok "*.pipe=1: fp32 row reductions of 1024 threads in PTX, their trips pipelined" \
  bash -c "test \$(grep -c 'p1024n16v4r1:stream, sm_90a, compiled as a PTX module' '$OUTF') = 5 && grep -q '^@%kp[0-9]* ld.global.nc' '$OUTF'"
run_kiln source tests/specs/mem/reduce_sweep.lua --graph row_fp16_fp32 --set H=4096 --sm 90a --ptx
ok "sibling row reductions meet in one barrier, and a sum and a mean of the same row share one accumulator (four reductions, three shared arrays)" \
  bash -c "awk '/kiln_row_fp16_fp32_k0, a PTX/,/^}\$/' '$OUTF' > '$TMP/siblings.ptx' && grep -q 'kiln_row_fp16_fp32_k0, plan row:v1:reductionx4:' '$OUTF' && test \$(grep -c 'bar.sync' '$TMP/siblings.ptx') = 1 && test \$(grep -c '\.shared .*red[0-9]_\[' '$TMP/siblings.ptx') = 3"
run_kiln source tests/specs/gpu/layernorm_offset.lua --graph layernorm_bf16 --set H=32768 --sm 90a --ptx
ok "a re-read row's second pass walks it from its end (what the first pass read last is still in L2)" \
  bash -c "grep -q 'plan row:v1:layernorm:p1024n4v8r1:reread, sm_90a, compiled as a PTX module' '$OUTF' && test \$(grep -c 'add.s64 %kd[0-9]*, %kd[0-9]*, -65536;' '$OUTF') = 4"
KILN_PLAN=*.back=0 run_kiln source tests/specs/gpu/layernorm_offset.lua --graph layernorm_bf16 --set H=32768 --sm 90a --ptx
ok "*.back=0: every pass from the row's start" bash -c "! grep -q 'add.s64 %kd[0-9]*, %kd[0-9]*, -' '$OUTF'"
run_kiln build tests/specs/bench/axes.lua --sm 90a -o "$TMP/axes.kpack"
run_kiln pack inspect "$TMP/axes.kpack"
ok "column sums of 64 columns take 512 rows a CTA (2 a slot), of 4096 columns 16" \
  bash -c "grep -q 'grid \[min(ceil(T/512), SMS\*2), 1, 1\]' '$OUTF' && grep -q 'grid \[min(ceil(T/16), SMS\*2), 1, 1\]' '$OUTF'"
run_kiln source tests/specs/mem/row_epilogue.lua --sm 90a
ok "a reduction's epilogue: PTX modules over a held row (the one-pass layer norm at 2048, its rsqrt in PTX); a ragged row held by 128 threads keeps the CUDA form" \
  bash -c "grep -q 'kiln_layernorm_onepass_fp32_k0, plan row:v1:reductionx2:p256n2v4r1:regs, sm_90a, compiled as a PTX module' '$OUTF' && grep -q 'rsqrt.approx.f32' '$OUTF' && grep -q 'kiln_layernorm_onepass_fp32_k0, plan row:v1:reductionx2:p128n2v4r1:regs, sm_90a\$' '$OUTF'"
run_kiln source tests/specs/mem/norm_axes.lua --sm 90a --ptx
ok "row kernels whose row count is a product of dims (instance norm over [N, C] rows) are PTX modules: the product multiplied in PTX" \
  bash -c "grep -q 'kiln_instancenorm_bf16_k0, plan row:v1:instancenorm:.*compiled as a PTX module' '$OUTF'"
run_kiln source tests/specs/mem/scratch.lua --graph scratch_prologue_rowsum --sm 90a --ptx
ok "a row reduction reads a column statistic from scratch at its column (not as a row of the scratch tensor)" \
  bash -c "awk '/kiln_scratch_prologue_rowsum_k1, a PTX/,/^}\$/' '$OUTF' > '$TMP/rowsum.ptx' && grep -q 'ld.global.nc.v4' '$TMP/rowsum.ptx' && ! grep -q 'mad.lo.s64 .*, 2048,' '$TMP/rowsum.ptx'"
KILN_PLAN=*.code=cuda run_kiln source tests/specs/mem/reduce.lua --graph row_add --sm 90a
ok "*.code=cuda: the row reduction's CUDA form" bash -c "grep -q 'kiln_row_add_k0, plan row:v1:reduction:p128n4v8r1:stream, sm_90a\$' '$OUTF'"
run_kiln source tests/specs/bench/norm_bwd.lua --graph adaln_bwd_4096x3072 --sm 90a --ptx
ok "axisreduce's strided form over row slices and their sum: PTX modules (no 64-bit division per row)" \
  bash -c "grep -q 'kernel kiln_adaln_bwd_4096x3072_k1_final, plan .*:slices:final, sm_90a, compiled as a PTX module' '$OUTF' && grep -q 'kernel kiln_adaln_bwd_4096x3072_k1, plan .*:slices, sm_90a, compiled as a PTX module' '$OUTF' && grep -q 'mul.hi.u64' '$OUTF'"
run_kiln source tests/specs/bench/norm_bwd.lua --graph bn_bwd_64x3136 --sm 90a --ptx
ok "per-channel sums (axisreduce's inner form) a PTX module: no division per vector, the per-channel values loaded once" \
  bash -c "grep -q 'kernel kiln_bn_bwd_64x3136_k0, plan axisreduce:.*:inner:.*compiled as a PTX module' '$OUTF' && grep -q '^\.minnctapersm 4' '$OUTF' && ! awk '/kiln_bn_bwd_64x3136_k0, a PTX/,/^}\$/' '$OUTF' | grep -q 'div.u64.*392\|rem.u64'"
KILN_PLAN=*.code=cuda run_kiln source tests/specs/bench/norm_bwd.lua --graph bn_bwd_64x3136 --sm 90a
ok "CUDA forms: a per-channel value read once a vector by the pointwise kernel and once a CTA by the per-channel sums (no index per element)" \
  bash -c "grep -q 'const float v3 = p3\[((i0 / 3136LL) % 64LL)\];' '$OUTF' && grep -q 'const float f4_ = p4\[' '$OUTF' && ! grep -q '(i0 + j) / 3136' '$OUTF' && ! grep -q 'e / 3136' '$OUTF'"
run_kiln source tests/specs/bench/norm_bwd.lua --graph bn_bwd_64x3136 --sm 90a --ptx
ok "the pointwise kernel reading per-channel values once a vector is a PTX module: the channel by a multiply-high, once for its five inputs" \
  bash -c "awk '/kiln_bn_bwd_64x3136_k1, a PTX/,/^}\$/' '$OUTF' > '$TMP/bn_dx.ptx' && grep -q 'kernel kiln_bn_bwd_64x3136_k1, plan pointwise:.*compiled as a PTX module' '$OUTF' && test \$(grep -c 'mul.hi.u64' '$TMP/bn_dx.ptx') = 1 && test \$(grep -c 'ld.global.nc.f32' '$TMP/bn_dx.ptx') = 5 && ! grep -q 'div\.' '$TMP/bn_dx.ptx'"
run_kiln source tests/specs/bench/ten.lua --set H=1024 --sm 90a --ptx
ok "relu has a PTX form (the start-up benchmark's relu(x) * x a PTX module)" \
  bash -c "grep -q 'kernel kiln_ten_k0, plan pointwise:.*compiled as a PTX module' '$OUTF' && grep -q 'setp.le.f32' '$OUTF'"
run_kiln explain tests/specs/mem/norm_bwd_axes.lua --graph adaln_bwd_bf16
ok "adalayernorm_backward: dy * scale and x_hat computed again in each kernel (no scratch), the per-row means and dx in one kernel, the per-sample sums in one" \
  bash -c "grep -q 'group 0 (sub mul mul mul reduction reduction sub mul sub mul mul identity): plan row:v1:reductionx2:[a-z0-9]*:regs' '$OUTF' && grep -q 'group 1 (sub mul mul mul mul reduction reduction): plan axisreduce:v1:add+add:strided:' '$OUTF' && ! grep -q 'group 2' '$OUTF'"
# element ops after row reductions run in the reductions' kernel, the row held (regs) or
# re-read (wide rows); KILN_PLAN=*.fuse=rowsplit (for measuring) keeps them in a kernel of their own
run_kiln explain tests/specs/mem/row_epilogue.lua --sm 90a
ok "row_epilogue.lua: every graph one kernel, the row held or (32768 fp32) re-read" \
  bash -c "! grep -q '^  group 1' '$OUTF' && test \$(grep -c '^  group 0 ([a-z ]*): plan row:v1:reduction[x2]*:[a-z0-9]*:regs\$' '$OUTF') = 7 && grep -q '^  group 0 (add reduction sub exp): plan row:v1:reduction:[a-z0-9]*:reread\$' '$OUTF'"
run_kiln explain tests/specs/mem/row_epilogue.lua --graph layernorm_onepass_fp32 --set H=768 --sm 90a
ok "layer norm from primitives: sibling means, the per-row ops and the element ops in one kernel" \
  bash -c "grep -q 'group 0 (reduction mul reduction mul sub add rsqrt sub mul mul): plan row:v1:reductionx2:' '$OUTF'"
KILN_PLAN=*.fuse=rowsplit run_kiln explain tests/specs/mem/row_epilogue.lua --graph rowscale_bf16 --set H=4096 --sm 90a
ok "*.fuse=rowsplit: the reduction streams its row, the element ops their own kernel" \
  bash -c "grep -q 'group 0 (reduction): plan row:v1:reduction:[a-z0-9]*:stream' '$OUTF' && grep -q 'group 1 (add div): plan pointwise:' '$OUTF'"
run_kiln source tests/specs/mem/row_epilogue.lua --graph per_sample_scale_bf16 --sm 90a
ok "a per-sample scale [B, 1, D] is read by vectors from its row's start, not gathered per element" \
  bash -c "grep -q 'const kiln_i64 s[0-9]*_ = (row / 64LL) \* 1152LL;' '$OUTF' && ! grep -q '% 1152LL)' '$OUTF'"
cat > "$TMP/siblings_two.lua" <<'EOF'
local k = require "kiln"
return k.graph "siblings_two_inputs" {
  dims = { T = k.dynamic, H = 1024 }, dtype = "bf16",
  inputs = { x = { "T", "H" }, y = { "T", "H" } },
  body = function(g, x, y)
    return { a = g:reduction(x, { mode = "add", dims = { "T", 1 } }), b = g:reduction(y, { mode = "add", dims = { "T", 1 } }) }
  end,
}
EOF
KILN_PLAN=*.code=cuda run_kiln source "$TMP/siblings_two.lua" --sm 90a
ok "sibling row reductions of two inputs each read their own in the CUDA form (an unfilled update had been emitted)" \
  bash -c "grep -q 'a0 += v1;' '$OUTF' && grep -q 'a1 += v2;' '$OUTF' && ! grep -q '%v' '$OUTF'"
run_kiln build tests/specs/mem/norm_bwd_axes.lua --sm 90a -o "$TMP/nbw.kpack"
run_kiln pack inspect "$TMP/nbw.kpack"
ok "the norm backwards exchange only per-channel / per-row statistics (x_hat and dy * scale computed again; with the forward in the plan, its MEAN and INV_VARIANCE)" \
  bash -c "awk '/^plan /{p=\$2} / scratch +\\[/{print p, \$3}' '$OUTF' | grep -v ' reduction_[0-9]*.Y$' | grep -v '^batchnorm_fwd_bwd batchnorm_1\.\(MEAN\|INV_VARIANCE\)$' | wc -l | grep -qx 0"
sed 's/mean = { "T", "C", 1, 1, dtype = "fp32" }, inv_var = { "T", "C", 1, 1, dtype = "fp32" } },/},/; s/body = function(G, dy, x, g, mean, inv_var)/body = function(G, dy, x, g)/; s/G:instancenorm_backward(dy, x, g, mean, inv_var)/G:instancenorm_backward(dy, x, g)/' \
  tests/specs/mem/norm_bwd_axes.lua > "$TMP/in_nostats.lua"
run_kiln explain "$TMP/in_nostats.lua" --graph instancenorm_bwd_bf16
expect_err "E_NO_ENGINE.*instancenorm_backward .*statistics recomputed in the backward .* are not built" \
  "instance norm's backward without saved statistics is declined by name"
# a virtual sum read by two anchors: each computes it again as its prologue (reading x and r
# twice moves fewer bytes than writing the fp32 sum once and reading it twice), no scratch
cat > "$TMP/nofuse.lua" <<'EOF'
local k = require "kiln"
return k.graph "nofuse" {
  dims = { T = k.dynamic, H = 1024 }, dtype = "bf16",
  inputs = { x = { "T", "H" }, r = { "T", "H" }, w = { "H" } },
  body = function(g, x, r, w)
    local h = x + r
    return { y = g:rmsnorm(h, w, { epsilon = 1e-6 }), s = g:softmax(h) }
  end,
}
EOF
run_kiln explain "$TMP/nofuse.lua"
expect_out "group 0 \(add rmsnorm\): plan row:" "a sum read by two anchors: the first computes it as its prologue"
expect_out "group 1 \(add softmax\): plan row:" "and the second computes it again"
run_kiln build "$TMP/nofuse.lua" --sm 90a -o "$TMP/nofuse.kpack"
run_kiln pack inspect "$TMP/nofuse.kpack"
expect_out "workspace: none" "so the plan needs no scratch"
KILN_PLAN=*.fuse=strict run_kiln explain "$TMP/nofuse.lua"
expect_out "group 2 \(softmax\): plan row:" "*.fuse=strict: the sum is a kernel of its own (read from scratch by both)"
KILN_PLAN=*.fuse=all run_kiln explain "$TMP/nofuse.lua"
expect_err "E_USAGE: KILN_PLAN: \*.fuse=all: want auto, strict or rowsplit" "a fuse other than auto, strict or rowsplit is refused by name"
KILN_PLAN=0=*.fuse=strict run_kiln explain "$TMP/nofuse.lua"
expect_err "E_USAGE: KILN_PLAN: 0=\*.fuse=strict: \*.fuse is the whole graph's setting \(it decides the kernel groups\): give it without a group" \
  "*.fuse for one group is refused: it decides the groups"
KILN_FUSE=strict run_kiln explain "$TMP/nofuse.lua"
ok "the environment variable KILN_FUSE is no longer read" bash -c "grep -q 'group 1 (add softmax): plan row:' '$OUTF' && ! grep -q 'group 2' '$OUTF'"
# every crossing the engines meet: norm -> GEMM (TMA from the workspace), GEMM -> softmax,
# pointwise -> a row kernel and a GEMM, row -> column reduction, per-row reduction -> pointwise,
# per-channel statistics -> a reduction's prologue and pointwise (batch norm in training from
# primitives: x - mean computed again by the variance and the output kernels)
run_kiln explain tests/specs/mem/scratch.lua
ok "explain tests/specs/mem/scratch.lua: every group has an engine" bash -c "! grep -q 'NO ENGINE' '$OUTF'"
run_kiln explain tests/specs/mem/scratch.lua --graph scratch_two_shapes
ok "a pointwise group with outputs of two shapes: the [H] one its own kernel, the [T, H] one computes it again" \
  bash -c "grep -q 'group 0 (mul add): plan pointwise:' '$OUTF' && grep -q 'group 1 (mul add add): plan pointwise:' '$OUTF'"
run_kiln explain tests/specs/mem/scratch.lua --graph scratch_batchnorm_stats
expect_out "group 1 \(sub mul reduction\): plan axisreduce:" "batch norm from primitives: the variance reduces (x - mean)^2 as its prologue"
expect_out "group 2 \(sub mul add rsqrt mul mul add\): plan pointwise:" "and the output kernel computes x - mean again: three kernel groups"
run_kiln build tests/specs/mem/scratch.lua --sm 80 --sm 90a --sm 100a -o "$TMP/scratch.kpack"
expect_rc 0 "build tests/specs/mem/scratch.lua for sm_80 sm_90a sm_100a"
run_kiln pack inspect "$TMP/scratch.kpack"
ok "its plans hold 17 scratch tensors" test "$(grep -cE '^ +uid [0-9]+ +[^ ]+ +[a-z0-9]+ +scratch ' "$OUTF")" = 17
expect_out "add_1.OUT_0 +fp32 +scratch +\[T, 512\]" "a sum read by a norm and a GEMM is written once by a pointwise kernel"
expect_out "workspace: [0-9]+ \+ scratch identity_[0-9]+.OUT_0 " "a GEMM's own workspace comes first, the scratch after it"
# block quantize along the row (rowquant.lua): RMSNorm -> 1x128 fp8 with fp32 scales in one kernel,
# each block's amax by xor shuffles among the lanes holding it, a lane a block writing its scale;
# standalone quantize and dequantize with their prologue and epilogue; what the engine declines named
run_kiln explain specs/rmsnorm_fp8_block.lua --set H=8192 --sm 90a
ok "rmsnorm_fp8_block at H = 8192: one kernel" test "$(grep -c '^    kernel ' "$OUTF")" = 1
expect_out "group 0 \(rmsnorm block_scale_quantize\): plan row:v1:rmsnorm:p512n2v8r1:regs:bq128$" \
  "rmsnorm_fp8_block at H = 8192: the row held by 512 threads, blocks of 128"
expect_out "CUDA through NVRTC, a block quantize in the epilogue" "its CUDA form, and why"
run_kiln source specs/rmsnorm_fp8_block.lua --set H=7168 --sm 90a
expect_out "__shfl_xor_sync\(qmask16_, qa_, o_\)" "a block's amax: xor shuffles among its 16 lanes (a mask: a ragged row's last trip)"
expect_out "if \(\(lane & 15\) == 0\) p[0-9]+\[row \* 56LL \+ c / 128\] = qs_;" "one lane of a block writes its scale [T, H / 128]"
run_kiln explain tests/specs/mem/quantize.lua --graph quant_bf16_prologue --sm 90a
expect_out "group 0 \(add gelu block_scale_quantize\): plan row:v1:block_scale_quantize:" "a standalone block quantize takes its prologue"
run_kiln explain tests/specs/mem/quantize.lua --graph dequant_e5m2_e8m0_epilogue --sm 90a
expect_out "group 0 \(block_scale_dequantize mul identity\): plan row:v1:block_scale_dequantize:" "a block dequantize takes its epilogue"
cat > "$TMP/quant_bad.lua" <<EOF
local k = require "kiln"
return {
  k.graph "q_axis0" { dims = { T = { 64 }, H = { 256 } }, dtype = "bf16", inputs = { x = { "T", "H" } },
    body = function(g, x) local y, s = g:block_scale_quantize(x, { block_size = 32, axis = 0 }); return { y = y, s = s } end },
  k.graph "q_wide_block" { dims = { T = k.dynamic, H = { 2048 } }, dtype = "bf16", inputs = { x = { "T", "H" }, w = { "H" } },
    body = function(g, x, w)
      local y, s = g:block_scale_quantize(g:rmsnorm(x, w, { epsilon = 1e-6 }), { block_size = 512, dtypes = { scale = "fp32" } })
      return { y = y, s = s }
    end },
  k.graph "q_block96" { dims = { T = k.dynamic, H = { 1536 } }, dtype = "bf16", inputs = { x = { "T", "H" } },
    body = function(g, x) local y, s = g:block_scale_quantize(x, { block_size = 96 }); return { y = y, s = s } end },
  k.graph "dq_k_blocks" { dims = { K = { 256 } }, dtype = "bf16",
    inputs = { x = { "K", 64, dtype = "fp8_e4m3" }, s = { 8, 64, dtype = "fp8_e8m0" } },
    body = function(g, x, s) return { y = g:block_scale_dequantize(x, s, { block_size = { 32, 1 } }) } end },
  k.graph "q_ragged_block" { dims = { T = k.dynamic, H = { 100 } }, dtype = "bf16", inputs = { x = { "T", "H" } },
    body = function(g, x) local y, s = g:block_scale_quantize(x, { block_size = 32 }); return { y = y, s = s } end },
}
EOF
run_kiln build "$TMP/quant_bad.lua" --graph q_axis0 --sm 90a -o "$TMP/qb.kpack"
expect_err "E_NO_ENGINE.*row: block_scale_quantize '[^']+' along axis 0, not the last axis" "a quantize along axis 0: E_NO_ENGINE, the row engine says why"
run_kiln build "$TMP/quant_bad.lua" --graph q_wide_block --sm 90a -o "$TMP/qb.kpack"
expect_err "E_NO_ENGINE.*a block of 512 elements spans 64 lanes, more than a warp" "a block of 512 after a norm: declined by name"
run_kiln build "$TMP/quant_bad.lua" --graph q_block96 --sm 90a -o "$TMP/qb.kpack"
expect_err "E_NO_ENGINE.*a block of 96 elements is not a power-of-two number of 8-element vectors" "a block of 96: declined by name"
run_kiln build "$TMP/quant_bad.lua" --graph dq_k_blocks --sm 90a -o "$TMP/qb.kpack"
expect_err "E_NO_ENGINE.*blocks along axis 0, not only the last" "a dequantize blocked along K of [K, N]: declined by name"
run_kiln check "$TMP/quant_bad.lua" --graph q_ragged_block
expect_err "E_SHAPE.*axis 1 has extent 100, which must be a static multiple of block_size 32" "a block not dividing the row: E_SHAPE"
# norms in cuDNN's [N, C, 1, 1] channels-last and [N, 1, 1, C] layouts: the kernels of [N, C]
cat > "$TMP/unit_flat.lua" <<'EOF'
local k = require "kiln"
return {
  k.graph "layernorm_nc11_channels_last" { dims = { T = k.dynamic, C = 1024 }, dtype = "bf16",
    inputs = { x = { "T", "C" }, w = { "C" }, b = { "C" } },
    body = function(g, x, w, b)
      local y, m, v = g:layernorm(x, w, b, { epsilon = 1e-5, phase = "training" })
      return { y = y, mean = m, inv_var = v }
    end },
  k.graph "rmsnorm_n11c_residual" { dims = { T = k.dynamic, C = 768 }, dtype = "bf16",
    inputs = { x = { "T", "C" }, r = { "T", "C" }, w = { "C" } },
    body = function(g, x, r, w) local h = g:add(x, r); return { y = g:rmsnorm(h, w, { epsilon = 1e-6 }), h = h } end },
  k.graph "layernorm_bwd_n11c" { dims = { T = k.dynamic, C = 2048 }, dtype = "bf16",
    inputs = { dy = { "T", "C" }, x = { "T", "C" }, w = { "C" }, mean = { "T", 1, dtype = "fp32" }, rstd = { "T", 1, dtype = "fp32" } },
    body = function(g, dy, x, w, mean, rstd)
      local dx, dw, db = g:layernorm_backward(dy, x, w, mean, rstd)
      return { dx = dx, dw = dw, db = db }
    end },
}
EOF
"$KILN" source "$TMP/unit_flat.lua" --ptx > "$TMP/flat.src" 2>&1
"$KILN" source tests/specs/mem/unit_axes.lua --ptx --graph layernorm_nc11_channels_last --graph rmsnorm_n11c_residual \
  --graph layernorm_bwd_n11c > "$TMP/unit.src" 2>&1
ok "norms over [N, C, 1, 1] channels-last and [N, 1, 1, C] are the kernels of [N, C], byte for byte" cmp -s "$TMP/flat.src" "$TMP/unit.src"
done_testing
