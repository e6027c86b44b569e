/* kiln compiler: NVRTC through dlopen; CUDA source to CUBIN, with logs and dumps. */
#include "nvrtc.h"
#include "files.h"
#include "ptxas.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Our own declarations of the few NVRTC entry points: no CUDA header needed, and no
 * direct call can slip in and create a link-time dependency. */
typedef int nvrtc_result; /* nvrtcResult; 0 is NVRTC_SUCCESS */
typedef struct nvrtc_program_s *nvrtc_program;

struct kiln_nvrtc {
  void *lib;
  char path[PATH_MAX];
  int major, minor;
  nvrtc_result (*version)(int *, int *);
  const char *(*error_string)(nvrtc_result);
  nvrtc_result (*create_program)(nvrtc_program *, const char *, const char *, int,
                                 const char *const *, const char *const *);
  nvrtc_result (*destroy_program)(nvrtc_program *);
  nvrtc_result (*compile_program)(nvrtc_program, int, const char *const *);
  nvrtc_result (*get_log_size)(nvrtc_program, size_t *);
  nvrtc_result (*get_log)(nvrtc_program, char *);
  nvrtc_result (*get_cubin_size)(nvrtc_program, size_t *);
  nvrtc_result (*get_cubin)(nvrtc_program, char *);
  nvrtc_result (*get_ptx_size)(nvrtc_program, size_t *);
  nvrtc_result (*get_ptx)(nvrtc_program, char *);
  nvrtc_result (*num_supported_archs)(int *);   /* optional */
  nvrtc_result (*supported_archs)(int *);       /* optional */
  /* nvJitLink for PTX modules (ptxas.h), loaded by the first module that asks for it */
  pthread_mutex_t ptxas_mu;
  kiln_ptxas *ptxas;
  int ptxas_tried;
  kiln_err ptxas_err;
};

#define NVRTC_MAX_CANDIDATES 12

typedef struct {
  int n;
  char path[NVRTC_MAX_CANDIDATES][PATH_MAX];
} candidate_list;

static void candidates_add(candidate_list *cl, const char *dir, const char *file) {
  if (cl->n >= NVRTC_MAX_CANDIDATES) return;
  int len = dir ? snprintf(cl->path[cl->n], PATH_MAX, "%s/%s", dir, file)
                : snprintf(cl->path[cl->n], PATH_MAX, "%s", file);
  if (len > 0 && len < PATH_MAX) cl->n++;
}

static const char *env_nonempty(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The search order of nvrtc.h; bare sonames (no '/') go to the loader's own search. */
static void nvrtc_candidates(candidate_list *cl) {
  cl->n = 0;
  const char *explicit_path = env_nonempty("KILN_NVRTC_PATH");
  if (explicit_path) {
    if (is_dir(explicit_path)) {
      candidates_add(cl, explicit_path, "libnvrtc.so.13");
      candidates_add(cl, explicit_path, "libnvrtc.so");
    } else {
      candidates_add(cl, NULL, explicit_path);
    }
  }
  const char *homes[] = {env_nonempty("KILN_CUDA_HOME"), env_nonempty("CUDA_HOME"),
                         "/usr/local/cuda"};
  for (size_t i = 0; i < sizeof homes / sizeof homes[0]; i++) {
    if (!homes[i]) continue;
    char lib64[PATH_MAX];
    int len = snprintf(lib64, sizeof lib64, "%s/lib64", homes[i]);
    if (len <= 0 || len >= (int)sizeof lib64) continue;
    candidates_add(cl, lib64, "libnvrtc.so.13");
    candidates_add(cl, lib64, "libnvrtc.so");
  }
  candidates_add(cl, NULL, "libnvrtc.so.13");
  candidates_add(cl, NULL, "libnvrtc.so.12");
}

static void looked_in(const candidate_list *cl, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < cl->n && used < n; i++) {
    int len = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", cl->path[i]);
    if (len < 0) break;
    used += (size_t)len;
  }
}

void *kiln_dl_open_vendor(const char *path) {
  return dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
}

