#!/usr/bin/env bash
# Regenerates the raw seed inputs of the four harnesses into OUTDIR/{ref,pack,cache,spec}
# (from the repository root, after `ninja` and `ninja fuzz`; `kiln build` needs NVRTC, no
# GPU). The committed corpus is these seeds and what fuzzing found, minimized with
# libFuzzer's -merge=1 (tests/fuzz/README.md):
#   tests/fuzz/seeds.sh /tmp/seeds
#   build/fuzz/fuzz_ref -merge=1 tests/fuzz/corpus/ref /tmp/seeds/ref   # and so on
set -euo pipefail
out=${1:?usage: tests/fuzz/seeds.sh OUTDIR}
mkdir -p "$out"/{ref,pack,cache,spec,work}
work=$out/work
export KILN_CACHE_DIR=$work/cache

# ref: graph JSON of every spec (small fixed dims) and of every graph the unit tests evaluate
python3 tests/fuzz/tools/graph_seeds.py "$out/ref"
rm -rf "$out/ref/.cache"
gcc -std=c11 -D_GNU_SOURCE -O1 -Icompiler -Itests/unit tests/unit/test_ref.c tests/fuzz/tools/harvest_ref.c \
  build/obj/ref*.o build/obj/numeric.o build/obj/err.o -Wl,--wrap=kiln_ref_eval \
  -Wl,-Bstatic -ljansson -Wl,-Bdynamic -lm -o "$work/harvest_ref"
HARVEST=$out/ref "$work/harvest_ref" >/dev/null

# pack: small packs (one per spec and SM; and several specs and SMs in one), images cut short
for s in specs/bias_gelu.lua tests/specs/gpu/add_fp32.lua specs/softmax.lua specs/rmsnorm.lua specs/layernorm.lua \
         specs/swiglu.lua specs/gemm.lua specs/sdpa_decode.lua; do
  for sm in 80 90a compute_80; do
    build/kiln build "$s" --sm "$sm" -o "$work/p.kpack" >/dev/null
    python3 tests/fuzz/tools/shrink_pack.py "$work/p.kpack" "$out/pack/$(basename "$s" .lua)-$sm.kpack"
  done
done
build/kiln build specs/bias_gelu.lua specs/swiglu.lua --sm 80 --sm 90a --sm compute_80 -o "$work/p.kpack" >/dev/null
python3 tests/fuzz/tools/shrink_pack.py "$work/p.kpack" "$out/pack/multi.kpack"
build/kiln build tests/specs/gpu/add_fp32.lua --sm 80 -o "$out/pack/full-add_fp32-80.kpack" >/dev/null

# cache: one entry per kernel symbol of the builds above, re-keyed, payload cut to 256 bytes
gcc -O1 tests/fuzz/tools/cache_entry.c -o "$work/cache_entry"
for f in $(find "$KILN_CACHE_DIR" -name '*.kc' | sort); do
  "$work/cache_entry" "$f" "$out/cache/$(basename "$f")" 0123456789abcdef0123456789abcdef 256
done

# spec: the specs themselves, the test specs (good and bad) and graph JSON files
cp specs/*.lua "$out/spec/"
for d in tests/specs/*/; do
  for f in "$d"*.lua "$d"*.json; do [ -f "$f" ] && cp "$f" "$out/spec/$(basename "$d")-$(basename "$f")"; done
done
rm -rf "$work"
for h in ref pack cache spec; do echo "$h: $(ls "$out/$h" | wc -l) seeds"; done
