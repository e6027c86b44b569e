#!/usr/bin/env bash
# The cache under faults: 64 staggered builds into one cache; hundreds of builds killed
# with SIGKILL at random points (no torn entry is read, nothing published is lost); the
# running size and its collection; a full disk and a read-only cache (the build goes on
# without storing, with one warning); stale temp, lock and size files of dead processes.
. "$(dirname "$0")/lib.sh"
[ -f /usr/local/cuda/lib64/libnvrtc.so.13 ] || ldconfig -p | grep -q libnvrtc || skip_all "NVRTC not installed"
plan 32
SPECS="specs/bias_gelu.lua specs/swiglu.lua specs/scale_residual_cast.lua"
SM="--sm 80"
export KILN_CACHE_DIR=$TMP/shared
mounts=()
cleanup() { for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
size_file() { od -An -t u8 -j 8 -N 8 "$1/v1/size" 2>/dev/null | tr -d ' '; }
stat_bytes() { KILN_CACHE_DIR=$1 "$KILN" cache stat | sed -n 's/^bytes: //p'; }
sums() { (cd "$1" && find . -name '*.kc' -print0 | xargs -0 -r md5sum | LC_ALL=C sort); }

# 1. 64 processes, staggered, two or three overlapping specs each, one cache.
pids=()
for i in $(seq 1 64); do
  set -- $SPECS
  case $((i % 3)) in 0) s="$1 $2" ;; 1) s="$2 $3" ;; *) s="$3 $1 $2" ;; esac
  (sleep "0.0$((RANDOM % 90))"; exec "$KILN" build $s $SM -j 1 -o "$TMP/c$i.kpack") >"$TMP/c$i.out" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
ok "64 staggered builds of overlapping specs into one cache all succeed ($failed failed)" test $failed = 0
run_kiln cache verify; expect_rc 0 "the shared cache verifies"; expect_out " 0 bad" "no bad entry"
expect_out "^[1-9][0-9]* entries checked" "... counting the entries it checked"
ok "the running size matches the entries ($(size_file "$KILN_CACHE_DIR") = $(stat_bytes "$KILN_CACHE_DIR"))" \
  test "$(size_file "$KILN_CACHE_DIR")" = "$(stat_bytes "$KILN_CACHE_DIR")"

# 2. Kill storm: builds of new kernels (a new H each) killed after 1-150 ms, 6 at a time.
sums "$KILN_CACHE_DIR" >"$TMP/before.sums"
before=$(wc -l <"$TMP/before.sums")
kills=0 builds=0 other=0
exec 4>&2 2>/dev/null   # bash's "Killed" job notes
for round in $(seq 0 149); do
  pids=()
  for k in 0 1 2 3 4 5; do
    i=$((round * 6 + k))
    timeout -s KILL "0.$(printf %03d $((RANDOM % 150 + 1)))" "$KILN" build specs/bias_gelu.lua \
      --set H=$((1024 + 64 * (i % 240))) $SM -j 1 -o "$TMP/storm.kpack.$k" >/dev/null 2>>"$TMP/storm.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    rc=0; wait "$p" || rc=$?
    case $rc in 0) builds=$((builds + 1)) ;; 124 | 137) kills=$((kills + 1)) ;; *) other=$((other + 1)); echo "# storm build exit $rc" ;; esac
  done