int kiln_dl_bind(void *lib, const kiln_dl_sym *syms, size_t n, const char **missing) {
  for (size_t i = 0; i < n; i++) {
    void *fn = dlsym(lib, syms[i].name);
    if (!fn && !syms[i].optional) {
      *missing = syms[i].name;
      return -1;
    }
    /* POSIX guarantees data and function pointers convert through dlsym's void *. */
    memcpy(syms[i].slot, &fn, sizeof fn);
  }
  return 0;
}

static int load_symbols(kiln_nvrtc *nv, const char **missing) {
  const kiln_dl_sym syms[] = {
      {&nv->version, "nvrtcVersion", 0},
      {&nv->error_string, "nvrtcGetErrorString", 0},
      {&nv->create_program, "nvrtcCreateProgram", 0},
      {&nv->destroy_program, "nvrtcDestroyProgram", 0},
      {&nv->compile_program, "nvrtcCompileProgram", 0},
      {&nv->get_log_size, "nvrtcGetProgramLogSize", 0},
      {&nv->get_log, "nvrtcGetProgramLog", 0},
      {&nv->get_cubin_size, "nvrtcGetCUBINSize", 0},
      {&nv->get_cubin, "nvrtcGetCUBIN", 0},
      {&nv->get_ptx_size, "nvrtcGetPTXSize", 0},
      {&nv->get_ptx, "nvrtcGetPTX", 0},
      {&nv->num_supported_archs, "nvrtcGetNumSupportedArchs", 1},
      {&nv->supported_archs, "nvrtcGetSupportedArchs", 1},
  };
  return kiln_dl_bind(nv->lib, syms, sizeof syms / sizeof syms[0], missing);
}

