/* Unit tests for compiler/nvrtc.c and compiler/compile.c: CUBINs for each SM, errors
 * with logs, dumps, parallel compile_cached with hits and misses, JIT policies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compile.h"
#include "nvrtc.h"
#include "ptxas.h"
#include "scratch_dir.h"
#include "tap.h"

static char root[256];

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* An ELF file for the CUDA machine (EM_CUDA = 190). */
static int is_cuda_elf(const void *p, size_t n) {
  const unsigned char *b = p;
  return p && n > 20 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F' &&
         (b[18] | b[19] << 8) == 190;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 16);
  if (buf && fread(buf, 1, (1 << 16) - 1, f) == 0 && ferror(f)) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  return buf;
}

static const char *EMPTY = "extern \"C\" __global__ void kiln_empty() {}\n";
static const char *BROKEN = "extern \"C\" __global__ void kiln_broken() { int x = ; }\n";

static void test_direct(kiln_nvrtc *nv) {
  kiln_err e;
  void *cubin = NULL, *again = NULL;
  size_t size = 0, size2 = 0;
  const char *archs[] = {"sm_80", "sm_90a", "sm_100a"};
  for (int i = 0; i < 3; i++) {
    double t0 = now_ms();
    int rc = kiln_nvrtc_compile(nv, EMPTY, "kiln_empty", archs[i], NULL, 0, &cubin, &size, NULL, &e);
    double ms = now_ms() - t0;
    if (i == 0) DIAG("cold compile of an empty kernel (sm_80): %.1f ms", ms);
    OK(rc == 0 && is_cuda_elf(cubin, size), "%s: a CUDA ELF cubin, %zu bytes, %.1f ms%s%s",
       archs[i], size, ms, rc ? " — " : "", rc ? e.msg : "");
    if (i == 2) {
      int rc2 = kiln_nvrtc_compile(nv, EMPTY, "kiln_empty", archs[i], NULL, 0, &again, &size2,
                                   NULL, &e);
      OK(rc2 == 0 && size2 == size && !memcmp(cubin, again, size), "output is deterministic");
      free(again);
    }
    free(cubin);
  }

  /* a compute_NN target gives PTX text (the runtime's JIT fallback) */
  int prc = kiln_nvrtc_compile(nv, EMPTY, "kiln_empty", "compute_80", NULL, 0, &cubin, &size, NULL, &e);
  OK(prc == 0 && size > 0 && ((char *)cubin)[size - 1] == '\0' && strstr(cubin, ".entry kiln_empty") &&
         strstr(cubin, ".target sm_80"),
     "compute_80: NUL-terminated PTX with the kernel's entry");
  free(cubin);
  cubin = NULL;

  char *log = NULL;
  OK(kiln_nvrtc_compile(nv, EMPTY, "x", "sm_9", NULL, 0, &cubin, &size, &log, &e) == -1 &&
         !strcmp(e.code, "E_NVRTC") && strstr(e.msg, "sm_9") && !cubin,
     "bad arch is E_NVRTC");
  const char *opts[] = {"--std=c++17"};
  int rc = kiln_nvrtc_compile(nv, BROKEN, "kiln_broken", "sm_90a", opts, 1, &cubin, &size, &log, &e);
  OK(rc == -1 && !strcmp(e.code, "E_NVRTC") && !cubin && log && strstr(log, "error") &&
         strstr(e.msg, "kiln_broken.cu") && strstr(e.msg, "expected an expression"),
     "syntax error: E_NVRTC with the log");
  for (char *line = strtok(e.msg, "\n"); line; line = strtok(NULL, "\n")) DIAG("%s", line);
  free(log);
}