done
exec 2>&4 4>&-
grep -v "^kiln: warning" "$TMP/storm.err" | sort | uniq -c | head -5 | sed 's/^/# /'
echo "# kill storm: $kills killed, $builds finished, $other failed otherwise"
ok "a hundred builds or more killed mid-way ($kills), none failed otherwise ($other)" test "$kills" -ge 100 -a "$other" = 0
bad_seen=$(grep -c "is bad" "$TMP/storm.err")
sums "$KILN_CACHE_DIR" >"$TMP/after.sums"
lost=$(LC_ALL=C comm -23 "$TMP/before.sums" "$TMP/after.sums" | wc -l)
echo "# entries before the storm: $before, lost or changed: $lost; bad entries met by builds: $bad_seen"
ok "nothing published before the storm is lost or changed ($lost of $before)" test "$lost" = 0
run_kiln cache verify; expect_rc 0 "after the storm the cache verifies"; expect_out " 0 bad" "no torn entry"
temps=$(find "$KILN_CACHE_DIR" -name '.tmp.*' | wc -l)
tracked=$(size_file "$KILN_CACHE_DIR") real=$(stat_bytes "$KILN_CACHE_DIR")
echo "# $temps temp files of killed writers; running size $tracked, entries $real bytes"
ok "the running size never undercounts after kills ($tracked >= $real)" test "$tracked" -ge "$real"
# every kernel the storm cached, read back into a pack, equals one compiled afresh
torn=0 checked=0
for h in 1024 1088 2048 3008 4032 8128 9216 12288 16256; do
  KILN_CACHE_DIR=$KILN_CACHE_DIR "$KILN" build specs/bias_gelu.lua --set H=$h $SM -o "$TMP/a.kpack" >/dev/null 2>&1 &&
  KILN_CACHE_DIR=$TMP/fresh "$KILN" build specs/bias_gelu.lua --set H=$h $SM -o "$TMP/b.kpack" >/dev/null 2>&1 || torn=$((torn + 1))
  cmp -s "$TMP/a.kpack" "$TMP/b.kpack" || torn=$((torn + 1))
  checked=$((checked + 1))
done
echo "# torn entries read into a pack: $torn of $checked compared"
ok "packs built from the stormed cache equal fresh ones ($torn differ of $checked)" test $torn = 0
run_kiln build $SPECS $SM -o "$TMP/final.kpack"
expect_rc 0 "a build after the storm succeeds"; expect_out ": 0 compiled" "and finds every pre-storm kernel cached"
touch -d '-2 hours' "$KILN_CACHE_DIR"/v1/*/.tmp.* 2>/dev/null   # pids wrap: age, not pid, decides here
run_kiln cache verify
left=$(find "$KILN_CACHE_DIR" -name '.tmp.*' | wc -l)
ok "verify removes the temp files of killed writers ($temps -> $left)" test "$left" = 0

# 2b. Kills under a bound: writers collect (evict) while others are killed mid-write.
bounded=$TMP/bounded kills2=0
exec 4>&2 2>/dev/null
for round in $(seq 0 39); do
  pids=()
  for k in 0 1 2 3 4 5; do
    KILN_CACHE_DIR=$bounded KILN_CACHE_MAXSIZE=100K timeout -s KILL "0.$(printf %03d $((RANDOM % 150 + 1)))" \
      "$KILN" build specs/bias_gelu.lua --set H=$((20480 + 64 * (round * 6 + k))) $SM -j 1 >/dev/null 2>>"$TMP/bounded.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do rc=0; wait "$p" || rc=$?; [ $rc = 0 ] || kills2=$((kills2 + 1)); done
done
exec 2>&4 4>&-
echo "# bounded storm: $kills2 of 240 builds killed"
KILN_CACHE_DIR=$bounded KILN_CACHE_MAXSIZE=100K run_kiln build specs/bias_gelu.lua --set H=640 $SM
expect_rc 0 "after kills under a 100K bound a build succeeds"
KILN_CACHE_DIR=$bounded run_kiln cache verify; expect_out " 0 bad" "and the bounded cache verifies"
b=$(stat_bytes "$bounded")
ok "the bound holds ($b <= 102400 bytes)" test "$b" -le 102400
ok "its running size does not undercount ($(size_file "$bounded") >= $b)" test "$(size_file "$bounded")" -ge "$b"

# 3. The bound: a put over it collects down to 90%, and recounts exactly.
total=$(stat_bytes "$KILN_CACHE_DIR")
cap=$((total / 2))
KILN_CACHE_MAXSIZE=$cap run_kiln build specs/bias_gelu.lua --set H=640 $SM
expect_rc 0 "a build over the bound succeeds"
now=$(stat_bytes "$KILN_CACHE_DIR")
ok "it collects to at most 90% of the bound ($total -> $now bytes, bound $cap)" test "$now" -le $((cap - cap / 10))
ok "and the running size is exact after a collection ($(size_file "$KILN_CACHE_DIR") = $now)" \
  test "$(size_file "$KILN_CACHE_DIR")" = "$now"

# 4. Stale files of dead processes: temp files, lock files, a corrupt size file.
export KILN_CACHE_DIR=$TMP/stale
run_kiln build $SPECS $SM
for d in "$KILN_CACHE_DIR"/v1/*/; do
  k=$(basename "$(ls "$d"*.kc | head -1)" .kc)
  echo junk >"$d.tmp.$k.999999.AbCdEf" && touch -d '-5 minutes' "$d.tmp.$k.999999.AbCdEf"
  echo junk >"$d.tmp.$k.AbCdEf" && touch -d '-2 hours' "$d.tmp.$k.AbCdEf"
  echo junk >"$d.tmp.$k.$$.AbCdEf"   # a live writer's: kept
  echo 999999 >"$d$k.lock" && touch -d '-2 hours' "$d$k.lock"