int kiln_nvrtc_open(kiln_nvrtc **out, kiln_err *e) {
  *out = NULL;
  candidate_list cl;
  nvrtc_candidates(&cl);
  kiln_nvrtc *nv = calloc(1, sizeof *nv);
  if (!nv) return kiln_err_set(e, "E_NVRTC", "out of memory loading NVRTC");
  char why[1024] = "";
  for (int i = 0; i < cl.n; i++) {
    const char *cand = cl.path[i];
    if (strchr(cand, '/') && access(cand, F_OK) != 0) continue;
    nv->lib = kiln_dl_open_vendor(cand);
    if (!nv->lib) {
      /* A bare soname that the loader cannot find is just "not there"; a file that
       * exists but fails to load is worth reporting. */
      const char *msg = dlerror();
      if (strchr(cand, '/') && !why[0]) snprintf(why, sizeof why, "; %.1000s", msg ? msg : cand);
      continue;
    }
    const char *missing = NULL;
    int major = 0, minor = 0;
    if (load_symbols(nv, &missing) != 0) {
      if (!why[0]) snprintf(why, sizeof why, "; %.900s lacks %.60s", cand, missing);
    } else if (nv->version(&major, &minor) != 0) {
      if (!why[0]) snprintf(why, sizeof why, "; nvrtcVersion failed in %.900s", cand);
    } else {
      nv->major = major;
      nv->minor = minor;
      struct link_map *lm = NULL;
      const char *loaded = cand;
      if (dlinfo(nv->lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
        loaded = lm->l_name;
      snprintf(nv->path, sizeof nv->path, "%s", loaded);
      if (pthread_mutex_init(&nv->ptxas_mu, NULL) != 0) {
        dlclose(nv->lib);
        free(nv);
        return kiln_err_set(e, "E_NVRTC", "pthread_mutex_init failed loading NVRTC");
      }
      *out = nv;
      return 0;
    }
    dlclose(nv->lib);
    nv->lib = NULL;
  }
  free(nv);
  char looked[2048];
  looked_in(&cl, looked, sizeof looked);
  return kiln_err_set(e, "E_NVRTC",
                      "NVRTC not found (looked in %s%s); set KILN_NVRTC_PATH or KILN_CUDA_HOME",
                      looked, why);
}

void kiln_nvrtc_close(kiln_nvrtc *nv) {
  if (!nv) return;
  kiln_ptxas_close(nv->ptxas);
  pthread_mutex_destroy(&nv->ptxas_mu);
  if (nv->lib) dlclose(nv->lib);
  free(nv);
}

void kiln_nvrtc_version(const kiln_nvrtc *nv, int *major, int *minor) {
  if (major) *major = nv->major;
  if (minor) *minor = nv->minor;
}

const char *kiln_nvrtc_path(const kiln_nvrtc *nv) { return nv->path; }

int kiln_nvrtc_supported_archs(const kiln_nvrtc *nv, int *archs, int max) {
  int n = 0;
  if (!nv->num_supported_archs || !nv->supported_archs) return 0;
  if (nv->num_supported_archs(&n) != 0 || n <= 0) return 0;
  int *all = malloc((size_t)n * sizeof *all);
  if (!all) return 0;
  if (nv->supported_archs(all) != 0) {
    free(all);
    return 0;
  }
  for (int i = 0; i < n && i < max; i++) archs[i] = all[i];
  free(all);
  return n;
}

/* "MAJOR.MINOR" from a name "PREFIX.MAJOR.MINOR[.PATCH...]"; 0 on success. */
static int version_after(const char *name, const char *prefix, char *ver, size_t n) {
  size_t plen = strlen(prefix);
  if (strncmp(name, prefix, plen) != 0) return -1;
  const char *p = name + plen;
  char *end;
  long major = strtol(p, &end, 10);
  if (end == p || *end != '.') return -1;
  p = end + 1;
  long minor = strtol(p, &end, 10);
  if (end == p || (*end != '\0' && *end != '.')) return -1;
  snprintf(ver, n, "%ld.%ld", major, minor);
  return 0;
}

/* The version of the NVRTC at real path `lib`: from its own name when it carries
 * major.minor, else from the one libnvrtc-builtins.so.MAJOR.MINOR beside it. */
static void probe_version(const char *lib, char *ver, size_t n) {
  ver[0] = '\0';
  const char *slash = strrchr(lib, '/');
  const char *base = slash ? slash + 1 : lib;
  if (version_after(base, "libnvrtc.so.", ver, n) == 0) return;
  long major = -1;
  if (strncmp(base, "libnvrtc.so.", 12) == 0) major = strtol(base + 12, NULL, 10);
  char dir[PATH_MAX];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else
    snprintf(dir, sizeof dir, "%.*s", slash == lib ? 1 : (int)(slash - lib), lib);
  DIR *d = opendir(dir);
  if (!d) return;
  char found[32] = "";
  int ambiguous = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    char v[32];
    if (version_after(de->d_name, "libnvrtc-builtins.so.", v, sizeof v) != 0) continue;
    if (major >= 0 && strtol(v, NULL, 10) != major) continue;
    if (found[0] && strcmp(found, v) != 0) ambiguous = 1;
    snprintf(found, sizeof found, "%s", v);
  }
  closedir(d);
  if (found[0] && !ambiguous) snprintf(ver, n, "%s", found);
}

/* Whether path starts like a shared library the loader could take (an ELF file of our
 * class), so that probe and open settle on the same file. */
static int looks_like_elf(const char *path) {
  unsigned char head[5];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, head, sizeof head);
  close(fd);
  return n == (ssize_t)sizeof head && !memcmp(head, "\x7f" "ELF", 4) &&
         head[4] == (sizeof(void *) == 8 ? 2 : 1);
}

int kiln_nvrtc_probe(char *path, size_t pathsz, char *version, size_t versionsz, kiln_err *e) {
  candidate_list cl;
  nvrtc_candidates(&cl);
  if (pathsz) path[0] = '\0';
  if (versionsz) version[0] = '\0';
  for (int i = 0; i < cl.n; i++) {
    if (!strchr(cl.path[i], '/')) continue;
    char real[PATH_MAX];
    if (!realpath(cl.path[i], real)) continue;
    struct stat st;
    if (stat(real, &st) != 0 || !S_ISREG(st.st_mode) || !looks_like_elf(real)) continue;
    snprintf(path, pathsz, "%s", real);
    probe_version(real, version, versionsz);
    return 0;
  }
  char looked[2048];
  looked_in(&cl, looked, sizeof looked);
  return kiln_err_set(e, "E_NVRTC", "NVRTC not found on disk (looked in %s)", looked);
}

