/* kiln compiler: `kiln env` — driver, GPUs, NVRTC, cuDNN, cache, versions. */
#include "env.h"

#include <dlfcn.h>
#include <jansson.h>
#include <link.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "compile.h"
#include "nvrtc.h"
#include "ptxas.h"

/* Our own declarations of the few driver entry points (no cuda.h needed). */
typedef int cu_result; /* CUresult; 0 is CUDA_SUCCESS */
typedef int cu_device;
enum { CU_ATTR_SM_COUNT = 16, CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76 };

/* Adds key = value to the report; a failed add leaves *bad set. */
static void set_str(json_t *o, const char *key, const char *value, int *bad) {
  *bad |= json_object_set_new(o, key, json_string(value ? value : "")) != 0;
}
static void set_int(json_t *o, const char *key, long long value, int *bad) {
  *bad |= json_object_set_new(o, key, json_integer((json_int_t)value)) != 0;
}
static void add_warning(json_t *o, const char *text, int *bad) {
  *bad |= json_array_append_new(json_object_get(o, "warnings"), json_string(text)) != 0;
}

static const char *loaded_path(void *lib, const char *fallback) {
  struct link_map *lm = NULL;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
    return lm->l_name;
  return fallback;
}

static void *sym(void *lib, const char *name) { return lib ? dlsym(lib, name) : NULL; }

/* The kiln target whose cubin runs on a GPU of compute capability major.minor: the
 * exact sm_XYa or sm_XY, else the newest sm_XZ with Z < Y (same major, no 'a'). */
static void kiln_target_for(int major, int minor, char *out, size_t n) {
  char sms[] = KILN_SUPPORTED_SMS;
  int best = -1;
  char exact[16] = "";
  out[0] = '\0';
  for (char *save = NULL, *t = strtok_r(sms, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
    int num = atoi(t + 3), tmaj = num / 10, tmin = num % 10;
    int arch_specific = t[strlen(t) - 1] == 'a';
    if (tmaj != major) continue;
    if (tmin == minor) snprintf(exact, sizeof exact, "%s", t);
    else if (!arch_specific && tmin < minor && tmin > best) {
      best = tmin;
      snprintf(out, n, "%s", t);
    }
  }
  if (exact[0]) snprintf(out, n, "%s", exact);
}

static void report_driver(json_t *r, int *bad) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *err = dlerror();
    set_str(r, "driver", "not found", bad);
    set_str(r, "driver_error", err ? err : "libcuda.so.1 cannot be loaded", bad);
    set_int(r, "gpu_count", 0, bad);
    return;
  }
  /* libcuda stays loaded: after cuInit it owns threads, so unloading it is unsafe. */
  set_str(r, "driver", "loaded", bad);
  set_str(r, "driver_path", loaded_path(lib, "libcuda.so.1"), bad);
  cu_result (*init)(unsigned) = (cu_result(*)(unsigned))sym(lib, "cuInit");
  cu_result (*version)(int *) = (cu_result(*)(int *))sym(lib, "cuDriverGetVersion");
  cu_result (*count)(int *) = (cu_result(*)(int *))sym(lib, "cuDeviceGetCount");
  cu_result (*get)(cu_device *, int) = (cu_result(*)(cu_device *, int))sym(lib, "cuDeviceGet");
  cu_result (*name)(char *, int, cu_device) =
      (cu_result(*)(char *, int, cu_device))sym(lib, "cuDeviceGetName");
  cu_result (*attr)(int *, int, cu_device) =
      (cu_result(*)(int *, int, cu_device))sym(lib, "cuDeviceGetAttribute");
  cu_result (*mem)(size_t *, cu_device) =
      (cu_result(*)(size_t *, cu_device))sym(lib, "cuDeviceTotalMem_v2");
  cu_result (*errname)(cu_result, const char **) =
      (cu_result(*)(cu_result, const char **))sym(lib, "cuGetErrorName");
  int v = 0;
  if (version && version(&v) == 0) {
    char text[32];
    snprintf(text, sizeof text, "%d.%d", v / 1000, (v % 1000) / 10);
    set_str(r, "driver_cuda_version", text, bad);
  }
  cu_result rc = init ? init(0) : -1;
  int n = 0;
  if (rc == 0 && count && count(&n) != 0) n = 0;
  set_int(r, "gpu_count", n, bad);
  if (rc != 0) {
    const char *what = NULL;
    if (!init || !errname || errname(rc, &what) != 0 || !what) what = "cuInit unavailable";
    char text[128];
    snprintf(text, sizeof text, "cuInit failed: %s (%d)", what, rc);
    set_str(r, "driver_error", text, bad);
    return;
  }
  json_t *gpus = json_array();
  *bad |= json_object_set_new(r, "gpus", gpus) != 0;
  for (int i = 0; gpus && i < n; i++) {
    cu_device dev;
    char devname[256] = "?", cc[16] = "?", target[16] = "";
    int major = 0, minor = 0, sms = 0;
    size_t bytes = 0;
    if (!get || get(&dev, i) != 0) continue;
    if (!name || name(devname, (int)sizeof devname, dev) != 0) snprintf(devname, sizeof devname, "?");
    if (attr && attr(&major, CU_ATTR_CC_MAJOR, dev) == 0 && attr(&minor, CU_ATTR_CC_MINOR, dev) == 0) {
      snprintf(cc, sizeof cc, "%d.%d", major, minor);
      kiln_target_for(major, minor, target, sizeof target);
    }
    if (attr && attr(&sms, CU_ATTR_SM_COUNT, dev) != 0) sms = 0;
    if (mem && mem(&bytes, dev) != 0) bytes = 0;
    json_t *g = json_object();
    *bad |= !g || json_array_append_new(gpus, g) != 0;
    if (!g) continue;
    set_int(g, "index", i, bad);
    set_str(g, "name", devname, bad);
    set_str(g, "compute_capability", cc, bad);
    set_int(g, "sm_count", sms, bad);
    set_int(g, "memory_bytes", (long long)bytes, bad);
    set_str(g, "kiln_target", target[0] ? target : "none", bad);
    if (!target[0] && major) {
      char text[160];
      snprintf(text, sizeof text, "GPU %d (compute capability %s) is not a target of kiln (%s)",
               i, cc, KILN_SUPPORTED_SMS);
      add_warning(r, text, bad);
    }
  }
}

