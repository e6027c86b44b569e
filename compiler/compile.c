/* kiln compiler: compile_cached for a batch of kernels (cache lookup, parallel NVRTC). */
#include "compile.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvrtc.h"

int kiln_jit_policy_from_env(kiln_jit_policy *p, kiln_err *e) {
  const char *v = getenv("KILN_JIT");
  *p = KILN_JIT_ON;
  if (!v || !*v || strcmp(v, "on") == 0) return 0;
  if (strcmp(v, "off") == 0) {
    *p = KILN_JIT_OFF;
    return 0;
  }
  if (strcmp(v, "strict") == 0) {
    *p = KILN_JIT_STRICT;
    return 0;
  }
  return kiln_err_set(e, "E_USAGE", "KILN_JIT must be on, off or strict (got '%s')", v);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static const char *job_name(const kiln_compile_job *j) { return j->name ? j->name : j->symbol; }

static kiln_cache_keyparts job_keyparts(const kiln_compile_job *j, const char *nvrtc_version) {
  kiln_cache_keyparts kp = {KILN_VERSION, nvrtc_version, j->arch, j->symbol, j->source,
                            j->opts, j->nopts};
  return kp;
}

static void job_fail(kiln_compile_job *j, const kiln_err *why) {
  j->failed = 1;
  j->err = *why;
  free(j->cubin);
  j->cubin = NULL;
  j->size = 0;
}

int kiln_compile_nvrtc_version(char *version, size_t n, int may_load, kiln_err *e) {
  char path[PATH_MAX];
  kiln_err perr;
  int located = kiln_nvrtc_probe(path, sizeof path, version, n, &perr) == 0;
  if (version[0]) return 0;
  if (!may_load)
    return kiln_err_set(e, "E_CACHE_MISS", "%s, so no cache key can be computed without "
                        "loading it", located ? "NVRTC's version cannot be read off the disk"
                        : "NVRTC was not found on disk");
  kiln_nvrtc *nv = NULL;
  if (kiln_nvrtc_open(&nv, e) != 0) return -1;
  int major, minor;
  kiln_nvrtc_version(nv, &major, &minor);
  snprintf(version, n, "%d.%d", major, minor);
  kiln_nvrtc_close(nv);
  return 0;
}

static kiln_compile_progress_fn progress_fn;
static void *progress_ctx;

void kiln_compile_set_progress(kiln_compile_progress_fn fn, void *ctx) {
  progress_fn = fn;
  progress_ctx = ctx;
}

/* The work shared by the compile threads. */
typedef struct {
  kiln_cache *cache;
  kiln_nvrtc *nv;
  char nvrtc_version[32]; /* as loaded: the version the stored keys carry */
  kiln_compile_job *jobs;
  int *todo, ntodo, next, done;
  pthread_mutex_t mu;
} batch;

/* Under the key's lock: look again (another process may have compiled it meanwhile),
 * else compile and store. */
static void compile_one(batch *b, kiln_compile_job *j) {
  kiln_cache_keyparts kp = job_keyparts(j, b->nvrtc_version);
  kiln_err err;
  kiln_err_clear(&err);
  kiln_cache_key(&kp, j->key);
  int fd = -1;
  if (kiln_cache_lock(b->cache, j->key, &fd, &err) != 0) {
    job_fail(j, &err);
    return;
  }
  int hit = kiln_cache_get(b->cache, j->key, &j->cubin, &j->size, &err);
  if (hit < 0) {
    job_fail(j, &err);
  } else if (hit) {
    j->cache_hit = 1;
  } else {
    double t0 = now_ms();
    int rc = kiln_nvrtc_compile(b->nv, j->source, job_name(j), j->arch, j->opts, j->nopts,
                                &j->cubin, &j->size, NULL, &err);
    j->compile_ms = now_ms() - t0;
    if (rc != 0 || kiln_cache_put(b->cache, j->key, &kp, j->cubin, j->size, &err) != 0)
      job_fail(j, &err);
  }
  kiln_cache_unlock(fd);
}

static void *compile_worker(void *arg) {
  batch *b = arg;
  for (;;) {
    pthread_mutex_lock(&b->mu);
    int i = b->next < b->ntodo ? b->todo[b->next++] : -1;
    pthread_mutex_unlock(&b->mu);
    if (i < 0) return NULL;
    compile_one(b, &b->jobs[i]);
    if (progress_fn) {
      pthread_mutex_lock(&b->mu);
      progress_fn(progress_ctx, ++b->done, b->ntodo, &b->jobs[i]);
      pthread_mutex_unlock(&b->mu);
    }
  }
}

static void compile_misses(batch *b, int threads) {
  if (threads <= 0) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    threads = ncpu > 0 ? (int)ncpu : 1;
  }
  if (threads > b->ntodo) threads = b->ntodo;
  pthread_t *tids = threads > 1 ? calloc((size_t)threads - 1, sizeof *tids) : NULL;
  int started = 0;
  for (int t = 0; tids && t < threads - 1; t++) {
    if (pthread_create(&tids[t], NULL, compile_worker, b) != 0) break; /* fewer threads */
    started++;
  }
  compile_worker(b); /* this thread works too */
  for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
  free(tids);
}

