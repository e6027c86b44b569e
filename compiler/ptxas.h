/* kiln compiler: nvJitLink through dlopen, compiling a PTX module to a CUBIN with ptxas alone.
 * kiln's kernels whose body is PTX come as whole PTX modules (kiln.ptxmodule), which skip
 * NVRTC's front end and NVVM (about 20 ms a kernel on a slow CPU).
 *
 * The library is looked for beside the NVRTC in use (the same toolkit), then through the
 * loader's own search for libnvJitLink.so.13. */
#ifndef KILN_PTXAS_H
#define KILN_PTXAS_H

#include <stddef.h>

#include "err.h"

typedef struct kiln_ptxas kiln_ptxas;

/* Finds nvJitLink beside the NVRTC on disk (kiln_nvrtc_probe) without loading it: 0 with its
 * path, -1 when there is none (kiln then compiles the CUDA forms through NVRTC). */
int kiln_ptxas_probe(char *path, size_t pathsz);

/* Loads nvJitLink from nvrtc_dir (may be NULL) or the loader's path. On failure: E_NVRTC
 * naming where it looked, -1. */
int kiln_ptxas_open(kiln_ptxas **out, const char *nvrtc_dir, kiln_err *e);
void kiln_ptxas_close(kiln_ptxas *p);

/* 1 when text is a PTX module (its first line that is not a // comment or blank starts
 * with .version), else 0. */
int kiln_ptxas_is_ptx(const char *text);

/* Compiles the PTX module (named NAME in messages) for ARCH (sm_NN[a]) to a CUBIN, malloc'ed
 * into *cubin / *size. On failure: E_NVRTC with the head of ptxas's log, -1; *log (when not
 * NULL) receives the malloc'ed log either way (NULL when empty). */
int kiln_ptxas_compile(kiln_ptxas *p, const char *ptx, const char *name, const char *arch,
                       void **cubin, size_t *size, char **log, kiln_err *e);

#endif