static void report_nvrtc(json_t *r, int *bad) {
  char probed_path[4096], probed[32];
  kiln_err err;
  if (kiln_nvrtc_probe(probed_path, sizeof probed_path, probed, sizeof probed, &err) == 0)
    set_str(r, "nvrtc_key_version", probed[0] ? probed : "unknown (NVRTC must be loaded)", bad);
  /* what compiles the kernels kiln writes as PTX modules: its PTX compiler library, else the
   * ptxas executable of NVRTC's toolkit (NVRTC's code), else nvJitLink (kiln's own small kernels) */
  char lib[4096], exe[4096], jitlink[4096], libtext[4200];
  int has_lib = kiln_ptxas_lib_probe(lib, sizeof lib) == 0;
  int has_exe = kiln_ptxas_exe_probe(exe, sizeof exe) == 0;
  int has_jitlink = kiln_ptxas_probe(jitlink, sizeof jitlink) == 0;
  snprintf(libtext, sizeof libtext, "%s (%s)", lib, kiln_ptxas_lib_version() ? kiln_ptxas_lib_version() : "");
  set_str(r, "ptx_compiler_library", has_lib ? libtext
          : kiln_ptxas_lib_version() ? "libkilnptx.so not found" : "none (configured with --ptx-compiler=none)", bad);
  set_str(r, "ptxas", has_exe ? exe : "not in NVRTC's toolkit", bad);
  set_str(r, "nvjitlink", has_jitlink ? jitlink : "not beside NVRTC", bad);
  const char *pick = getenv("KILN_PTXAS");
  int forced_jl = pick && !strcmp(pick, "nvjitlink"), forced_exe = pick && !strcmp(pick, "exe");
  set_str(r, "ptx_modules", has_lib && !forced_jl && !forced_exe ? "every kernel with a PTX body, by the PTX compiler library"
          : has_exe && !forced_jl ? "every kernel with a PTX body, by the ptxas executable"
          : has_jitlink ? "the finalize and amax init kernels, through nvJitLink"
          : "none: every kernel compiles from CUDA", bad);
  kiln_nvrtc *nv = NULL;
  if (kiln_nvrtc_open(&nv, &err) != 0) {
    set_str(r, "nvrtc", "not found", bad);
    set_str(r, "nvrtc_error", err.msg, bad);
    return;
  }
  int major, minor;
  char version[32];
  kiln_nvrtc_version(nv, &major, &minor);
  snprintf(version, sizeof version, "%d.%d", major, minor);
  set_str(r, "nvrtc", "loaded", bad);
  set_str(r, "nvrtc_path", kiln_nvrtc_path(nv), bad);
  set_str(r, "nvrtc_version", version, bad);
  int archs[64];
  int n = kiln_nvrtc_supported_archs(nv, archs, 64);
  json_t *list = json_array();
  *bad |= json_object_set_new(r, "nvrtc_archs", list) != 0;
  for (int i = 0; list && i < n && i < 64; i++) {
    char a[16];
    snprintf(a, sizeof a, "sm_%d", archs[i]);
    *bad |= json_array_append_new(list, json_string(a)) != 0;
  }
  char sms[] = KILN_SUPPORTED_SMS;
  for (char *save = NULL, *t = strtok_r(sms, " ", &save); n && t; t = strtok_r(NULL, " ", &save)) {
    int num = atoi(t + 3), found = 0;
    for (int i = 0; i < n && i < 64; i++) found |= archs[i] == num;
    if (!found) {
      char text[128];
      snprintf(text, sizeof text, "NVRTC %s cannot build %s", version, t);
      add_warning(r, text, bad);
    }
  }
  if (probed[0] && strcmp(probed, version) != 0) {
    char text[192];
    snprintf(text, sizeof text, "NVRTC on disk looks like %s but %s was loaded; cache keys use %s",
             probed, version, probed);
    add_warning(r, text, bad);
  }
  /* Driver older than NVRTC: the cubins NVRTC builds would not load. */
  const char *drv = json_string_value(json_object_get(r, "driver_cuda_version"));
  int dmaj = 0, dmin = 0;
  if (drv && sscanf(drv, "%d.%d", &dmaj, &dmin) == 2 &&
      (dmaj < major || (dmaj == major && dmin < minor))) {
    char text[192];
    snprintf(text, sizeof text, "the driver supports CUDA %s, older than NVRTC %s: cubins "
             "compiled here will not load; update the driver or use an older NVRTC", drv, version);
    add_warning(r, text, bad);
  }
  kiln_nvrtc_close(nv);
}

