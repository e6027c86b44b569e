/* kiln compiler: compile_cached, the one way kernels become cubins (cache, then NVRTC). */
#ifndef KILN_COMPILE_H
#define KILN_COMPILE_H

#include <stddef.h>

#include "cache.h"
#include "err.h"

#include "kiln.h" /* KILN_VERSION */

/* $KILN_JIT: on (default) compiles misses; off never loads NVRTC and a miss is
 * E_CACHE_MISS; strict is off plus a diagnosis of each miss (kiln_cache_why). */
typedef enum { KILN_JIT_ON, KILN_JIT_OFF, KILN_JIT_STRICT } kiln_jit_policy;

/* Reads $KILN_JIT (unset or empty = on); anything but on|off|strict is E_USAGE. */
int kiln_jit_policy_from_env(kiln_jit_policy *p, kiln_err *e);

/* The NVRTC version that cache keys carry ("13.0"), read off the disk (kiln_nvrtc_probe)
 * so that a warm cache never loads NVRTC; when the disk cannot tell, NVRTC is loaded to
 * ask it if may_load, else E_CACHE_MISS. E_NVRTC when NVRTC is not found. */
int kiln_compile_nvrtc_version(char *version, size_t n, int may_load, kiln_err *e);

typedef struct {
  /* inputs; name (for dumps and messages) defaults to symbol */
  const char *name, *symbol, *source, *arch;
  const char *const *opts;
  int nopts;
  /* outputs: cubin is malloc'ed (the caller frees it), NULL when the job failed */
  void *cubin;
  size_t size;
  int cache_hit;     /* 1 when the cubin came from the cache */
  double compile_ms; /* NVRTC time for this kernel, 0 on a hit */
  char key[33];      /* the cache key; "" when it could not be computed */
  kiln_err err;      /* this job's failure */
  int failed;
} kiln_compile_job;

/* Looks every job up in c, then compiles the misses in parallel (threads 0 = one per CPU)
 * under each key's lock with a re-check, and stores the results. NVRTC is loaded once,
 * and only when something must be compiled. Returns 0 when every job succeeded, else -1
 * with e describing the first failed job (each job keeps its own err). */
/* Called after each compiled (missed) kernel with how many of the batch's misses are done;
 * NULL turns it off. Calls are serialized. The CLI uses it to show progress of long builds. */
typedef void (*kiln_compile_progress_fn)(void *ctx, int done, int total, const kiln_compile_job *job);
void kiln_compile_set_progress(kiln_compile_progress_fn fn, void *ctx);

int kiln_compile_jobs(kiln_cache *c, kiln_compile_job *jobs, int njobs, kiln_jit_policy policy,
                      int threads, kiln_err *e);

#endif