int kiln_nvrtc_probe_dir(char *dir, size_t n) {
  char version[32];
  kiln_err ignored;
  if (kiln_nvrtc_probe(dir, n, version, sizeof version, &ignored) != 0) return -1;
  char *slash = strrchr(dir, '/');
  if (!slash) return -1;
  *slash = '\0';
  return 0;
}

int kiln_nvrtc_arch_valid(const char *arch) {
  if (!arch) return 0;
  const char *p;
  if (strncmp(arch, "sm_", 3) == 0) p = arch + 3;
  else if (strncmp(arch, "compute_", 8) == 0) p = arch + 8; /* PTX, JIT-compiled by the driver */
  else return 0;
  int digits = 0;
  while (p[digits] >= '0' && p[digits] <= '9') digits++;
  if (digits < 2 || digits > 3 || p[0] == '0') return 0;
  p += digits;
  return p[0] == '\0' || (p[0] == 'a' && p[1] == '\0');
}

/* A file name made of [A-Za-z0-9_.-] only, never hidden, never empty. */
static void safe_name(const char *name, char *out, size_t n) {
  size_t i = 0;
  for (const char *p = name ? name : ""; *p && i + 1 < n && i < 200; p++) {
    char ch = *p;
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '_' || ch == '-' || (ch == '.' && i > 0);
    out[i++] = ok ? ch : '_';
  }
  out[i] = '\0';
  if (!i) snprintf(out, n, "kernel");
}

/* Writes dir/file through a temporary and a rename, so a reader never sees half. */
static int dump_file(const char *dir, const char *file, const char *text, kiln_err *e) {
  char path[PATH_MAX], tmp[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path ||
      snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, file) >= (int)sizeof tmp)
    return kiln_err_set(e, "E_IO", "KILN_DUMP_DIR path too long: %s", dir);
  if (kiln_mkdir_p(dir) != 0)
    return kiln_err_set(e, "E_IO", "creating KILN_DUMP_DIR %s: %s", dir, strerror(errno));
  int fd = mkstemp(tmp);
  if (fd < 0) return kiln_err_set(e, "E_IO", "creating %s: %s", tmp, strerror(errno));
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      close(fd);
      unlink(tmp);
      return kiln_err_set(e, "E_IO", "writing %s: %s", path, strerror(err));
    }
    done += (size_t)w;
  }
  if (fchmod(fd, 0644) != 0 || close(fd) != 0) {
    int err = errno;
    unlink(tmp);
    return kiln_err_set(e, "E_IO", "writing %s: %s", path, strerror(err));
  }
  if (rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return kiln_err_set(e, "E_IO", "renaming %s to %s: %s", tmp, path, strerror(err));
  }
  return 0;
}

/* The first lines of an NVRTC log, indented, for an error message. */
static void log_head(const char *log, char *out, size_t n) {
  out[0] = '\0';
  if (!log) return;
  size_t used = 0;
  int lines = 0;
  for (const char *p = log; *p && lines < 12 && used + 1 < n; lines++) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len) {
      int w = snprintf(out + used, n - used, "\n  %.*s", (int)len, p);
      if (w < 0) break;
      used += (size_t)w;
      if (used >= n) break;
    }
    p += len + (nl ? 1 : 0);
  }
}

/* Under KILN_DUMP_DIR: a compile's log as NAME.log, or no stale one when it had none. */
static int keep_log(const char *dir, const char *base, const char *text, kiln_err *e) {
  char logfile[300], logpath[PATH_MAX];
  snprintf(logfile, sizeof logfile, "%s.log", base);
  if (text) return dump_file(dir, logfile, text, e);
  if (snprintf(logpath, sizeof logpath, "%s/%s", dir, logfile) < (int)sizeof logpath && unlink(logpath) != 0 &&
      errno != ENOENT)
    return kiln_err_set(e, "E_IO", "removing stale %s: %s", logpath, strerror(errno));
  return 0;
}

