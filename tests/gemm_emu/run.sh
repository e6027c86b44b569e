#!/usr/bin/env bash
# Emulates one GEMM kernel on the CPU and checks it against the reference executor:
#   tests/gemm_emu/run.sh SPEC GRAPH ARCH GRID DIM=V... [-- ENV=V...]
# builds the graph's kernel for ARCH (KILN_PLAN=gemm.tile=BN picks an sm_90a tile), turns its source
# (and the plan's init kernel's, when it has one) into C++ (transform.py), compiles it with the
# harness under AddressSanitizer and runs it on GRID persistent CTAs, with the plan's workspace.
# Needs g++ (C++20), python3, jansson and the objects `ninja` built. KILN_EMU_HARNESS=FILE: the
# harness's object, compiled into FILE by the first run that finds none (runs one after another).
set -euo pipefail
spec=$1 graph=$2 arch=$3 grid=$4; shift 4
root=$(cd "$(dirname "$0")/../.." && pwd)
KILN=${KILN:-$root/build/kiln}
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-emu.XXXXXX")
[ -n "${KILN_EMU_KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
dims=() sets=()
for a in "$@"; do
  case $a in M=*|T=*) dims+=("$a") ;; *) sets+=(--set "$a") ;; esac
done
KILN_DUMP_DIR=$work/dump KILN_CACHE_DIR=$work/cache "$KILN" build "$spec" --graph "$graph" "${sets[@]}" --sm "$arch" -o "$work/p.kpack" >/dev/null
"$KILN" check "$spec" --graph "$graph" "${sets[@]}" --json > "$work/graph.json"
cu=$(ls "$work"/dump/*.cu | grep -v '_init_' | head -1)
plan=$(grep -m1 -o 'kiln gemm engine, [a-z_0-9 ]* path' "$cu" || true)
# the dynamic shared memory the plan requests (same rule as engines/gemm.lua)
read -r bn stages <<<"$(sed -n 's/.*constexpr int BM = 128, BN = \([0-9]*\), STAGES = \([0-9]*\).*/\1 \2/p' "$cu" | head -1)"
# grid y: the CTAs of a cluster along M (the mma kernel takes the same grid, without a cluster)
cm=$("$KILN" pack inspect "$work/p.kpack" | awk '/plan gemm:v1:/ && !/:init/ { k = 1; next }
  k && /grid \[/ { sub(/.*grid \[/, ""); sub(/\].*/, ""); n = split($0, f, ", "); print f[n - 1] + 0; exit }')
[ -n "$cm" ] || cm=1
if grep -q kiln_wgmma_tile "$cu"; then smem=$((stages * (128 + bn) * 128 + 16 * stages + 1024)); else smem=$((stages * (128 + bn) * 128)); fi
# the staging buffers of a staged epilogue (E.EPI_BYTES)
if grep -q "constexpr bool EPI = true" "$cu"; then smem=$((smem + 2 * 2 * 64 * 128)); fi
# the epilogue warps' two barriers (E.EWG)
if grep -q "EWG = true;" "$cu"; then smem=$((smem + 16)); fi
# a grouped GEMM's group table (group_bytes in engines/gemm.lua)
if grep -q "constexpr bool GROUPED = true;" "$cu"; then
  groups=$(sed -n 's/.*constexpr int GROUPS = \([0-9]*\);.*/\1/p' "$cu" | head -1)
  smem=$((smem + 16 + 8 * (groups + 1)))
fi
python3 "$root/tests/gemm_emu/transform.py" "$cu" "${KILN_TEMPLATE_PATH:-$root/templates}" "$work/kernel.cc"
srcs=("$work/kernel.cc")
init=$(ls "$work"/dump/*.cu | grep '_init_' | head -1 || true)
if [ -n "$init" ]; then
  python3 "$root/tests/gemm_emu/transform.py" "$init" "${KILN_TEMPLATE_PATH:-$root/templates}" "$work/init.cc" emu_init_entry
  srcs+=("$work/init.cc")
fi
# the plan's workspace (a literal size for gemm plans), rounded up to 256 as the runtime does
ws=$("$KILN" pack inspect "$work/p.kpack" | sed -n 's/^  workspace: \([0-9]*\) (bytes.*/\1/p' | head -1)
wsarg=(); [ -z "$ws" ] || wsarg=("ws=$(( (ws + 255) / 256 * 256 ))")
objs=("$root"/build/obj/ref.o "$root"/build/obj/ref_*.o "$root"/build/obj/numeric.o "$root"/build/obj/err.o)
san=$(sed -n 's/^san = //p' "$root/config.ninja" 2>/dev/null)   # objects built with more sanitizers link with them
cxx=(g++ -std=c++20 -O1 -g -fsanitize=address $san -fno-omit-frame-pointer -w -pthread -I"$root/compiler" -I"$root/tests/gemm_emu")
harness=$root/tests/gemm_emu/harness.cc
if [ -n "${KILN_EMU_HARNESS:-}" ]; then
  [ -s "$KILN_EMU_HARNESS" ] || "${cxx[@]}" -c "$harness" -o "$KILN_EMU_HARNESS"
  harness=$KILN_EMU_HARNESS
fi
"${cxx[@]}" "$harness" "${srcs[@]}" "${objs[@]}" -o "$work/emu" -ljansson -lm
echo "# $graph $arch ($plan, BN $bn, $stages stages, $smem B smem${init:+, init kernel}${ws:+, workspace $ws B}) grid ${grid}x$cm ${dims[*]}"
ASAN_OPTIONS=detect_leaks=0 "$work/emu" "$work/graph.json" "${grid}x$cm" "$smem" "${wsarg[@]}" "${dims[@]}"
