#!/usr/bin/env bash
# Many kiln processes share one cache: 8 builds of the same specs at once all succeed and
# leave a cache that verifies; a truncated or corrupted entry is detected and replaced. The
# specs: the shipped ones of the memory-bound and pointwise engines (114 kernels of tens of ms
# each for the 8 to race on; the GEMM, attention, conv1d and GDN specs build in their own tests).
. "$(dirname "$0")/lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
plan 8
export KILN_CACHE_DIR=$TMP/shared
specs=()
for s in specs/*.lua; do case $s in *gemm* | *sdpa* | *gdn* | *conv1d*) ;; *) specs+=("$s") ;; esac; done
pids=()
for i in 1 2 3 4 5 6 7 8; do
  "$KILN" build "${specs[@]}" --sm 80 --sm 90a -j 1 >"$TMP/p$i.out" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
ok "8 concurrent builds all succeed ($failed failed)" test $failed = 0
run_kiln cache verify; expect_rc 0 "the shared cache verifies"; expect_out " 0 bad" "no bad entries"
entries=$(find "$KILN_CACHE_DIR" -name '*.kc' | sort)
n=$(echo "$entries" | wc -l)
run_kiln build "${specs[@]}" --sm 80 --sm 90a
expect_out ": 0 compiled" "after the race every kernel is cached once ($n entries)"
victim=$(echo "$entries" | head -1)
size=$(stat -c %s "$victim")
truncate -s $((size / 2)) "$victim"
run_kiln build "${specs[@]}" --sm 80 --sm 90a
expect_out ": 1 compiled" "a truncated entry is a miss and is recompiled"
victim2=$(echo "$entries" | tail -1)
printf '\x55' | dd of="$victim2" bs=1 seek=$(( $(stat -c %s "$victim2") - 10 )) conv=notrunc 2>/dev/null
run_kiln cache verify; expect_rc 1 "verify reports a corrupted entry"
run_kiln build "${specs[@]}" --sm 80 --sm 90a
expect_out ": 1 compiled" "the corrupted entry was replaced"
run_kiln cache verify; expect_rc 0 "the repaired cache verifies"
done_testing