done
printf 'KILNSZ01garbage-garbage-' >"$KILN_CACHE_DIR/v1/size"
rm -f "$KILN_CACHE_DIR"/v1/*/*.kc
run_kiln build $SPECS $SM
expect_rc 0 "a build among stale temp, lock and size files of dead processes succeeds (no hang)"
ok "a corrupt size file is rebuilt ($(size_file "$KILN_CACHE_DIR") = $(stat_bytes "$KILN_CACHE_DIR"))" \
  test "$(size_file "$KILN_CACHE_DIR")" = "$(stat_bytes "$KILN_CACHE_DIR")"
run_kiln cache verify
ok "verify removes dead writers' temp files and keeps a live one's" \
  test "$(find "$KILN_CACHE_DIR" -name '.tmp.*' | wc -l)" = "$(ls -d "$KILN_CACHE_DIR"/v1/*/ | wc -l)"

# 5. A full disk: a tiny tmpfs, filled up.
full=$TMP/full
mkdir -p "$full"
if mount -t tmpfs -o size=64k tmpfs "$full" 2>/dev/null; then
  mounts+=("$full")
  dd if=/dev/zero of="$full/filler" bs=4k count=64 2>/dev/null
  KILN_CACHE_DIR=$full run_kiln build $SPECS $SM -o "$TMP/full.kpack"
  expect_rc 0 "a build into a full cache succeeds"
  ok "with one clear warning ($(grep -c warning "$ERRF") line)" grep -Eq "^kiln: warning: cache .* cannot be written \(.*No space left on device\)" "$ERRF"
  ok "nothing torn remains on the full disk" test "$(find "$full" -name '*.kc' -o -name '.tmp.*' | wc -l)" = 0
  ok "the pack equals one built with a working cache" cmp -s "$TMP/full.kpack" "$TMP/final.kpack"
else
  for n in 1 2 3 4; do pass "# SKIP mounting a tmpfs failed (not root?)"; done
fi

# 6. A read-only cache: chmod means nothing to root, so a read-only bind mount.
ro=$TMP/ro
mkdir -p "$ro"
chmod -w "$TMP/shared" "$TMP/shared/v1"   # as root this alone changes nothing
if mount --bind "$TMP/shared" "$ro" 2>/dev/null && mounts+=("$ro") && mount -o remount,ro,bind "$ro" 2>/dev/null; then
  KILN_CACHE_DIR=$ro run_kiln build $SPECS $SM
  expect_rc 0 "a build from a read-only cache succeeds"; expect_out ": 0 compiled" "from the cache"
  KILN_CACHE_DIR=$ro run_kiln build specs/bias_gelu.lua --set H=704 $SM
  expect_rc 0 "a build that misses in a read-only cache compiles without storing"
  ok "with one clear warning" grep -Eq "^kiln: warning: cache .* cannot be written \(.*Read-only file system\)" "$ERRF"
else
  for n in 1 2 3 4; do pass "# SKIP a read-only bind mount failed (not root?)"; done
fi
chmod +w "$TMP/shared" "$TMP/shared/v1"
done_testing