static void report_cudnn(json_t *r, int *bad) {
  void *lib = kiln_dl_open_vendor("libcudnn.so.9");
  if (!lib) {
    set_str(r, "cudnn", "not found", bad);
    return;
  }
  size_t (*version)(void) = (size_t(*)(void))dlsym(lib, "cudnnGetVersion");
  set_str(r, "cudnn", version ? "loaded" : "broken (no cudnnGetVersion)", bad);
  set_str(r, "cudnn_path", loaded_path(lib, "libcudnn.so.9"), bad);
  if (version) {
    size_t v = version();
    char text[32];
    snprintf(text, sizeof text, "%zu.%zu.%zu", v / 10000, (v % 10000) / 100, v % 100);
    set_str(r, "cudnn_version", text, bad);
  }
  dlclose(lib);
}

static void report_cache(json_t *r, int *bad) {
  kiln_cache *c = NULL;
  kiln_err err;
  kiln_cache_stats st;
  if (kiln_cache_open(NULL, &c, &err) != 0) {
    set_str(r, "cache_error", err.msg, bad);
    return;
  }
  set_str(r, "cache_root", kiln_cache_root(c), bad);
  if (kiln_cache_stat(c, &st, &err) != 0) {
    set_str(r, "cache_error", err.msg, bad);
  } else {
    set_int(r, "cache_entries", st.entries, bad);
    set_int(r, "cache_bytes", (long long)st.bytes, bad);
  }
  set_int(r, "cache_maxsize", (long long)kiln_cache_maxsize(c), bad);
  kiln_cache_close(c);
}

