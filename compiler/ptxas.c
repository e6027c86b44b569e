/* kiln compiler: nvJitLink through dlopen; a PTX module to a CUBIN (ptxas in-process). */
#include "ptxas.h"
#include "nvrtc.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Our own declarations of the nvJitLink entry points (no CUDA header, no link dependency). */
typedef int jl_result;  /* nvJitLinkResult; 0 is NVJITLINK_SUCCESS */
typedef void *jl_handle; /* nvJitLinkHandle */
enum { JL_INPUT_PTX = 2 }; /* NVJITLINK_INPUT_PTX */

struct kiln_ptxas {
  void *lib;
  jl_result (*create)(jl_handle *, uint32_t, const char **);
  jl_result (*destroy)(jl_handle *);
  jl_result (*add_data)(jl_handle, int, const void *, size_t, const char *);
  jl_result (*complete)(jl_handle);
  jl_result (*cubin_size)(jl_handle, size_t *);
  jl_result (*cubin)(jl_handle, void *);
  jl_result (*error_log_size)(jl_handle, size_t *);
  jl_result (*error_log)(jl_handle, void *);
  jl_result (*info_log_size)(jl_handle, size_t *);
  jl_result (*info_log)(jl_handle, void *);
};

static int load_symbols(kiln_ptxas *p, const char **missing) {
  const kiln_dl_sym syms[] = {
      {&p->create, "nvJitLinkCreate", 0},
      {&p->destroy, "nvJitLinkDestroy", 0},
      {&p->add_data, "nvJitLinkAddData", 0},
      {&p->complete, "nvJitLinkComplete", 0},
      {&p->cubin_size, "nvJitLinkGetLinkedCubinSize", 0},
      {&p->cubin, "nvJitLinkGetLinkedCubin", 0},
      {&p->error_log_size, "nvJitLinkGetErrorLogSize", 0},
      {&p->error_log, "nvJitLinkGetErrorLog", 0},
      {&p->info_log_size, "nvJitLinkGetInfoLogSize", 0},
      {&p->info_log, "nvJitLinkGetInfoLog", 0},
  };
  return kiln_dl_bind(p->lib, syms, sizeof syms / sizeof syms[0], missing);
}

int kiln_ptxas_probe(char *path, size_t pathsz) {
  char nvrtc[PATH_MAX];
  if (pathsz) path[0] = '\0';
  if (kiln_nvrtc_probe_dir(nvrtc, sizeof nvrtc) != 0) return -1;
  const char *names[] = {"libnvJitLink.so.13", "libnvJitLink.so"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char cand[PATH_MAX];
    if (snprintf(cand, sizeof cand, "%s/%s", nvrtc, names[i]) >= (int)sizeof cand) continue;
    if (access(cand, R_OK) == 0) {
      snprintf(path, pathsz, "%s", cand);
      return 0;
    }
  }
  return -1;
}

int kiln_ptxas_open(kiln_ptxas **out, const char *nvrtc_dir, kiln_err *e) {
  *out = NULL;
  char cands[3][PATH_MAX];
  int n = 0;
  if (nvrtc_dir && nvrtc_dir[0]) {
    snprintf(cands[n++], PATH_MAX, "%s/libnvJitLink.so.13", nvrtc_dir);
    snprintf(cands[n++], PATH_MAX, "%s/libnvJitLink.so", nvrtc_dir);
  }
  snprintf(cands[n++], PATH_MAX, "libnvJitLink.so.13");
  kiln_ptxas *p = calloc(1, sizeof *p);
  if (!p) return kiln_err_set(e, "E_NVRTC", "out of memory loading nvJitLink");
  char why[1024] = "";
  for (int i = 0; i < n; i++) {
    if (strchr(cands[i], '/') && access(cands[i], F_OK) != 0) continue;
    p->lib = kiln_dl_open_vendor(cands[i]);
    if (!p->lib) {
      const char *msg = dlerror();
      if (strchr(cands[i], '/') && !why[0]) snprintf(why, sizeof why, "; %.1000s", msg ? msg : cands[i]);
      continue;
    }
    const char *missing = NULL;
    if (load_symbols(p, &missing) == 0) {
      *out = p;
      return 0;
    }
    if (!why[0]) snprintf(why, sizeof why, "; %.900s lacks %.60s", cands[i], missing);
    dlclose(p->lib);
    p->lib = NULL;
  }
  free(p);
  return kiln_err_set(e, "E_NVRTC", "nvJitLink (ptxas for kiln's PTX modules) not found beside NVRTC in "
                      "%s or on the loader's path%s; install the CUDA toolkit's libnvJitLink, or build "
                      "with KILN_PLAN=*.module=off", nvrtc_dir && nvrtc_dir[0] ? nvrtc_dir : "(unknown)", why);
}

