/* kiln compiler: NVIDIA's PTX compiler library in-process (libkilnptx.so, loaded once a process);
 * a PTX module to a CUBIN without a ptxas process. */
#include "ptxas.h"
#include "nvrtc.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Our own declarations of the nvPTXCompiler entry points (the header is not needed to build kiln). */
typedef int pc_result;  /* nvPTXCompileResult; 0 is NVPTXCOMPILE_SUCCESS */
typedef void *pc_handle; /* nvPTXCompilerHandle */
enum { PC_COMPILATION_FAILURE = 3 };

static struct {
  void *lib;
  pc_result (*create)(pc_handle *, size_t, const char *);
  pc_result (*destroy)(pc_handle *);
  pc_result (*compile)(pc_handle, int, const char *const *);
  pc_result (*program_size)(pc_handle, size_t *);
  pc_result (*program)(pc_handle, void *);
  pc_result (*error_log_size)(pc_handle, size_t *);
  pc_result (*error_log)(pc_handle, void *);
  pc_result (*info_log_size)(pc_handle, size_t *);
  pc_result (*info_log)(pc_handle, void *);
  const char *(*version)(void);
  char why[1400]; /* why it did not load */
} pc;

const char *kiln_ptxas_lib_version(void) { return KILN_PTXC_VERSION[0] ? KILN_PTXC_VERSION : NULL; }

/* The directory of the running program, for a library installed beside it. */
static int program_dir(char *dir, size_t n) {
  ssize_t len = readlink("/proc/self/exe", dir, n - 1);
  if (len <= 0) return -1;
  dir[len] = '\0';
  char *slash = strrchr(dir, '/');
  if (!slash) return -1;
  *slash = '\0';
  return 0;
}

int kiln_ptxas_lib_probe(char *path, size_t pathsz) {
  if (pathsz) path[0] = '\0';
  if (!kiln_ptxas_lib_version()) return -1;
  const char *env = getenv("KILN_PTXC_PATH");
  char cand[PATH_MAX + 32], dir[PATH_MAX];
  if (env && *env) {
    if (access(env, R_OK) != 0) return -1; /* named but absent: not silently another one */
    snprintf(path, pathsz, "%s", env);
    return 0;
  }
  /* build/kiln and build/tests/x beside build/libkilnptx.so; PREFIX/bin/kiln and PREFIX/lib */
  const char *rel[] = {"", "/..", "/../lib"};
  if (program_dir(dir, sizeof dir) == 0) {
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
      char real[PATH_MAX];
      snprintf(cand, sizeof cand, "%s%s/libkilnptx.so", dir, rel[i]);
      if (access(cand, R_OK) == 0) {
        snprintf(path, pathsz, "%s", realpath(cand, real) ? real : cand);
        return 0;
      }
    }
  }
  snprintf(cand, sizeof cand, "%s/libkilnptx.so", KILN_LIBDIR);
  if (access(cand, R_OK) != 0) return -1;
  snprintf(path, pathsz, "%s", cand);
  return 0;
}

static void load_once(void) {
  char path[PATH_MAX];
  if (!kiln_ptxas_lib_version()) {
    snprintf(pc.why, sizeof pc.why, "kiln was configured without NVIDIA's PTX compiler library (--ptx-compiler=none)");
    return;
  }
  if (kiln_ptxas_lib_probe(path, sizeof path) != 0) {
    snprintf(pc.why, sizeof pc.why, "libkilnptx.so not found (KILN_PTXC_PATH, beside the program, or in %s)",
             KILN_LIBDIR);
    return;
  }
  pc.lib = kiln_dl_open_vendor(path);
  if (!pc.lib) {
    const char *msg = dlerror();
    snprintf(pc.why, sizeof pc.why, "loading %.600s: %.600s", path, msg ? msg : "dlopen failed");
    return;
  }
  const kiln_dl_sym syms[] = {
      {&pc.create, "nvPTXCompilerCreate", 0},
      {&pc.destroy, "nvPTXCompilerDestroy", 0},
      {&pc.compile, "nvPTXCompilerCompile", 0},
      {&pc.program_size, "nvPTXCompilerGetCompiledProgramSize", 0},
      {&pc.program, "nvPTXCompilerGetCompiledProgram", 0},
      {&pc.error_log_size, "nvPTXCompilerGetErrorLogSize", 0},
      {&pc.error_log, "nvPTXCompilerGetErrorLog", 0},
      {&pc.info_log_size, "nvPTXCompilerGetInfoLogSize", 0},
      {&pc.info_log, "nvPTXCompilerGetInfoLog", 0},
      {&pc.version, "kiln_ptxc_version", 0},
  };
  const char *missing = NULL;
  if (kiln_dl_bind(pc.lib, syms, sizeof syms / sizeof syms[0], &missing) != 0)
    snprintf(pc.why, sizeof pc.why, "%.900s lacks %s (built with --ptx-compiler=none?)", path, missing);
  const char *have = pc.why[0] ? NULL : pc.version();
  /* the version is in the modules' cache keys: another library would compile under a wrong key */
  if (!pc.why[0] && (!have || strcmp(have, KILN_PTXC_VERSION) != 0))
    snprintf(pc.why, sizeof pc.why, "%.900s holds PTX compiler %.40s, kiln was built for %s: rebuild or reinstall kiln",
             path, have ? have : "(none)", KILN_PTXC_VERSION);
  if (pc.why[0]) {
    dlclose(pc.lib);
    pc.lib = NULL;
  }
}

int kiln_ptxas_lib_compile(const char *ptx, const char *name, const char *arch, int opt_level, void **cubin,
                           size_t *size, char **log, kiln_err *e) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  *cubin = NULL;
  *size = 0;
  if (log) *log = NULL;
  pthread_once(&once, load_once);
  if (!pc.lib)
    return kiln_err_set(e, "E_NVRTC", "%s: NVIDIA's PTX compiler library: %s (KILN_PTXAS=exe compiles by the "
                        "toolkit's ptxas)", name, pc.why);
  char archopt[64], optopt[32];
  snprintf(archopt, sizeof archopt, "--gpu-name=%s", arch);
  const char *level = kiln_ptxas_level_option(optopt, sizeof optopt, "-O", opt_level);
  const char *opts[] = {archopt, level};
  pc_handle h = NULL;
  pc_result rc = pc.create(&h, strlen(ptx), ptx);
  if (rc != 0) return kiln_err_set(e, "E_NVRTC", "%s: nvPTXCompilerCreate failed (%d)", name, rc);
  char *text = NULL;
  int status = 0;
  rc = pc.compile(h, level ? 2 : 1, opts);
  if (rc != 0) {
    text = kiln_ptxas_fetch(h, pc.error_log_size, pc.error_log, NULL);
    status = kiln_err_set(e, "E_NVRTC", "ptxas (PTX compiler library %s) failed to compile %s for %s (%s %d)%s%.1800s",
                          KILN_PTXC_VERSION, name, arch, rc == PC_COMPILATION_FAILURE ? "compilation failure," : "error",
                          rc, text ? ":\n" : "", text ? text : "");
  } else {
    text = kiln_ptxas_fetch(h, pc.info_log_size, pc.info_log, NULL);
    if (!(*cubin = kiln_ptxas_fetch(h, pc.program_size, pc.program, size)))
      status = kiln_err_set(e, "E_NVRTC", "%s: no CUBIN from the PTX compiler library (or out of memory)", name);
  }
  pc.destroy(&h);
  if (log) *log = text;
  else free(text);
  return status;
}