/* Fails every job still in todo with err. */
static void fail_todo(kiln_compile_job *jobs, const int *todo, int ntodo, const kiln_err *err) {
  for (int i = 0; i < ntodo; i++) job_fail(&jobs[todo[i]], err);
}

int kiln_compile_jobs(kiln_cache *c, kiln_compile_job *jobs, int njobs, kiln_jit_policy policy,
                      int threads, kiln_err *e) {
  if (njobs <= 0) return 0;
  int *todo = malloc((size_t)njobs * sizeof *todo);
  if (!todo) return kiln_err_set(e, "E_CACHE", "out of memory compiling %d kernels", njobs);
  int ntodo = 0;
  for (int i = 0; i < njobs; i++) {
    kiln_compile_job *j = &jobs[i];
    j->cubin = NULL;
    j->size = 0;
    j->cache_hit = j->failed = 0;
    j->compile_ms = 0;
    j->key[0] = '\0';
    kiln_err_clear(&j->err);
    if (!j->symbol || !j->source || !kiln_nvrtc_arch_valid(j->arch) || j->nopts < 0 ||
        (j->nopts > 0 && !j->opts)) {
      kiln_err bad;
      kiln_err_set(&bad, "E_USAGE", "compile job %d (%s): needs a symbol, a source, an arch "
                   "sm_NN or sm_NNa (got '%s') and an option list", i,
                   j->name ? j->name : j->symbol ? j->symbol : "?", j->arch ? j->arch : "");
      job_fail(j, &bad);
    } else {
      todo[ntodo++] = i;
    }
  }

  kiln_err err;
  char probed[32] = "";
  if (ntodo && kiln_compile_nvrtc_version(probed, sizeof probed, policy != KILN_JIT_OFF, &err) != 0) {
    if (policy == KILN_JIT_OFF) kiln_err_wrap(&err, "JIT is off (KILN_JIT=off)");
    fail_todo(jobs, todo, ntodo, &err);
    ntodo = 0;
  }

  /* Lookups; the misses stay in todo. */
  int nmiss = 0;
  for (int t = 0; t < ntodo; t++) {
    kiln_compile_job *j = &jobs[todo[t]];
    kiln_cache_keyparts kp = job_keyparts(j, probed);
    kiln_cache_key(&kp, j->key);
    int hit = kiln_cache_get(c, j->key, &j->cubin, &j->size, &j->err);
    if (hit < 0) {
      j->failed = 1;
    } else if (hit) {
      j->cache_hit = 1;
    } else if (policy == KILN_JIT_OFF) {
      kiln_err_set(&j->err, "E_CACHE_MISS", "JIT is off (KILN_JIT=off): kernel %s for %s is "
                   "not cached (key %s)", job_name(j), j->arch, j->key);
      j->failed = 1;
    } else if (policy == KILN_JIT_STRICT) {
      char *why = NULL;
      kiln_err werr;
      if (kiln_cache_why(c, &kp, &why, &werr) != 0) why = NULL;
      kiln_err_set(&j->err, "E_CACHE_MISS", "KILN_JIT=strict: kernel %s for %s is not "
                   "cached (key %s): %s", job_name(j), j->arch, j->key, why ? why : werr.msg);
      free(why);
      j->failed = 1;
    } else {
      todo[nmiss++] = todo[t];
    }
  }

  if (nmiss) {
    batch b = {.cache = c, .nv = NULL, .jobs = jobs, .todo = todo, .ntodo = nmiss, .next = 0};
    /* PTX modules for the ptxas executable need no NVRTC: a batch of only those does not load
     * it (tens of ms, the larger part of a small JIT), when the disk told its version */
    int need = !probed[0];
    for (int t = 0; t < nmiss && !need; t++)
      need = kiln_nvrtc_needs_nvrtc(jobs[todo[t]].source, jobs[todo[t]].opts, jobs[todo[t]].nopts);
    snprintf(b.nvrtc_version, sizeof b.nvrtc_version, "%s", probed);
    if (need && kiln_nvrtc_open(&b.nv, &err) != 0) {
      fail_todo(jobs, todo, nmiss, &err);
    } else if (pthread_mutex_init(&b.mu, NULL) != 0) {
      kiln_err_set(&err, "E_NVRTC", "pthread_mutex_init failed");
      fail_todo(jobs, todo, nmiss, &err);
    } else {
      /* Keys follow the NVRTC actually loaded, should the probe have guessed wrong. */
      int major, minor;
      if (b.nv) {
        kiln_nvrtc_version(b.nv, &major, &minor);
        snprintf(b.nvrtc_version, sizeof b.nvrtc_version, "%d.%d", major, minor);
      }
      compile_misses(&b, threads);
      pthread_mutex_destroy(&b.mu);
    }
    kiln_nvrtc_close(b.nv);
  }
  free(todo);

  for (int i = 0; i < njobs; i++) {
    if (!jobs[i].failed) continue;
    if (e) *e = jobs[i].err;
    return -1;
  }
  return 0;
}