static void test_dump(kiln_nvrtc *nv) {
  kiln_err e;
  char dir[300], path[400];
  snprintf(dir, sizeof dir, "%s/dump/sub", root);
  setenv("KILN_DUMP_DIR", dir, 1);
  void *cubin = NULL;
  size_t size;
  int rc = kiln_nvrtc_compile(nv, EMPTY, "dump_ok", "sm_80", NULL, 0, &cubin, &size, NULL, &e);
  free(cubin);
  snprintf(path, sizeof path, "%s/dump_ok.cu", dir);
  char *text = read_text(path);
  OK(rc == 0 && text && !strcmp(text, EMPTY), "KILN_DUMP_DIR keeps the source of a good compile");
  free(text);
  rc = kiln_nvrtc_compile(nv, BROKEN, "dump/bad name", "sm_80", NULL, 0, &cubin, &size, NULL, &e);
  snprintf(path, sizeof path, "%s/dump_bad_name.cu", dir);
  text = read_text(path);
  snprintf(path, sizeof path, "%s/dump_bad_name.log", dir);
  char *log = read_text(path);
  OK(rc == -1 && text && !strcmp(text, BROKEN) && log && strstr(log, "error") &&
         strstr(e.msg, "kept in"),
     "a failed compile keeps source and log (name made safe)");
  free(text);
  free(log);
  unsetenv("KILN_DUMP_DIR");
}

static const char *PTX_EMPTY = "// kiln: a PTX module\n.version 8.0\n.target sm_90a\n.address_size 64\n"
                                ".visible .entry kiln_ptx_empty()\n.maxntid 32, 1, 1\n{\nret;\n}\n";
static const char *PTX_BROKEN = ".version 8.0\n.target sm_90a\n.address_size 64\n"
                                 ".visible .entry kiln_ptx_broken()\n{\nadd.f32 %kr1, 1;\nret;\n}\n";

/* PTX modules (kiln.ptxmodule) go to ptxas through nvJitLink: a cubin, or the log and the kept
 * source. */