/* The directory of the NVRTC in use, for the ptxas of its toolkit. */
static void nvrtc_dir(const kiln_nvrtc *nv, char *dir, size_t n) {
  if (!realpath(nv->path, dir)) snprintf(dir, n, "%s", nv->path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else dir[0] = '\0';
}

/* nvJitLink, loaded once per handle by the first PTX module that asks for it. */
static kiln_ptxas *ptxas_of(kiln_nvrtc *nv, kiln_err *e) {
  pthread_mutex_lock(&nv->ptxas_mu);
  if (!nv->ptxas_tried) {
    nv->ptxas_tried = 1;
    char dir[PATH_MAX];
    nvrtc_dir(nv, dir, sizeof dir);
    if (kiln_ptxas_open(&nv->ptxas, dir, &nv->ptxas_err) != 0) nv->ptxas = NULL;
  }
  kiln_ptxas *p = nv->ptxas;
  if (!p) *e = nv->ptxas_err;
  pthread_mutex_unlock(&nv->ptxas_mu);
  return p;
}

/* The ptxas executable of the toolkit whose NVRTC is on disk (the one the build chose modules
 * for: kiln.c.ptx_compilers), looked for once a process; NULL when absent. */
static char probed_exe[PATH_MAX];
static void probe_exe(void) {
  if (kiln_ptxas_exe_probe(probed_exe, sizeof probed_exe) != 0) probed_exe[0] = '\0';
}
static const char *exe_path(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, probe_exe);
  return probed_exe[0] ? probed_exe : NULL;
}

/* Which ptxas a PTX module's one option names (it is in the module's cache key). */
enum { VIA_NVJITLINK, VIA_EXE, VIA_LIB };
#define LIB_OPTION "--compiler=nvptxcompiler/"
static int module_compiler(const char *opt) {
  if (strcmp(opt, "--compiler=ptxas") == 0) return VIA_EXE;
  if (strcmp(opt, "--compiler=nvjitlink") == 0) return VIA_NVJITLINK;
  if (strncmp(opt, LIB_OPTION, strlen(LIB_OPTION)) == 0) return VIA_LIB;
  return -1;
}

/* ptxas's optimization level a module's option names (-O0 ... -O3), else -1. */
static int module_opt_level(const char *opt) {
  return opt[0] == '-' && opt[1] == 'O' && opt[2] >= '0' && opt[2] <= '3' && !opt[3] ? opt[2] - '0' : -1;
}

/* A PTX module (kiln.ptxmodule) to a CUBIN by ptxas, dumped as NVRTC's. Its options say which
 * ptxas: --compiler=nvptxcompiler/VERSION the PTX compiler library in-process (of that version
 * only), --compiler=ptxas the executable (both NVRTC's whole-program compile),
 * --compiler=nvjitlink or none nvJitLink in-process; and -O0 ... -O3 ptxas's optimization level
 * (default -O3, ptxas's own). */