void kiln_ptxas_close(kiln_ptxas *p) {
  if (!p) return;
  if (p->lib) dlclose(p->lib);
  free(p);
}

int kiln_ptxas_is_ptx(const char *text) {
  const char *s = text;
  while (s && *s) {
    s += strspn(s, " \t\r\n");
    if (strncmp(s, "//", 2) != 0) return strncmp(s, ".version", 8) == 0;
    s = strchr(s, '\n');
  }
  return 0;
}

char *kiln_ptxas_fetch(void *h, int (*size_fn)(void *, size_t *), int (*copy_fn)(void *, void *), size_t *n) {
  size_t len = 0;
  if (n) *n = 0;
  if (size_fn(h, &len) != 0 || len == 0) return NULL;
  char *bytes = malloc(len + 1);
  if (!bytes) return NULL;
  if (copy_fn(h, bytes) != 0) {
    free(bytes);
    return NULL;
  }
  bytes[len] = '\0';
  if (len == 1 && bytes[0] == '\0') { /* a log of one NUL: empty */
    free(bytes);
    return NULL;
  }
  if (n) *n = len;
  return bytes;
}

const char *kiln_ptxas_level_option(char *buf, size_t n, const char *prefix, int level) {
  if (level == 3) return NULL;
  snprintf(buf, n, "%s%d", prefix, level);
  return buf;
}

int kiln_ptxas_compile(kiln_ptxas *p, const char *ptx, const char *name, const char *arch, int opt_level,
                       void **cubin, size_t *size, char **log, kiln_err *e) {
  *cubin = NULL;
  *size = 0;
  if (log) *log = NULL;
  char archopt[64], optopt[32];
  snprintf(archopt, sizeof archopt, "-arch=%s", arch);
  const char *level = kiln_ptxas_level_option(optopt, sizeof optopt, "-Xptxas=-O", opt_level);
  const char *opts[] = {archopt, level};
  jl_handle h = NULL;
  jl_result rc = p->create(&h, level ? 2 : 1, opts);
  if (rc != 0) return kiln_err_set(e, "E_NVRTC", "%s: nvJitLinkCreate failed (%d) for %s", name, rc, arch);
  char *text = NULL;
  int status = 0;
  rc = p->add_data(h, JL_INPUT_PTX, ptx, strlen(ptx), name);
  if (rc == 0) rc = p->complete(h);
  if (rc != 0) {
    text = kiln_ptxas_fetch(h, p->error_log_size, p->error_log, NULL);
    status = kiln_err_set(e, "E_NVRTC", "ptxas (nvJitLink) failed to compile %s for %s (error %d)%s%.1800s", name,
                          arch, rc, text ? ":\n" : "", text ? text : "");
  } else {
    text = kiln_ptxas_fetch(h, p->info_log_size, p->info_log, NULL);
    if (!(*cubin = kiln_ptxas_fetch(h, p->cubin_size, p->cubin, size)))
      status = kiln_err_set(e, "E_NVRTC", "%s: no CUBIN from nvJitLink (or out of memory)", name);
  }
  p->destroy(&h);
  if (log) *log = text;
  else free(text);
  return status;
}