/* Text form: "key: value" lines; lists space-separated; one line per GPU and warning. */
static int print_text(FILE *out, json_t *r) {
  const char *key;
  json_t *v;
  int rc = 0;
  json_object_foreach(r, key, v) {
    if (json_is_string(v)) {
      rc |= fprintf(out, "%s: %s\n", key, json_string_value(v)) < 0;
    } else if (json_is_integer(v)) {
      rc |= fprintf(out, "%s: %lld\n", key, (long long)json_integer_value(v)) < 0;
    } else if (!strcmp(key, "warnings")) {
      for (size_t i = 0; i < json_array_size(v); i++)
        rc |= fprintf(out, "warning: %s\n", json_string_value(json_array_get(v, i))) < 0;
    } else if (!strcmp(key, "gpus")) {
      for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *g = json_array_get(v, i);
        rc |= fprintf(out, "gpu%lld: %s, compute capability %s, %lld SMs, %.1f GiB, kiln target %s\n",
                      (long long)json_integer_value(json_object_get(g, "index")),
                      json_string_value(json_object_get(g, "name")),
                      json_string_value(json_object_get(g, "compute_capability")),
                      (long long)json_integer_value(json_object_get(g, "sm_count")),
                      (double)json_integer_value(json_object_get(g, "memory_bytes")) / (1 << 30),
                      json_string_value(json_object_get(g, "kiln_target"))) < 0;
      }
    } else if (json_is_array(v)) {
      rc |= fprintf(out, "%s:", key) < 0;
      for (size_t i = 0; i < json_array_size(v); i++)
        rc |= fprintf(out, " %s", json_string_value(json_array_get(v, i))) < 0;
      rc |= fprintf(out, "\n") < 0;
    }
  }
  return rc ? -1 : 0;
}

/* The environment report as a JSON object (NULL when out of memory). */
static json_t *env_build(void) {
  json_t *r = json_object();
  int bad = !r;
  if (bad) return NULL;
  set_str(r, "kiln_version", KILN_VERSION, &bad);
  set_str(r, "lua_version", LUA_RELEASE, &bad);
  json_t *sms = json_array();
  bad |= json_object_set_new(r, "sms", sms) != 0;
  char list[] = KILN_SUPPORTED_SMS;
  for (char *save = NULL, *t = strtok_r(list, " ", &save); sms && t; t = strtok_r(NULL, " ", &save))
    bad |= json_array_append_new(sms, json_string(t)) != 0;
  bad |= json_object_set_new(r, "warnings", json_array()) != 0;
  report_driver(r, &bad);
  report_nvrtc(r, &bad);
  report_cudnn(r, &bad);
  report_cache(r, &bad);
  /* warnings last in the text form, where they are seen */
  json_t *warnings = json_incref(json_object_get(r, "warnings"));
  bad |= json_object_del(r, "warnings") != 0 || json_object_set_new(r, "warnings", warnings) != 0;
  if (bad) {
    json_decref(r);
    return NULL;
  }
  return r;
}

int kiln_env_report(FILE *out, int json, kiln_err *e) {
  json_t *r = env_build();
  if (!r) return kiln_err_set(e, "E_IO", "out of memory building the environment report");
  int rc;
  if (json)
    rc = json_dumpf(r, out, JSON_INDENT(2)) != 0 || fputc('\n', out) == EOF ? -1 : 0;
  else
    rc = print_text(out, r);
  json_decref(r);
  if (rc != 0 || fflush(out) != 0 || ferror(out))
    return kiln_err_set(e, "E_IO", "writing the environment report failed");
  return 0;
}

char *kiln_env_json(kiln_err *e) {
  json_t *r = env_build();
  char *text = r ? json_dumps(r, JSON_COMPACT) : NULL;
  json_decref(r);
  if (!text) kiln_err_set(e, "E_IO", "out of memory building the environment report");
  return text;
}