static int compile_ptx(kiln_nvrtc *nv, const char *source, const char *base, const char *arch,
                       const char *const *opts, int nopts, const char *dump_dir, void **cubin,
                       size_t *size, char **log, kiln_err *e) {
  if (strncmp(arch, "sm_", 3) != 0)
    return kiln_err_set(e, "E_NVRTC", "%s: a PTX module is built for a real SM, not %s", base, arch);
  int via = VIA_NVJITLINK, level = 3;
  const char *lib_version = NULL;
  for (int i = 0; i < nopts; i++) {
    int l = module_opt_level(opts[i]);
    if (l >= 0) {
      level = l;
      continue;
    }
    via = module_compiler(opts[i]);
    if (via < 0)
      return kiln_err_set(e, "E_NVRTC", "%s: a PTX module takes --compiler=nvptxcompiler/VERSION|ptxas|nvjitlink "
                          "and -O0 ... -O3, not '%s'", base, opts[i]);
    lib_version = via == VIA_LIB ? opts[i] + strlen(LIB_OPTION) : NULL;
  }
  if (via == VIA_LIB) {
    const char *have = kiln_ptxas_lib_version();
    if (!have || strcmp(lib_version, have) != 0)
      return kiln_err_set(e, "E_NVRTC", "%s: the module asks for PTX compiler %s, kiln has %s (KILN_PTXAS=exe "
                          "compiles by the toolkit's ptxas)", base, lib_version, have ? have : "none");
  }
  if (via == VIA_NVJITLINK && !nv) return kiln_err_set(e, "E_NVRTC", "%s: nvJitLink needs NVRTC loaded", base);
  char *text = NULL;
  int status;
  if (via == VIA_LIB) {
    status = kiln_ptxas_lib_compile(source, base, arch, level, cubin, size, &text, e);
  } else if (via == VIA_EXE) {
    const char *exe = exe_path();
    if (!exe)
      return kiln_err_set(e, "E_NVRTC", "%s: no ptxas executable in the toolkit of the NVRTC on disk "
                          "(KILN_PTXAS=nvjitlink compiles in-process)", base);
    status = kiln_ptxas_exe_compile(exe, source, base, arch, level, cubin, size, &text, e);
  } else {
    kiln_ptxas *p = ptxas_of(nv, e);
    if (!p) return -1;
    status = kiln_ptxas_compile(p, source, base, arch, level, cubin, size, &text, e);
  }
  if (status != 0 && dump_dir) {
    kiln_err ignored; /* the compile error matters more than a failed log dump */
    size_t len = strlen(e->msg);
    if (keep_log(dump_dir, base, text ? text : "", &ignored) == 0 && len < sizeof e->msg)
      snprintf(e->msg + len, sizeof e->msg - len, "\n  (source and log kept in %s/%s.{ptx,log})", dump_dir, base);
  } else if (status == 0 && dump_dir) {
    status = keep_log(dump_dir, base, text, e);
    if (status != 0) {
      free(*cubin);
      *cubin = NULL;
      *size = 0;
    }
  }
  if (log) *log = text;
  else free(text);
  return status;
}

int kiln_nvrtc_needs_nvrtc(const char *source, const char *const *opts, int nopts) {
  if (!source || !kiln_ptxas_is_ptx(source)) return 1;
  for (int i = 0; i < nopts; i++) {
    int via = opts && opts[i] ? module_compiler(opts[i]) : -1;
    if (via == VIA_EXE || via == VIA_LIB) return 0;
  }
  return 1;
}