static void test_ptx_module(kiln_nvrtc *nv) {
  kiln_err e;
  OK(kiln_ptxas_is_ptx(PTX_EMPTY) && kiln_ptxas_is_ptx("\n  .version 9.0\n") && !kiln_ptxas_is_ptx(EMPTY) &&
         !kiln_ptxas_is_ptx("// .version in a comment\nint x;\n") && !kiln_ptxas_is_ptx(""),
     "a PTX module is told from CUDA by its .version line");
  void *cubin = NULL;
  size_t size = 0;
  double t0 = now_ms();
  int rc = kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", NULL, 0, &cubin, &size, NULL, &e);
  OK(rc == 0 && is_cuda_elf(cubin, size), "a PTX module compiles to a CUDA ELF cubin (%.1f ms with nvJitLink's load)%s%s",
     now_ms() - t0, rc ? " — " : "", rc ? e.msg : "");
  free(cubin);
  cubin = NULL;
  const char *nvjitlink_o1[] = {"-O1"};
  rc = kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", nvjitlink_o1, 1, &cubin, &size, NULL, &e);
  OK(rc == 0 && is_cuda_elf(cubin, size), "and at ptxas -O1 through nvJitLink (-Xptxas)%s%s", rc ? " — " : "",
     rc ? e.msg : "");
  free(cubin);
  cubin = NULL;
  char dir[300], path[400];
  snprintf(dir, sizeof dir, "%s/dump_ptx", root);
  setenv("KILN_DUMP_DIR", dir, 1);
  rc = kiln_nvrtc_compile(nv, PTX_BROKEN, "kiln_ptx_broken", "sm_90a", NULL, 0, &cubin, &size, NULL, &e);
  snprintf(path, sizeof path, "%s/kiln_ptx_broken.ptx", dir);
  char *text = read_text(path);
  OK(rc == -1 && !cubin && !strcmp(e.code, "E_NVRTC") && strstr(e.msg, "ptxas") && strstr(e.msg, "kiln_ptx_broken") &&
         strstr(e.msg, "kept in") && text && !strcmp(text, PTX_BROKEN),
     "a bad PTX module: E_NVRTC with ptxas's log, its source kept as .ptx");
  for (char *line = strtok(e.msg, "\n"); line; line = strtok(NULL, "\n")) DIAG("%s", line);
  free(text);
  OK(kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "compute_90a", NULL, 0, &cubin, &size, NULL, &e) == -1 &&
         !strcmp(e.code, "E_NVRTC") && strstr(e.msg, "real SM"),
     "a PTX module for a compute_ target is refused by name");
  const char *bogus[] = {"--compiler=nvcc"};
  OK(kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", bogus, 1, &cubin, &size, NULL, &e) == -1 &&
         !strcmp(e.code, "E_NVRTC") && strstr(e.msg, "--compiler=nvcc"),
     "a PTX module's unknown option is refused by name");
  const char *level4[] = {"-O4"};
  OK(kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", level4, 1, &cubin, &size, NULL, &e) == -1 &&
         !strcmp(e.code, "E_NVRTC") && strstr(e.msg, "'-O4'") && strstr(e.msg, "-O0 ... -O3"),
     "a ptxas level past -O3 is refused by name");

  /* the ptxas executable (--compiler=ptxas), in a child process */
  char exe[4096];
  if (kiln_ptxas_exe_probe(exe, sizeof exe) != 0) {
    for (int i = 0; i < 6; i++) OK(1, "# SKIP no ptxas executable in NVRTC's toolkit");
    unsetenv("KILN_DUMP_DIR");
    return;
  }
  const char *via_exe[] = {"--compiler=ptxas"};
  t0 = now_ms();
  rc = kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", via_exe, 1, &cubin, &size, NULL, &e);
  OK(rc == 0 && is_cuda_elf(cubin, size), "the ptxas executable (%s) compiles a module to a cubin (%.1f ms)%s%s", exe,
     now_ms() - t0, rc ? " — " : "", rc ? e.msg : "");
  free(cubin);
  cubin = NULL;
  char *log = NULL;
  unlink(path);
  rc = kiln_nvrtc_compile(nv, PTX_BROKEN, "kiln_ptx_broken", "sm_90a", via_exe, 1, &cubin, &size, &log, &e);
  text = read_text(path);
  OK(rc == -1 && !cubin && !strcmp(e.code, "E_NVRTC") && strstr(e.msg, "ptxas failed") &&
         strstr(e.msg, "exit status") && strstr(e.msg, "kiln_ptx_broken") && strstr(e.msg, "kept in") && log &&
         strstr(log, "error") && text && !strcmp(text, PTX_BROKEN),
     "a bad module through the executable: E_NVRTC with its exit status and log, the source kept");
  for (char *line = strtok(e.msg, "\n"); line; line = strtok(NULL, "\n")) DIAG("%s", line);
  free(text);
  free(log);
  /* without NVRTC loaded: the executable of the toolkit on disk; nothing else */
  rc = kiln_nvrtc_compile(NULL, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", via_exe, 1, &cubin, &size, NULL, &e);
  OK(rc == 0 && is_cuda_elf(cubin, size) && !kiln_nvrtc_needs_nvrtc(PTX_EMPTY, via_exe, 1) &&
         kiln_nvrtc_needs_nvrtc(PTX_EMPTY, NULL, 0) && kiln_nvrtc_needs_nvrtc(EMPTY, via_exe, 1),
     "a module for the executable compiles without NVRTC loaded, and only such a one needs none");
  free(cubin);
  cubin = NULL;
  OK(kiln_nvrtc_compile(NULL, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", NULL, 0, &cubin, &size, NULL, &e) == -1 &&
         strstr(e.msg, "needs NVRTC loaded") &&
         kiln_nvrtc_compile(NULL, EMPTY, "kiln_empty", "sm_90a", NULL, 0, &cubin, &size, NULL, &e) == -1 &&
         strstr(e.msg, "not loaded") && !cubin,
     "nvJitLink modules and CUDA sources without NVRTC: E_NVRTC");
  /* its files live in a fresh directory under TMPDIR, removed after */
  char tmp[300], saved[300] = "";
  if (getenv("TMPDIR")) snprintf(saved, sizeof saved, "%s", getenv("TMPDIR"));
  snprintf(tmp, sizeof tmp, "%s/ptxas_tmp", root);
  mkdir(tmp, 0700);
  setenv("TMPDIR", tmp, 1);
  rc = kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", via_exe, 1, &cubin, &size, NULL, &e);
  free(cubin);
  cubin = NULL;
  OK(rc == 0 && rmdir(tmp) == 0, "the executable's files go under TMPDIR and are removed");
  setenv("TMPDIR", "/nonexistent/kiln", 1);
  rc = kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", via_exe, 1, &cubin, &size, NULL, &e);
  OK(rc == -1 && !cubin && !strcmp(e.code, "E_NVRTC") && strstr(e.msg, "/nonexistent/kiln"),
     "an unusable TMPDIR is named in the error");
  if (saved[0]) setenv("TMPDIR", saved, 1);
  else unsetenv("TMPDIR");
  unsetenv("KILN_DUMP_DIR");
}

/* kiln's PTX compiler library in-process (--compiler=nvptxcompiler/VERSION) */
static void test_ptx_library(kiln_nvrtc *nv) {
  const char *version = kiln_ptxas_lib_version();
  char lib[4096], opt[128], dir[300], path[400];
  if (!version || kiln_ptxas_lib_probe(lib, sizeof lib) != 0) {
    for (int i = 0; i < 5; i++) OK(1, "# SKIP kiln was configured without its PTX compiler library");
    return;
  }
  snprintf(opt, sizeof opt, "--compiler=nvptxcompiler/%s", version);
  const char *via_lib[] = {opt}, *other[] = {"--compiler=nvptxcompiler/0.0.1"};
  void *cubin = NULL;
  size_t size = 0;
  kiln_err e = {0};
  double t0 = now_ms();
  int rc = kiln_nvrtc_compile(NULL, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", via_lib, 1, &cubin, &size, NULL, &e);
  OK(rc == 0 && is_cuda_elf(cubin, size) && !kiln_nvrtc_needs_nvrtc(PTX_EMPTY, via_lib, 1),
     "the PTX compiler library %s (%s) compiles a module without NVRTC loaded (%.1f ms, its first use)%s%s", version,
     lib, now_ms() - t0, rc ? " — " : "", rc ? e.msg : "");
  free(cubin);
  cubin = NULL;
  snprintf(dir, sizeof dir, "%s/dump_lib", root);
  setenv("KILN_DUMP_DIR", dir, 1);
  char *log = NULL;
  rc = kiln_nvrtc_compile(nv, PTX_BROKEN, "kiln_ptx_broken", "sm_90a", via_lib, 1, &cubin, &size, &log, &e);
  snprintf(path, sizeof path, "%s/kiln_ptx_broken.ptx", dir);
  char *text = read_text(path);
  OK(rc == -1 && !cubin && !strcmp(e.code, "E_NVRTC") && strstr(e.msg, "PTX compiler library") &&
         strstr(e.msg, "kiln_ptx_broken") && strstr(e.msg, "kept in") && log && strstr(log, "error") && text &&
         !strcmp(text, PTX_BROKEN),
     "a bad module through the library: E_NVRTC with ptxas's log, the source kept");
  for (char *line = strtok(e.msg, "\n"); line; line = strtok(NULL, "\n")) DIAG("%s", line);
  free(text);
  free(log);
  unsetenv("KILN_DUMP_DIR");
  rc = kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", other, 1, &cubin, &size, NULL, &e);
  OK(rc == -1 && !cubin && !strcmp(e.code, "E_NVRTC") && strstr(e.msg, "0.0.1") && strstr(e.msg, version),
     "a module for another version of the library is refused, naming both (its key would be wrong)");
  /* the library is loaded once a process; a failed compile leaves it usable */
  double t1 = now_ms();
  rc = kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", via_lib, 1, &cubin, &size, NULL, &e);
  OK(rc == 0 && is_cuda_elf(cubin, size), "and compiles again after a failure (%.1f ms, loaded)%s%s", now_ms() - t1,
     rc ? " — " : "", rc ? e.msg : "");
  free(cubin);
  cubin = NULL;
  const char *at_o1[] = {opt, "-O1"};
  rc = kiln_nvrtc_compile(nv, PTX_EMPTY, "kiln_ptx_empty", "sm_90a", at_o1, 2, &cubin, &size, NULL, &e);
  OK(rc == 0 && is_cuda_elf(cubin, size), "and at ptxas -O1 (the module's second option)%s%s", rc ? " — " : "",
     rc ? e.msg : "");
  free(cubin);
}

#define NJOBS 6

static void make_jobs(kiln_compile_job *jobs, char src[][256], char sym[][32], int changed) {
  static const char *archs[] = {"sm_80", "sm_90a", "sm_100a"};
  static const char *opts[] = {"--std=c++17"};
  memset(jobs, 0, NJOBS * sizeof *jobs);
  for (int i = 0; i < NJOBS; i++) {
    snprintf(sym[i], 32, "kiln_job_%d", i);
    snprintf(src[i], 256,
             "extern \"C\" __global__ void __launch_bounds__(256) kiln_job_%d(float *y) "
             "{ y[threadIdx.x] = %d.0f%s; }\n", i, i, changed ? " + 1.0f" : "");
    jobs[i].name = sym[i];
    jobs[i].symbol = sym[i];
    jobs[i].source = src[i];
    jobs[i].arch = archs[i % 3];
    jobs[i].opts = opts;
    jobs[i].nopts = 1;
  }
}

static void free_jobs(kiln_compile_job *jobs) {
  for (int i = 0; i < NJOBS; i++) free(jobs[i].cubin);
}

static void test_jobs(void) {
  kiln_err e;
  kiln_cache *c = NULL;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/cache", root);
  if (kiln_cache_open(dir, &c, &e) != 0) {
    OK(0, "open cache: %s", e.msg);
    return;
  }
  kiln_compile_job jobs[NJOBS], again[NJOBS];
  char src[NJOBS][256], sym[NJOBS][32];
  kiln_jit_policy policy;

  setenv("KILN_JIT", "strict", 1);
  OK(kiln_jit_policy_from_env(&policy, &e) == 0 && policy == KILN_JIT_STRICT, "KILN_JIT=strict");
  make_jobs(jobs, src, sym, 0);
  OK(kiln_compile_jobs(c, jobs, NJOBS, policy, 2, &e) == -1 && !strcmp(e.code, "E_CACHE_MISS") &&
         strstr(e.msg, "kiln_job_0") && strstr(e.msg, "sm_80") && strstr(e.msg, jobs[0].key) &&
         strstr(e.msg, "no cached entry") && jobs[5].failed && !jobs[5].cubin,
     "strict on an empty cache: E_CACHE_MISS naming kernel, arch, key and why");
  DIAG("%s", e.msg);
  setenv("KILN_JIT", "off", 1);
  OK(kiln_jit_policy_from_env(&policy, &e) == 0 && policy == KILN_JIT_OFF &&
         kiln_compile_jobs(c, jobs, NJOBS, policy, 2, &e) == -1 &&
         !strcmp(e.code, "E_CACHE_MISS") && strstr(e.msg, "JIT is off"),
     "off on an empty cache: E_CACHE_MISS, JIT is off");
  setenv("KILN_JIT", "sometimes", 1);
  OK(kiln_jit_policy_from_env(&policy, &e) == -1 && !strcmp(e.code, "E_USAGE"),
     "a bad KILN_JIT is E_USAGE");
  unsetenv("KILN_JIT");
  OK(kiln_jit_policy_from_env(&policy, &e) == 0 && policy == KILN_JIT_ON, "KILN_JIT defaults to on");

  double t0 = now_ms();
  int rc = kiln_compile_jobs(c, jobs, NJOBS, KILN_JIT_ON, 2, &e);
  double wall = now_ms() - t0, sum = 0;
  int misses = 0, elves = 0;
  for (int i = 0; i < NJOBS; i++) {
    misses += !jobs[i].cache_hit && !jobs[i].failed && jobs[i].compile_ms > 0;
    elves += is_cuda_elf(jobs[i].cubin, jobs[i].size);
    sum += jobs[i].compile_ms;
  }
  OK(rc == 0 && misses == NJOBS && elves == NJOBS, "6 jobs in 2 threads: all compiled (%s)",
     rc ? e.msg : "ok");
  DIAG("6 kernels: %.0f ms wall, %.0f ms of NVRTC", wall, sum);

  make_jobs(again, src, sym, 0);
  t0 = now_ms();
  rc = kiln_compile_jobs(c, again, NJOBS, KILN_JIT_STRICT, 2, &e);
  wall = now_ms() - t0;
  int hits = 0;
  for (int i = 0; i < NJOBS; i++)
    hits += again[i].cache_hit && again[i].compile_ms == 0 && again[i].size == jobs[i].size &&
            !memcmp(again[i].cubin, jobs[i].cubin, jobs[i].size) && !strcmp(again[i].key, jobs[i].key);
  OK(rc == 0 && hits == NJOBS, "second run: all hits, same bytes, even under strict");
  DIAG("6 warm lookups: %.2f ms", wall);
  free_jobs(again);
  free_jobs(jobs);

  make_jobs(jobs, src, sym, 1);
  rc = kiln_compile_jobs(c, jobs, NJOBS, KILN_JIT_STRICT, 2, &e);
  OK(rc == -1 && strstr(e.msg, "differs in: source"), "strict after a source change says why");
  free_jobs(jobs);

  make_jobs(jobs, src, sym, 0);
  jobs[3].source = BROKEN;
  jobs[3].symbol = "kiln_broken";
  rc = kiln_compile_jobs(c, jobs, NJOBS, KILN_JIT_ON, 0, &e);
  OK(rc == -1 && !strcmp(e.code, "E_NVRTC") && jobs[3].failed && !jobs[3].cubin &&
         !jobs[0].failed && jobs[0].cache_hit && !jobs[5].failed,
     "one broken job fails alone with E_NVRTC");
  free_jobs(jobs);
  kiln_cache_stats st;
  OK(kiln_cache_stat(c, &st, &e) == 0 && st.entries == NJOBS &&
         kiln_cache_verify(c, 0, NULL, NULL, &e) == 0,
     "the cache holds the 6 good entries, all valid");
  kiln_cache_close(c);
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/kiln_test_nvrtc.%d", (int)getpid());
  kiln_err e;
  kiln_nvrtc *nv = NULL;
  double t0 = now_ms();
  if (kiln_nvrtc_open(&nv, &e) != 0) {
    printf("1..0 # SKIP %s\n", e.msg);
    return 0;
  }
  double open_ms = now_ms() - t0;
  TAP_PLAN(39);
  int major, minor;
  kiln_nvrtc_version(nv, &major, &minor);
  DIAG("NVRTC %d.%d from %s, loaded in %.1f ms", major, minor, kiln_nvrtc_path(nv), open_ms);
  char path[4096], probed[32], loaded[32];
  snprintf(loaded, sizeof loaded, "%d.%d", major, minor);
  OK(kiln_nvrtc_probe(path, sizeof path, probed, sizeof probed, &e) == 0 && !strcmp(probed, loaded),
     "probe finds NVRTC %s on disk without loading it (%s)", probed, path);
  OK(kiln_nvrtc_arch_valid("sm_80") && kiln_nvrtc_arch_valid("sm_90a") &&
         kiln_nvrtc_arch_valid("sm_100a") && kiln_nvrtc_arch_valid("sm_120") &&
         kiln_nvrtc_arch_valid("compute_90") && kiln_nvrtc_arch_valid("compute_90a") &&
         !kiln_nvrtc_arch_valid("sm_9") && !kiln_nvrtc_arch_valid("compute_9x") &&
         !kiln_nvrtc_arch_valid("sm_90b") && !kiln_nvrtc_arch_valid("sm_1000"),
     "arch validation");
  test_direct(nv);
  test_dump(nv);
  test_ptx_module(nv);
  test_ptx_library(nv);
  kiln_nvrtc_close(nv);
  test_jobs();
  rm_rf(root);
  return TAP_DONE();
}
