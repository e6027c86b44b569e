#!/usr/bin/env bash
# bench/results.py (bench/RESULTS.md from a device run's CSV files), on the CPU: small CSV files
# with the columns each benchmark writes; every family's table with its rows and ratios, a
# missing CSV drops its section, a ratio below 1 is a miss, the same files give the same bytes.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip_all "no python3"
plan 42
R=$TMP/run
mkdir -p "$R"
# the headers as the writers emit them (the column order of their dicts)
cat > "$R/bench.csv" <<'EOF'
case,shape,kiln_ms,eager_ms,compile_ms,kiln_tbs,eager_tbs,compile_tbs,pct_of_copy,vs_eager,vs_compile,graph_kiln_tbs,graph_vs_eager,graph_vs_compile,same_copy_graph_tbs,max_err_vs_torch,agrees,device,copy_tbs
bias_gelu,16384x8192,0.2,0.37,0.22,4.02,2.17,3.65,94.8,1.85,1.1,4.1,1.9,1.12,4.2,0.0078125,True,NVIDIA H200,4.24
rmsnorm,4096x4096,0.018,0.02,0.0175,3.73,3.36,3.84,88.0,1.1111,0.9722222222222222,3.9,1.2,0.996,4.1,0.0,True,NVIDIA H200,4.24
softmax,4096x65536,0.3,0.5,0.9,3.6,2.1,1.2,85.0,1.6666,3.0,nan,nan,nan,4.2,0.001,False,NVIDIA H200,4.24
EOF
cat > "$R/bench_gemm.csv" <<'EOF'
case,shape,kiln_ms,peer,peer_ms,kiln_tflops,peer_tflops,vs_peer,rel_l2,peer_rel_l2,agrees,plan,device
gemm_bf16,8192x8192x8192,1.6,torch.matmul,1.7,687.2,646.8,1.0625,0.0031,0.0031,True,gemm:sm90_t256,NVIDIA H200
gemm_fp8,8192x8192x8192,0.9,torch._scaled_mm,0.85,1221.7,1293.5,0.9444,0.004,0.004,True,gemm_fp8:sm90,NVIDIA H200
EOF
cat > "$R/gemm_shapes.csv" <<'EOF'
case,shape,M,kiln_ms,peer,peer_ms,kiln_tflops,peer_tflops,vs_peer,rel_l2,peer_rel_l2,agrees,plan,device
linear_fp8,1x5120x8192,1,0.01600,torch._scaled_mm,0.01500,5.2,5.6,0.938,3.10e-03,3.10e-03,1,gemm:v1:sm90:128x192x128:s4:sk1:ts,NVIDIA H200
linear,4096x4096x4096,4096,0.20000,F.linear,0.22000,687.2,624.7,1.100,3.00e-03,3.00e-03,1,gemm:v1:sm90:128x256x64:s4:sk:ts,NVIDIA H200
EOF
cat > "$R/axes.csv" <<'EOF'
case,shape,kiln_ms,kiln_TBs,pct_copy,x_eager,x_compile
chan_fp32_64,64x64x3136,0.0166,3.09,73,1.95,0.90
mid_bf16,16x512x1024,0.0039,4.34,102,2.34,1.48
EOF
cat > "$R/axis_ops.csv" <<'EOF'
case,shape,kiln_ms,kiln_TBs,pct_copy,x_eager,x_compile
softmax_21x65536,4x21x65536,0.0200,2.75,65,3.10,1.20
EOF
cat > "$R/scratch.csv" <<'EOF'
case,n,kiln_ms,eager_ms,compile_ms,x_eager,x_compile,workspace_MB
norm_gemm,4096,0.2100,0.2900,0.2300,1.38,1.10,33.6
bn_train,32,0.0900,0.2000,0.0800,2.22,0.89,0.0
EOF
cat > "$R/norm_bwd.csv" <<'EOF'
case,shape,kiln_ms,kiln_TBs,pct_copy,x_eager,x_compile
bn_bwd_64x3136,32x64x3136,0.0500,3.85,91,2.50,1.05
adaln_bwd_4096x3072,1x4096x3072,0.0300,2.52,60,1.30,0.85
EOF
cat > "$R/stream_bound.csv" <<'EOF'
shape,case,ms,tbs,pct_copy
4096x4096,"copy, same bytes",0.0260,3.871,91.2
4096x4096,"torch add (2 in, 1 out)",0.0270,3.728,87.8
4096x4096,"kiln stream (2 in, 1 out)",0.0250,4.027,94.9
4096x4096,kiln layernorm_bwd,0.0320,3.146,74.1
4096x4096,kiln rmsnorm_bwd,0.0300,3.355,79.1
16384x8192,"copy, same bytes",0.2400,4.194,98.9
16384x8192,"torch add (2 in, 1 out)",0.2400,4.194,98.9
16384x8192,"kiln stream (2 in, 1 out)",0.2500,4.027,94.9
16384x8192,kiln layernorm_bwd,0.2600,3.872,91.3
16384x8192,kiln rmsnorm_bwd,0.2550,3.948,93.1
EOF
cat > "$R/sdpa.csv" <<'EOF'
case,plan,kiln_ms,kiln_TFLOPs,cudnn_ms,cudnn_TFLOPs,x_cudnn,fa2_TFLOPs,x_fa2,max_abs_vs_cudnn,check
full B4 H16/16 S4096 d128,sdpa_full:sm90a,0.6000,733,0.6500,677,1.083,520,1.410,0.00391,ok
causal B1 H64/8 S8192 d128,sdpa_gqa_causal:sm90a,1.2000,458,1.1000,500,0.917,,,0.00391,ok
EOF
cat > "$R/sdpa_decode.csv" <<'EOF'
case,plan,kiln_ms,kiln_GBs,cudnn_ms,cudnn_GBs,x_cudnn,fa2_ms,fa2_GBs,x_fa2,max_abs_vs_fp32,check
decode B1 H32/8 Sq1 Skv8192 d128,attention:v1:decode:k32:s3,0.0147,2287,0.0121,2763,0.828,0.0211,1588,1.440,0.00016,ok
EOF
cat > "$R/sdpa_bwd.csv" <<'EOF'
case,plan,kiln_ms,kiln_TFLOPs,det_ms,det_vs_default,cudnn_ms,cudnn_TFLOPs,x_cudnn,fa2_ms,fa2_TFLOPs,x_fa2,rel_err_vs_fp32,deterministic,check
bwd causal B4 H16/16 S4096 d128,attention:v1:bwd:128x32,2.1000,164,2.3000,0.913,1.0000,344,0.476,1.5000,229,0.714,0.0041,bitwise,ok
EOF
cat > "$R/decoder.csv" <<'EOF'
case,torch_ms,compile_ms,kiln_ms,kiln_compile_ms,vs_torch,vs_compile,max_rel_err
decoder 4x2048 h4096 heads32 ffn11008,30.100,27.500,28.900,27.000,1.115,1.019,0.0123
EOF
cat > "$R/gdn.csv" <<'EOF'
case,plan,kiln_us,peer,peer_us,ratio,pct_copy,err_ratio,check
decode B256 HV32 K128 V128,gdn:v1:recurrent:bv32:r2:c4,410.2,fla fused_recurrent,820.4,2.000,86%,0.0011,ok
EOF
cat > "$R/conv1d.csv" <<'EOF'
case,plan,kiln_us,peer,peer_us,ratio,pct_copy,max_err,check
fwd B4 T4096 D8192,conv1d:v1:fwd:cl:w4:c64:t128,110.5,fla causal_conv1d,150.1,1.358,91%,0.004,ok
EOF
printf 'a,b\n1,2\n' > "$R/extra.csv"
cat > "$R/gpu.log" <<'EOF'
=== env: /w/build/kiln env
kiln_version: 0.1.0
driver_cuda_version: 13.0
gpu0: NVIDIA H200, compute capability 9.0, 132 SMs, 139.8 GiB, kiln target sm_90a
name, clocks.sm [MHz], clocks.mem [MHz], temperature.gpu, power.draw [W]
NVIDIA H200, 1980 MHz, 3201 MHz, 35, 120.50 W
=== bench-sdpa: python3 bench/bench_sdpa.py --pack /tmp/x/sdpa.kpack --out /o
EOF
printf '%-28s %-5s %4ss\n' env ok 0 bench-sdpa ok 40 bench-axes FAIL 12 > "$R/summary.txt"
touch -d '2026-11-30 12:00 UTC' "$R"/*.csv

# every header above names only columns its writer names, and holds every column the script reads
cols_ok=1
while read -r file writers want; do
  head=$(head -1 "$R/$file")
  for c in ${head//,/ }; do
    found=0
    for w in ${writers//,/ }; do grep -qw -- "$c" "$w" && found=1; done
    [ $found = 1 ] || { echo "# $file: column $c not in $writers"; cols_ok=0; }
  done
  for c in $want; do
    [[ ,$head, == *,$c,* ]] || { echo "# $file: the script reads $c, the test's header lacks it"; cols_ok=0; }
  done
done < <(python3 bench/results.py --list-columns)
ok "the test's headers are the writers' columns, the script's columns among them" [ $cols_ok = 1 ]

render() { python3 bench/results.py "$@" 2>"$TMP/err"; }
render "$R" --commit abc1234 --command "KILN_GPU_STEPS=bench tests/gpu/run" -o "$TMP/a.md"; rc=$?
ok "results.py exits 0" [ $rc = 0 ]
has() { grep -qF -- "$1" "$TMP/${2:-a.md}"; }
for t in "Norms, softmax and pointwise beside torch" "GEMM beside cuBLAS" "Reductions over axes" \
  "Ops over other axes" "Graphs crossing kernels (scratch tensors)" \
  "Backward of batch norm, instance norm and adaptive layer norm" \
  "Backward norms against the stream bound" "Attention beside cuDNN and FlashAttention-2" \
  "Decode attention beside cuDNN and FlashAttention-2" "A decoder block's training step with kiln's modules" \
  "Gated DeltaNet beside FLA" "Causal conv1d beside the copy rate and FLA" \
  "GEMM over the shapes of real layers beside cuBLAS"; do
  ok "section: $t" has "## $t"
done
ok "bench.csv rows and ratios" has '| `bias_gelu` | 16384x8192 | 0.2000 | 4.02 | 95% | 0.3700 | 1.85x | 0.2200 | 1.10x | 4.10 | 98% | 1.90x | 1.12x | yes |  |'
ok "a miss in bold, named in the miss column; 0.996 not rounded up to 1.00" \
  has '| `rmsnorm` | 4096x4096 | 0.0180 | 3.73 | 88% | 0.0200 | 1.11x | 0.0175 | **0.97x** | 3.90 | 95% | 1.20x | **0.996x** | yes | **miss**: torch.compile, torch.compile (graphs) |'
ok "nan graph timings are dashes, a disagreeing case is marked" \
  has '| `softmax` | 4096x65536 | 0.3000 | 3.60 | 85% | 0.5000 | 1.67x | 0.9000 | 3.00x | – | – | – | – | **no** |  |'
ok "per-family counts with the worst ratio" \
  has '- vs torch.compile (graphs): 2 cases, 1 at or above the peer, worst ratio **0.996x** (rmsnorm 4096x4096); 1 without a value.'
ok "GEMM rows beside the named peer" \
  has '| `gemm_fp8` | 8192x8192x8192 | `torch._scaled_mm` | 0.900 | 1221.7 | 0.850 | 1293.5 | **0.94x** | 4.0e-03 / 4.0e-03 | yes | `gemm_fp8:sm90` | **miss**: cuBLAS (torch) |'
ok "GEMM counts" has '- vs cuBLAS (torch): 2 cases, 1 at or above the peer, worst ratio **0.94x** (gemm_fp8 8192x8192x8192).'
ok "GEMM shapes: the geometric mean of the ratios" has 'Geometric mean over the 2 shapes: 1.016x of cuBLAS; 0 below 0.9x.'
ok "axes rows" has '| `chan_fp32_64` | 64x64x3136 | 0.0166 | 3.09 | 73% | 1.95x | **0.90x** | **miss**: torch.compile |'
ok "axis_ops rows" has '| `softmax_21x65536` | 4x21x65536 | 0.0200 | 2.75 | 65% | 3.10x | 1.20x |  |'
ok "scratch rows" has '| `bn_train` | 32x64x3136 | 0.0900 | 0.2000 | 2.22x | 0.0800 | **0.89x** | 0.0 | **miss**: torch.compile |'
ok "norm_bwd rows" has '| `adaln_bwd_4096x3072` | 1x4096x3072 | 0.0300 | 2.52 | 60% | 1.30x | **0.85x** | **miss**: torch.compile |'
ok "stream bound: one row a shape, kiln's stream over torch's add, the norms' share of the stream" \
  has '| 16384x8192 | 4.194 TB/s, 98.9% | 4.194 TB/s, 98.9% | 4.027 TB/s, 94.9% | **0.96x** | 3.872 TB/s, 91.3% | 96.2% | 3.948 TB/s, 93.1% | 98.0% | **miss**: torch add (kiln'"'"'s stream) |'
ok "attention rows, FA2 missing as a dash" \
  has '| causal B1 H64/8 S8192 d128 | 1.2000 | 458 | 1.1000 | 500 | **0.917x** | – | – | 0.00391 | ok | `sdpa_gqa_causal:sm90a` | **miss**: cuDNN (torch SDPA) |'
ok "summary table" has '| Attention beside cuDNN and FlashAttention-2 | cuDNN (torch SDPA) | 2 | 1 | **0.917x** (causal B1 H64/8 S8192 d128) |'
ok "each section names device, commit, date, command and step" \
  has 'Device NVIDIA H200 · commit `abc1234` · 2026-11-30 · `KILN_GPU_STEPS=bench tests/gpu/run` (step `bench-axes`: FAIL) · `axes.csv`.'
ok "the device from gpu.log where the CSV has none" grep -qF 'Device NVIDIA H200 · commit `abc1234` · 2026-11-30 · `KILN_GPU_STEPS=bench tests/gpu/run` · `scratch.csv`.' "$TMP/a.md"
ok "the header's device line from kiln env" has '- Device: NVIDIA H200 (compute capability 9.0, 132 SMs; driver CUDA 13.0; kiln 0.1.0;'
ok "the regenerating command" has "    python3 bench/results.py $R --commit abc1234 --command 'KILN_GPU_STEPS=bench tests/gpu/run'"
ok "an unknown CSV is listed as not rendered" has "- \`$R/extra.csv\`: not a file this script knows"
ok "no session narrative" bash -c "! grep -qi session '$TMP/a.md'"

render "$R" --commit abc1234 --command "KILN_GPU_STEPS=bench tests/gpu/run" -o "$TMP/b.md"
ok "a rerun gives the same bytes" cmp -s "$TMP/a.md" "$TMP/b.md"
render "$R" --commit abc1234 --command "KILN_GPU_STEPS=bench tests/gpu/run" -o - > "$TMP/c.md"
ok "-o - writes the same to stdout" cmp -s "$TMP/a.md" "$TMP/c.md"

# a run without axes.csv and sdpa.csv: their sections go, the others stay
R2=$TMP/run2
mkdir -p "$R2"
cp -p "$R"/*.csv "$R2"/
rm "$R2/axes.csv" "$R2/sdpa.csv" "$R2/extra.csv"
render "$R2" --date 2026-12-01 -o "$TMP/d.md"
ok "missing CSVs drop their sections" bash -c "! grep -qE '^## (Reductions over axes|Attention beside)' '$TMP/d.md' && ! grep -q 'not rendered' '$TMP/d.md'"
ok "the other sections stay, --date names the date, no device log: the CSVs' device" \
  has 'Device NVIDIA H200 · commit not given · 2026-12-01 · `tests/gpu/run` · `scratch.csv`.' d.md

# --keep: the earlier table's sections (and summary rows) of the families this run lacks stay,
# with their own device, commit and date lines
render "$R2" --date 2026-12-01 --keep "$TMP/a.md" -o "$TMP/k.md"
ok "--keep keeps the missing families' sections from the earlier table" \
  bash -c "grep -q '^## Reductions over axes' '$TMP/k.md' && grep -q '^## Attention beside' '$TMP/k.md' && grep -qF 'Device NVIDIA H200 · commit \`abc1234\` · 2026-11-30' '$TMP/k.md'"
ok "... their summary rows and a line naming them" \
  bash -c "grep -q '^| Reductions over axes |' '$TMP/k.md' && grep -q '^Kept from the previous' '$TMP/k.md'"

# a known CSV that lacks a column the script reads is an error, not a silent table
sed -i '1s/vs_peer/vs_cublas/' "$R2/bench_gemm.csv"
render "$R2" -o "$TMP/e.md"; rc=$?
ok "a known CSV without a column it reads fails, naming the column" \
  bash -c "[ $rc != 0 ] && grep -q 'lacks the columns vs_peer' '$TMP/err' && [ ! -e '$TMP/e.md' ]"
done_testing
