/* kiln as a library (libkiln.a): JIT at load time from C. An application hands kiln a spec
 * file, the SMs and dim values; kiln returns a pack (open it with kiln_pack_open_memory of
 * libkilnrt), compiling only what its disk cache lacks. Thread-compatible: each call uses
 * its own Lua state; calls in parallel are safe (the cache is multi-process safe). */
#ifndef KILN_JIT_H
#define KILN_JIT_H

#include <stddef.h>

#include "err.h"

/* Builds every instance of the graphs in spec_path (.lua or graph .json) for archs
 * ("sm_90a", "sm_80", "compute_80", ...), with dims fixed by sets ("H=4096", or a dynamic
 * dim specialized). *pack is malloc'ed (free it once the pack is closed). Returns 0, or -1
 * with e: the spec's typed error (E_SHAPE, E_SYNTAX, ...), E_NVRTC, E_CACHE_MISS under
 * KILN_JIT=strict|off, ... */
int kiln_jit_build(const char *spec_path, const char *const *archs, int narchs, const char *const *sets,
                   int nsets, void **pack, size_t *size, kiln_err *e);

#endif
