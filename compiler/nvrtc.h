/* kiln compiler: NVRTC, loaded with dlopen (never linked), compiling CUDA source to CUBIN.
 *
 * Library search order: $KILN_NVRTC_PATH (a file, or a directory holding libnvrtc.so.13
 * or libnvrtc.so), then libnvrtc.so.13 and libnvrtc.so in $KILN_CUDA_HOME/lib64,
 * $CUDA_HOME/lib64 and /usr/local/cuda/lib64, then the loader's own search for
 * libnvrtc.so.13 and libnvrtc.so.12. */
#ifndef KILN_NVRTC_H
#define KILN_NVRTC_H

#include <stddef.h>

#include "err.h"

typedef struct kiln_nvrtc kiln_nvrtc;

/* Loads NVRTC. Thread-safe (each call returns its own handle). On failure sets E_NVRTC
 * "NVRTC not found (looked in ...)" and returns -1. */
int kiln_nvrtc_open(kiln_nvrtc **out, kiln_err *e);
void kiln_nvrtc_close(kiln_nvrtc *nv);

/* The version nvrtcVersion reports (13, 0). */
void kiln_nvrtc_version(const kiln_nvrtc *nv, int *major, int *minor);
/* The path of the library actually loaded. */
const char *kiln_nvrtc_path(const kiln_nvrtc *nv);
/* The SM numbers this NVRTC can target (75 80 ... 120), up to max of them; returns how
 * many it has (may exceed max), or 0 when the library cannot tell. */
int kiln_nvrtc_supported_archs(const kiln_nvrtc *nv, int *archs, int max);

/* Finds NVRTC on disk without loading it (the cache key needs its version, and a warm
 * cache must not pay for loading a 100 MB library). Returns 0 with the file's path and
 * its "MAJOR.MINOR" version, read from the name of the libnvrtc-builtins.so.MAJOR.MINOR
 * library NVRTC ships beside itself; version is "" when that cannot be told. Returns -1
 * (E_NVRTC) when no candidate file exists. */
int kiln_nvrtc_probe(char *path, size_t pathsz, char *version, size_t versionsz, kiln_err *e);

/* The directory of the NVRTC kiln_nvrtc_probe finds (its toolkit holds ptxas and nvJitLink):
 * 0, or -1 when there is none. */
int kiln_nvrtc_probe_dir(char *dir, size_t n);

/* An entry point of a dlopen'ed library: the function pointer to set (slot), its name, and
 * whether it may be absent (left NULL). */
typedef struct {
  void *slot;
  const char *name;
  int optional;
} kiln_dl_sym;

/* dlopen of one of NVIDIA's libraries (NVRTC, nvJitLink, the PTX compiler, cuDNN), never
 * unmapped: each carries its own C++ runtime, whose static state outlives dlclose. */
void *kiln_dl_open_vendor(const char *path);

/* Sets every slot of syms from lib: 0, or -1 with *missing the first required name lib lacks. */
int kiln_dl_bind(void *lib, const kiln_dl_sym *syms, size_t n, const char **missing);

/* 1 if arch is "sm_NN" or "sm_NNa" (2 or 3 digits), else 0. */
int kiln_nvrtc_arch_valid(const char *arch);

/* Compiles source (program name NAME.cu) to a CUBIN for --gpu-architecture=ARCH plus
 * opts. On success *cubin (malloc'ed, caller frees) and *size are set. log may be NULL;
 * else *log receives the malloc'ed NVRTC log (NULL when empty). On failure: E_NVRTC
 * with the first lines of the log, returns -1. With $KILN_DUMP_DIR set, the source is
 * always written there as NAME.cu, and the log as NAME.log when the compile fails or
 * warns. */
/* A PTX module (kiln_ptxas_is_ptx) compiles by ptxas instead, NAME.ptx; one that asks for the
 * PTX compiler library or the executable (kiln_nvrtc_needs_nvrtc is 0) may come with nv NULL,
 * without loading NVRTC. */
int kiln_nvrtc_compile(kiln_nvrtc *nv, const char *source, const char *name, const char *arch,
                       const char *const *opts, int nopts, void **cubin, size_t *size,
                       char **log, kiln_err *e);

/* 0 when source and opts are a PTX module for the PTX compiler library or the ptxas executable
 * (--compiler=nvptxcompiler/VERSION or ptxas), which compiles without NVRTC loaded; else 1. */
int kiln_nvrtc_needs_nvrtc(const char *source, const char *const *opts, int nopts);

#endif