int kiln_nvrtc_compile(kiln_nvrtc *nv, const char *source, const char *name, const char *arch,
                       const char *const *opts, int nopts, void **cubin, size_t *size,
                       char **log, kiln_err *e) {
  *cubin = NULL;
  *size = 0;
  if (log) *log = NULL;
  char base[256];
  safe_name(name, base, sizeof base);
  if (!source) return kiln_err_set(e, "E_NVRTC", "%s: no source", base);
  if (!kiln_nvrtc_arch_valid(arch))
    return kiln_err_set(e, "E_NVRTC", "%s: bad architecture '%s' (want sm_NN[a] or compute_NN[a])", base,
                        arch ? arch : "(null)");
  if (nopts < 0 || (nopts > 0 && !opts))
    return kiln_err_set(e, "E_NVRTC", "%s: bad option list", base);

  int is_ptx = kiln_ptxas_is_ptx(source);
  char file[300];
  snprintf(file, sizeof file, "%s.%s", base, is_ptx ? "ptx" : "cu");
  const char *dump_dir = env_nonempty("KILN_DUMP_DIR");
  if (dump_dir && dump_file(dump_dir, file, source, e) != 0) return -1;
  if (is_ptx) return compile_ptx(nv, source, base, arch, opts, nopts, dump_dir, cubin, size, log, e);
  if (!nv) return kiln_err_set(e, "E_NVRTC", "%s: NVRTC is not loaded", base);

  const char **argv = malloc(((size_t)nopts + 1) * sizeof *argv);
  char archopt[64];
  if (!argv) return kiln_err_set(e, "E_NVRTC", "%s: out of memory", base);
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  argv[0] = archopt;
  for (int i = 0; i < nopts; i++) argv[i + 1] = opts[i];

  nvrtc_program prog = NULL;
  nvrtc_result rc = nv->create_program(&prog, source, file, 0, NULL, NULL);
  if (rc != 0) {
    free(argv);
    return kiln_err_set(e, "E_NVRTC", "%s: nvrtcCreateProgram: %s", base, nv->error_string(rc));
  }
  nvrtc_result crc = nv->compile_program(prog, nopts + 1, argv);
  free(argv);

  char *text = NULL;
  size_t logsz = 0;
  int status = 0;
  if ((rc = nv->get_log_size(prog, &logsz)) != 0) {
    status = kiln_err_set(e, "E_NVRTC", "%s: nvrtcGetProgramLogSize: %s", base,
                          nv->error_string(rc));
  } else if (logsz > 1) {
    text = malloc(logsz);
    if (!text)
      status = kiln_err_set(e, "E_NVRTC", "%s: out of memory for the log", base);
    else if ((rc = nv->get_log(prog, text)) != 0)
      status = kiln_err_set(e, "E_NVRTC", "%s: nvrtcGetProgramLog: %s", base,
                            nv->error_string(rc));
    else
      text[logsz - 1] = '\0';
  }

  if (status == 0 && crc != 0) {
    char head[2048], kept[PATH_MAX + 64] = "";
    log_head(text, head, sizeof head);
    if (dump_dir) {
      kiln_err ignored; /* the compile error matters more than a failed log dump */
      if (keep_log(dump_dir, base, text ? text : "", &ignored) == 0)
        snprintf(kept, sizeof kept, "\n  (source and log kept in %s/%s.{cu,log})", dump_dir,
                 base);
    }
    status = kiln_err_set(e, "E_NVRTC", "NVRTC failed to compile %s for %s (%s)%s%s", base,
                          arch, nv->error_string(crc), head, kept);
  }

  if (status == 0 && strncmp(arch, "compute_", 8) == 0) {
    /* a PTX target: the image is the NUL-terminated PTX text */
    if ((rc = nv->get_ptx_size(prog, size)) != 0 || *size == 0) {
      status = kiln_err_set(e, "E_NVRTC", "%s: nvrtcGetPTXSize: %s", base, rc ? nv->error_string(rc) : "empty PTX");
    } else if (!(*cubin = malloc(*size))) {
      status = kiln_err_set(e, "E_NVRTC", "%s: out of memory for the PTX", base);
    } else if ((rc = nv->get_ptx(prog, *cubin)) != 0) {
      status = kiln_err_set(e, "E_NVRTC", "%s: nvrtcGetPTX: %s", base, nv->error_string(rc));
    }
  } else if (status == 0) {
    if ((rc = nv->get_cubin_size(prog, size)) != 0 || *size == 0) {
      status = kiln_err_set(e, "E_NVRTC", "%s: nvrtcGetCUBINSize: %s", base,
                            rc ? nv->error_string(rc) : "empty CUBIN");
    } else if (!(*cubin = malloc(*size))) {
      status = kiln_err_set(e, "E_NVRTC", "%s: out of memory for the CUBIN", base);
    } else if ((rc = nv->get_cubin(prog, *cubin)) != 0) {
      status = kiln_err_set(e, "E_NVRTC", "%s: nvrtcGetCUBIN: %s", base, nv->error_string(rc));
    }
  }
  nv->destroy_program(&prog);

  if (status == 0 && dump_dir) status = keep_log(dump_dir, base, text, e);
  if (status != 0) {
    free(*cubin);
    *cubin = NULL;
    *size = 0;
  }
  if (log)
    *log = text;
  else
    free(text);
  return status;
}
