/* kiln compiler: ptxas alone, compiling a PTX module to a CUBIN. kiln's kernels whose body is
 * PTX come as whole PTX modules (kiln.ptxmodule), which skip NVRTC's front end and NVVM (a
 * third to a half of a kernel's compile). Three ways in:
 *  - NVIDIA's PTX compiler library (ptxas_lib.c), in-process from libkilnptx.so: ptxas's
 *    whole-program compile of the toolkit's version without a process (the default);
 *  - the toolkit's ptxas executable (ptxas_exe.c), in a child process: the whole-program
 *    compile NVRTC does, so the same SASS as the kernel's CUDA form;
 *  - nvJitLink (ptxas.c) in-process: relocatable code, whose registers ptxas allocates
 *    differently (kiln's own small kernels; KILN_PTXAS=nvjitlink for every module).
 * Both are looked for in the toolkit of the NVRTC in use; nvJitLink also through the
 * loader's own search for libnvJitLink.so.13. */
#ifndef KILN_PTXAS_H
#define KILN_PTXAS_H

#include <stddef.h>

#include "err.h"

typedef struct kiln_ptxas kiln_ptxas;

/* Finds nvJitLink beside the NVRTC on disk (kiln_nvrtc_probe) without loading it: 0 with its
 * path, -1 when there is none (kiln then compiles the CUDA forms through NVRTC). */
int kiln_ptxas_probe(char *path, size_t pathsz);

/* The ptxas executable of the toolkit whose NVRTC is found on disk (kiln_nvrtc_probe; lib/../bin
 * or targets/<triple>/lib/../../../bin), without loading NVRTC: 0 with its real path, -1 when
 * there is none. */
int kiln_ptxas_exe_probe(char *path, size_t pathsz);

/* Compiles the PTX module (named NAME in messages) for ARCH with the ptxas executable EXE, its
 * files in a fresh directory under $TMPDIR (or /tmp), removed after. As kiln_ptxas_compile. */
int kiln_ptxas_exe_compile(const char *exe, const char *ptx, const char *name, const char *arch, int opt_level,
                           void **cubin, size_t *size, char **log, kiln_err *e);

/* The version of NVIDIA's PTX compiler library that kiln was configured with ("13.0.88", in the
 * cache keys of the modules it compiles), or NULL when configured without one. */
const char *kiln_ptxas_lib_version(void);

/* Finds libkilnptx.so without loading it: $KILN_PTXC_PATH, else beside the running program
 * (its directory, .. or ../lib), else KILN_LIBDIR. 0 with its path, -1 when there is none. */
int kiln_ptxas_lib_probe(char *path, size_t pathsz);

/* Compiles as kiln_ptxas_compile with the PTX compiler library, loaded by the first call of a
 * process (E_NVRTC saying why, when it is absent or of another version). Thread-safe. */
int kiln_ptxas_lib_compile(const char *ptx, const char *name, const char *arch, int opt_level, void **cubin,
                           size_t *size, char **log, kiln_err *e);

/* Loads nvJitLink from nvrtc_dir (may be NULL) or the loader's path. On failure: E_NVRTC
 * naming where it looked, -1. */
int kiln_ptxas_open(kiln_ptxas **out, const char *nvrtc_dir, kiln_err *e);
void kiln_ptxas_close(kiln_ptxas *p);

/* What an in-process compiler's handle H holds (a log, or the CUBIN), through its size and copy
 * entry points (nvJitLink's and nvPTXCompiler's have one shape): malloc'ed with a NUL after it,
 * its size in *n (may be NULL); NULL when it is empty (a log of one NUL counts as empty) or on failure. */
char *kiln_ptxas_fetch(void *h, int (*size_fn)(void *, size_t *), int (*copy_fn)(void *, void *), size_t *n);

/* ptxas's optimization level LEVEL as the option PREFIX<LEVEL> ("-O", "-Xptxas=-O") written into
 * buf: buf, or NULL at ptxas's default -O3 (no option: the command line stays NVRTC's). */
const char *kiln_ptxas_level_option(char *buf, size_t n, const char *prefix, int level);

/* 1 when text is a PTX module (its first line that is not a // comment or blank starts
 * with .version), else 0. */
int kiln_ptxas_is_ptx(const char *text);

/* Compiles the PTX module (named NAME in messages) for ARCH (sm_NN[a]) at ptxas's optimization
 * level OPT_LEVEL (0-3; 3 is ptxas's default) to a CUBIN, malloc'ed into *cubin / *size. On
 * failure: E_NVRTC with the head of ptxas's log, -1; *log (when not NULL) receives the malloc'ed
 * log either way (NULL when empty). */
int kiln_ptxas_compile(kiln_ptxas *p, const char *ptx, const char *name, const char *arch, int opt_level,
                       void **cubin, size_t *size, char **log, kiln_err *e);

#endif
