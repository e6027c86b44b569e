#!/usr/bin/env bash
# Persistent grids follow the SM count of the device a pack runs on: the backward norms, a
# column reduction and a GEMM, run as if on other GPUs (KILN_SM_COUNT: an A100's 108 SMs, the
# most the runtime takes, 256, past the finalize's unrolled loads and the GEMM's 160 slots,
# and 7), still match the reference executor, their workspace (poisoned before the run) and
# their finalize kernels' partial-row counts sized for that count. Skips without a device.
. "$(dirname "$0")/../lib.sh"
"$KILN" env 2>/dev/null | grep -q '^gpu_count: [1-9]' || skip_all "no CUDA device"
counts=(108 256 7)
# spec, --set, workspace bytes per SM (0: not checked)
cases=(
  "specs/layernorm_bwd.lua|T=4097|32768"    # H = 4096: 2 x 4096 fp32 a partial row
  "specs/rmsnorm_bwd.lua|T=4097|0"
  "tests/specs/mem/reduce.lua|T=4097|0"
  "specs/gemm.lua|M=4097|0"
)
plan $(( ${#counts[@]} * ${#cases[@]} + ${#counts[@]} + 4 ))
for n in "${counts[@]}"; do
  for c in "${cases[@]}"; do
    IFS='|' read -r spec set per_sm <<<"$c"
    inst=(); [[ $spec == *gemm* ]] && inst=(--instance K=1056,N=1032)
    RC=0; KILN_SM_COUNT=$n timeout 600 "$KILN" run "$spec" --check --set "$set" "${inst[@]}" >"$OUTF" 2>"$ERRF" || RC=$?
    expect_rc 0 "KILN_SM_COUNT=$n: $spec ($set) matches the reference"
    sed 's/^/# /' "$OUTF" | grep -E "workspace|FAIL|mismatch" | head -8
    if [ "$per_sm" != 0 ]; then  # (the H = 4096 instance's; the spec holds others)
      want="workspace: $(( (n * per_sm + 255) / 256 * 256 )) bytes, persistent grids for $n SMs"
      ok "KILN_SM_COUNT=$n: $spec's workspace is a partial row per SM ($want)" grep -q "$want" "$OUTF"
    fi
  done
done
# every backward variant on 7 SMs (at T = 1031 more SMs would not cap their grids)
RC=0; KILN_SM_COUNT=7 timeout 600 "$KILN" run tests/specs/mem/backward.lua --check --set T=1031 >"$OUTF" 2>"$ERRF" || RC=$?
expect_rc 0 "KILN_SM_COUNT=7: tests/specs/mem/backward.lua (T=1031) matches the reference"
# the widest column reduction (32 tiles) on 3 SMs: a grid of one row chunk, fewer than the
# 8 CTAs per 32 SMs round down to (its workspace holds that row)
RC=0; KILN_SM_COUNT=3 timeout 600 "$KILN" run tests/specs/mem/reduce.lua --check --set T=4097 >"$OUTF" 2>"$ERRF" || RC=$?
expect_rc 0 "KILN_SM_COUNT=3: tests/specs/mem/reduce.lua (T=4097) matches the reference"
# the device's own count without the override, and a bad override is refused by name
RC=0; timeout 120 "$KILN" run specs/layernorm_bwd.lua --check --set T=4097 >"$OUTF" 2>"$ERRF" || RC=$?
sms=$("$KILN" env 2>/dev/null | sed -nE 's/^gpu0: .*, ([0-9]+) SMs,.*/\1/p')
expect_out "persistent grids for $sms SMs" "without KILN_SM_COUNT the grids follow the device's $sms SMs"
RC=0; KILN_SM_COUNT=0 timeout 120 "$KILN" run specs/layernorm_bwd.lua --set T=64 >"$OUTF" 2>"$ERRF" || RC=$?
expect_err "KILN_SM_COUNT='0' is not an SM count" "KILN_SM_COUNT=0 is refused by name"
done_testing
