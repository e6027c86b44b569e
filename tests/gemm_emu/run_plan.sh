#!/usr/bin/env bash
# Emulates every kernel of one graph's plan on the CPU, in order, and checks the outputs against
# the reference executor:
#   tests/gemm_emu/run_plan.sh SPEC GRAPH ARCH DIM=V...
# builds the graph (its dims left dynamic: DIM=V are the run's) for ARCH (KILN_PLAN picks another
# candidate), turns each kernel's source into
# C++ (transform.py), its launch into launches.cc (plan.py: grids at the dims given), compiles
# them with the harness under AddressSanitizer and runs them with the plan's workspace (poisoned,
# as every output). For mma.sync / cp.async kernels (the wgmma and TMA models serve the GEMM's
# own run.sh). Needs g++ (C++20), python3, jansson and the objects `ninja` built.
set -euo pipefail
spec=$1 graph=$2 arch=$3; shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
KILN=${KILN:-$root/build/kiln}
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-emu.XXXXXX")
[ -n "${KILN_EMU_KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
KILN_DUMP_DIR=$work/dump KILN_CACHE_DIR=$work/cache "$KILN" build "$spec" --graph "$graph" --sm "$arch" -o "$work/p.kpack" >/dev/null
"$KILN" check "$spec" --graph "$graph" --json > "$work/graph.json"
"$KILN" pack inspect "$work/p.kpack" > "$work/inspect.txt"
mapfile -t out < <(python3 "$root/tests/gemm_emu/plan.py" "$work/inspect.txt" "$graph" "$work/launches.cc" "$@")
read -r -a symbols <<<"${out[0]}"
ws=${out[1]:-}
srcs=("$work/launches.cc")
for i in "${!symbols[@]}"; do
  python3 "$root/tests/gemm_emu/transform.py" "$work/dump/${symbols[$i]}_sm_$arch.cu" "${KILN_TEMPLATE_PATH:-$root/templates}" \
    "$work/k$i.cc" "emu_k$i"
  srcs+=("$work/k$i.cc")
done
objs=("$root"/build/obj/ref.o "$root"/build/obj/ref_*.o "$root"/build/obj/numeric.o "$root"/build/obj/err.o)
san=$(sed -n 's/^san = //p' "$root/config.ninja" 2>/dev/null)
g++ -std=c++20 -O1 -g -fsanitize=address $san -fno-omit-frame-pointer -w -pthread -I"$root/compiler" -I"$root/tests/gemm_emu" \
  "$root/tests/gemm_emu/harness.cc" "${srcs[@]}" "${objs[@]}" -o "$work/emu" -ljansson -lm
echo "# $graph $arch: ${#symbols[@]} kernels${ws:+, workspace ${ws#ws=} B} $*"
ASAN_OPTIONS=detect_leaks=0 "$work/emu" "$work/graph.json" 0 0 ${ws:+"$ws"} "$@"
