/* kiln compiler: Lua bindings of the C back end (compile through the cache, cache upkeep). */
#include "primitives.h"

#include <lauxlib.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache.h"
#include "compile.h"
#include "emit_c.h"
#include "env.h"
#include "pack_inspect.h"
#include "pack_write.h"
#include "ptxas.h"
#include "run.h"
#include "luahost.h"

static int raise_err(lua_State *L, const kiln_err *e) {
  return kiln_host_raise(L, e->code ? e->code : "E_INTERNAL", "%s", e->msg);
}

static const char *field_string(lua_State *L, int idx, const char *key, int required) {
  lua_getfield(L, idx, key);
  const char *s = lua_tostring(L, -1);
  lua_pop(L, 1); /* the string stays alive: it is referenced by the jobs table */
  if (!s && required) kiln_host_raise(L, "E_INTERNAL", "compile job without '%s'", key);
  return s;
}

/* Progress of long builds on a terminal: after a second, one updating line on stderr. */
typedef struct {
  double start_ms;
  int shown;
} progress_state;

static void show_progress(void *ctx, int done, int total, const kiln_compile_job *job) {
  progress_state *p = ctx;
  double t = kiln_now_ms() - p->start_ms;
  if (t < 1000 && !p->shown) return;
  p->shown = 1;
  fprintf(stderr, "\rkiln: compiled %d/%d kernels in %.1f s (%s %s)\033[K", done, total, t / 1e3, job->arch,
          job->symbol);
  if (done == total) fprintf(stderr, "\n");
  fflush(stderr);
}

/* kiln.c.compile({ {name=, symbol=, source=, arch=, options={...}}, ... } [, threads])
 * -> { {cubin=, cache_hit=, compile_ms=, key=}, ... }; the first failure is raised. */
static int l_compile(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int threads = (int)luaL_optinteger(L, 2, 0);
  int n = (int)luaL_len(L, 1);
  kiln_err e = {0};
  kiln_jit_policy policy;
  if (kiln_jit_policy_from_env(&policy, &e) != 0) return raise_err(L, &e);
  kiln_compile_job *jobs = lua_newuserdatauv(L, sizeof *jobs * (n ? n : 1), 0);
  memset(jobs, 0, sizeof *jobs * (n ? n : 1));
  int opts_total = 0;
  for (int i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    lua_getfield(L, -1, "options");
    opts_total += lua_istable(L, -1) ? (int)luaL_len(L, -1) : 0;
    lua_pop(L, 2);
  }
  const char **opts = lua_newuserdatauv(L, sizeof *opts * (opts_total ? opts_total : 1), 0);
  int used = 0;
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    int t = lua_gettop(L);
    kiln_compile_job *j = &jobs[i];
    j->symbol = field_string(L, t, "symbol", 1);
    j->name = field_string(L, t, "name", 0);
    j->source = field_string(L, t, "source", 1);
    j->arch = field_string(L, t, "arch", 1);
    lua_getfield(L, t, "options");
    j->opts = opts + used;
    if (lua_istable(L, -1)) {
      int m = (int)luaL_len(L, -1);
      for (int k = 1; k <= m; k++) {
        lua_geti(L, -1, k);
        opts[used++] = lua_tostring(L, -1);
        lua_pop(L, 1);
        j->nopts++;
      }
    }
    lua_pop(L, 2);
  }
  kiln_cache *cache = NULL;
  if (kiln_cache_open(NULL, &cache, &e) != 0) return raise_err(L, &e);
  progress_state progress = {kiln_now_ms(), 0};
  kiln_compile_set_progress(isatty(fileno(stderr)) ? show_progress : NULL, &progress);
  int rc = kiln_compile_jobs(cache, jobs, n, policy, threads, &e);
  kiln_compile_set_progress(NULL, NULL);
  if (progress.shown && rc != 0) fprintf(stderr, "\n");
  kiln_cache_close(cache);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    kiln_compile_job *j = &jobs[i];
    lua_createtable(L, 0, 4);
    if (j->cubin) lua_pushlstring(L, j->cubin, j->size);
    else lua_pushnil(L);
    lua_setfield(L, -2, "cubin");
    lua_pushboolean(L, j->cache_hit);
    lua_setfield(L, -2, "cache_hit");
    lua_pushnumber(L, j->compile_ms);
    lua_setfield(L, -2, "compile_ms");
    lua_pushstring(L, j->key);
    lua_setfield(L, -2, "key");
    if (j->failed) {
      lua_pushstring(L, j->err.code ? j->err.code : "E_INTERNAL");
      lua_setfield(L, -2, "err_code");
      lua_pushstring(L, j->err.msg);
      lua_setfield(L, -2, "err_msg");
    }
    lua_seti(L, -2, i + 1);
    free(j->cubin);
    j->cubin = NULL;
  }
  if (rc != 0) return raise_err(L, &e);
  return 1;
}

static void print_bad(void *ctx, const char *path, const char *problem) {
  int *count = ctx;
  (*count)++;
  printf("bad entry %s: %s\n", path, problem);
}

/* kiln.c.cache_command(sub, json) -> exit status; prints what it finds. */
static int l_cache_command(lua_State *L) {
  const char *sub = luaL_checkstring(L, 1);
  int json = lua_toboolean(L, 2);
  kiln_err e = {0};
  kiln_cache *c = NULL;
  if (kiln_cache_open(NULL, &c, &e) != 0) return raise_err(L, &e);
  int rc = 0;
  if (strcmp(sub, "path") == 0) {
    printf("%s\n", kiln_cache_root(c));
  } else if (strcmp(sub, "stat") == 0) {
    kiln_cache_stats st;
    if (kiln_cache_stat(c, &st, &e) != 0) rc = -1;
    else if (json)
      printf("{\"root\": \"%s\", \"entries\": %ld, \"bytes\": %llu, \"maxsize\": %llu}\n", kiln_cache_root(c),
             st.entries, st.bytes, kiln_cache_maxsize(c));
    else
      printf("root: %s\nentries: %ld\nbytes: %llu\nmaxsize: %llu%s\n", kiln_cache_root(c), st.entries, st.bytes,
             kiln_cache_maxsize(c), kiln_cache_maxsize(c) ? "" : " (unbounded)");
  } else if (strcmp(sub, "verify") == 0) {
    int bad = 0;
    kiln_cache_stats st;
    if (kiln_cache_stat(c, &st, &e) != 0 || kiln_cache_verify(c, 1, print_bad, &bad, &e) < 0) rc = -1;
    else {
      printf("%ld entr%s checked, %d bad%s\n", st.entries, st.entries == 1 ? "y" : "ies", bad,
             bad ? " (removed, so that they are compiled again)" : "");
      if (bad) rc = 1;
    }
  } else if (strcmp(sub, "clear") == 0) {
    int n = kiln_cache_clear(c, &e);
    if (n < 0) rc = -1;
    else printf("removed %d entr%s\n", n, n == 1 ? "y" : "ies");
  } else if (strcmp(sub, "gc") == 0) {
    unsigned long long freed = 0, max = kiln_cache_maxsize(c);
    if (!max) {
      kiln_cache_close(c);
      return kiln_host_raise(L, "E_USAGE", "cache gc needs KILN_CACHE_MAXSIZE (e.g. 2G)");
    }
    if (kiln_cache_gc(c, max, &freed, &e) != 0) rc = -1;
    else printf("freed %llu bytes\n", freed);
  } else {
    kiln_cache_close(c);
    return kiln_host_raise(L, "E_USAGE", "unknown cache subcommand '%s' (path, stat, verify, clear, gc)", sub);
  }
  kiln_cache_close(c);
  if (rc < 0) return raise_err(L, &e);
  lua_pushinteger(L, rc);
  return 1;
}

/* kiln.c.cache_why({symbol=, source=, arch=, options={}}) -> report text: is this kernel
 * cached, and if not, which key parts differ from the entries of the same symbol and arch. */
static int l_cache_why(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  kiln_err e = {0};
  char nvrtc_version[32];
  if (kiln_compile_nvrtc_version(nvrtc_version, sizeof nvrtc_version, 1, &e) != 0) return raise_err(L, &e);
  const char *opts[64];
  kiln_cache_keyparts kp = {.kiln_version = KILN_VERSION, .nvrtc_version = nvrtc_version,
                            .arch = field_string(L, 1, "arch", 1), .symbol = field_string(L, 1, "symbol", 1),
                            .source = field_string(L, 1, "source", 1), .opts = opts};
  lua_getfield(L, 1, "options");
  if (lua_istable(L, -1)) {
    for (int k = 1; k <= (int)luaL_len(L, -1) && kp.nopts < 64; k++) {
      lua_geti(L, -1, k);
      opts[kp.nopts++] = lua_tostring(L, -1);
      lua_pop(L, 1);
    }
  }
  kiln_cache *c = NULL;
  if (kiln_cache_open(NULL, &c, &e) != 0) return raise_err(L, &e);
  char *report = NULL;
  int rc = kiln_cache_why(c, &kp, &report, &e);
  kiln_cache_close(c);
  if (rc < 0) return raise_err(L, &e);
  lua_pushstring(L, report ? report : "");
  free(report);
  return 1;
}

/* kiln.c.pack_build({ {manifest=JSON, archs={...}, images={[arch]={[kernel]=cubin}}}, ... })
 * -> the pack's bytes. */
static int l_pack_build(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  kiln_err e = {0};
  kiln_pack_writer *w = kiln_pack_writer_new();
  if (!w) return kiln_host_raise(L, "E_PACK", "out of memory");
  int nplans = (int)luaL_len(L, 1), rc = 0;
  for (int p = 1; p <= nplans && rc == 0; p++) {
    lua_geti(L, 1, p);
    int t = lua_gettop(L);
    const char *manifest = field_string(L, t, "manifest", 1);
    lua_getfield(L, t, "archs");
    int narch = (int)luaL_len(L, -1);
    const char *archs[16];
    if (narch > 16) narch = 16;
    for (int a = 0; a < narch; a++) {
      lua_geti(L, -1, a + 1);
      archs[a] = lua_tostring(L, -1);
      lua_pop(L, 1);
    }
    lua_getfield(L, t, "images");
    lua_geti(L, -1, 1);
    int nkernels = lua_istable(L, -1) ? (int)luaL_len(L, -1) : 0;
    lua_pop(L, 1);
    kiln_blob *images = calloc((size_t)(nkernels * narch) + 1, sizeof *images);
    for (int a = 0; a < narch && images; a++) {
      lua_geti(L, -1, a + 1);
      for (int k = 0; k < nkernels; k++) {
        lua_geti(L, -1, k + 1);
        size_t n = 0;
        images[k * narch + a].data = lua_tolstring(L, -1, &n);
        images[k * narch + a].size = n;
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
    }
    rc = images ? kiln_pack_writer_add_plan(w, manifest, archs, narch, images, &e)
                : kiln_err_set(&e, "E_PACK", "out of memory");
    free(images);
    lua_settop(L, t - 1);
  }
  void *data = NULL;
  size_t size = 0;
  if (rc == 0) rc = kiln_pack_writer_to_memory(w, &data, &size, &e);
  kiln_pack_writer_free(w);
  if (rc != 0) return raise_err(L, &e);
  lua_pushlstring(L, data, size);
  free(data);
  return 1;
}

/* kiln.c.emit_c(dir, name, pack_bytes) */
static int l_emit_c(lua_State *L) {
  size_t n;
  const char *dir = luaL_checkstring(L, 1), *name = luaL_checkstring(L, 2);
  const char *pack = luaL_checklstring(L, 3, &n);
  kiln_err e = {0};
  if (kiln_emit_c(dir, name, pack, n, &e) != 0) return raise_err(L, &e);
  return 0;
}

/* kiln.c.pack_command("inspect"|"verify", path) -> exit status */
static int l_pack_command(lua_State *L) {
  const char *sub = luaL_checkstring(L, 1), *path = luaL_checkstring(L, 2);
  kiln_err e = {0};
  int rc = strcmp(sub, "inspect") == 0 ? kiln_pack_inspect(path, stdout, &e) : kiln_pack_verify(path, stdout, &e);
  if (rc != 0) return raise_err(L, &e);
  lua_pushinteger(L, 0);
  return 1;
}

/* kiln.c.device_arch() -> "sm_90a", "NVIDIA H200" */
static int l_device_arch(lua_State *L) {
  char arch[32], name[256];
  kiln_err e = {0};
  if (kiln_run_device_arch(arch, sizeof arch, name, sizeof name, &e) != 0) return raise_err(L, &e);
  lua_pushstring(L, arch);
  lua_pushstring(L, name);
  return 2;
}

/* kiln.c.run{packs={bytes, ...}, graph=, instance=, dims={NAME=N}, check=, bench=, iters=,
 * seed=, quiet=, ranges=} -> {{mismatched_outputs=, median_ms=, samples=, replays=, bytes=}, ...}:
 * every pack a candidate plan of one graph instance, run on the same inputs. */
static int l_run(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  kiln_run_opts o = {0};
  enum { MAX_PACKS = 256 };
  const void *packs[MAX_PACKS];
  size_t sizes[MAX_PACKS];
  lua_getfield(L, 1, "packs");
  luaL_checktype(L, -1, LUA_TTABLE);
  for (lua_Integer i = 1; i <= (lua_Integer)lua_rawlen(L, -1); i++) {
    if (o.npacks == MAX_PACKS) return luaL_error(L, "kiln.c.run: more than %d packs", MAX_PACKS);
    lua_rawgeti(L, -1, i);
    packs[o.npacks] = luaL_checklstring(L, -1, &sizes[o.npacks]);
    o.npacks++;
    lua_pop(L, 1); /* the string stays alive in the packs table */
  }
  lua_pop(L, 1);
  o.packs = packs;
  o.pack_sizes = sizes;
  o.graph = field_string(L, 1, "graph", 1);
  o.instance = field_string(L, 1, "instance", 0);
  const char *names[64];
  int64_t values[64];
  lua_getfield(L, 1, "dims");
  if (lua_istable(L, -1)) {
    lua_pushnil(L);
    while (lua_next(L, -2) && o.ndims < 64) {
      names[o.ndims] = lua_tostring(L, -2);
      values[o.ndims++] = (int64_t)lua_tointeger(L, -1);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  o.dim_names = names;
  o.dim_values = values;
  lua_getfield(L, 1, "check");
  o.check = lua_toboolean(L, -1);
  lua_getfield(L, 1, "bench");
  o.bench = lua_toboolean(L, -1);
  lua_getfield(L, 1, "iters");
  o.iters = (int)lua_tointeger(L, -1);
  lua_getfield(L, 1, "seed");
  o.seed = (uint64_t)lua_tointeger(L, -1);
  lua_getfield(L, 1, "quiet");
  o.quiet = lua_toboolean(L, -1);
  lua_pop(L, 5);
  kiln_run_range ranges[64];
  lua_getfield(L, 1, "ranges");
  for (lua_Integer i = 1; lua_istable(L, -1) && i <= (lua_Integer)lua_rawlen(L, -1) && o.nranges < 64; i++) {
    lua_rawgeti(L, -1, i);
    kiln_run_range *r = &ranges[o.nranges++];
    lua_getfield(L, -1, "uid");
    lua_getfield(L, -2, "lo");
    lua_getfield(L, -3, "hi");
    lua_getfield(L, -4, "kind");
    r->uid = lua_tointeger(L, -4), r->lo = lua_tointeger(L, -3), r->hi = lua_tointeger(L, -2);
    r->kind = (int)lua_tointeger(L, -1);
    lua_pop(L, 5);
  }
  lua_pop(L, 1);
  o.ranges = ranges;
  o.out = stdout;
  fflush(stdout);
  kiln_run_result r[MAX_PACKS];
  kiln_err e = {0};
  if (kiln_run(&o, r, &e) != 0) return raise_err(L, &e);
  fflush(stdout);
  lua_createtable(L, o.npacks, 0);
  for (int k = 0; k < o.npacks; k++) {
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, r[k].mismatched_outputs);
    lua_setfield(L, -2, "mismatched_outputs");
    lua_pushnumber(L, r[k].median_ms);
    lua_setfield(L, -2, "median_ms");
    lua_pushinteger(L, r[k].samples);
    lua_setfield(L, -2, "samples");
    lua_pushinteger(L, r[k].replays);
    lua_setfield(L, -2, "replays");
    lua_pushnumber(L, r[k].bytes);
    lua_setfield(L, -2, "bytes");
    lua_rawseti(L, -2, k + 1);
  }
  return 1;
}

/* kiln.c.env_report(json) -> 0; prints kiln env. */
static int l_env_report(lua_State *L) {
  kiln_err e = {0};
  if (kiln_env_report(stdout, lua_toboolean(L, 1), &e) != 0) return raise_err(L, &e);
  lua_pushinteger(L, 0);
  return 1;
}

/* kiln.c.env_json() -> the environment report of `kiln env --json`, as JSON text */
static int l_env_json(lua_State *L) {
  kiln_err e = {0};
  char *text = kiln_env_json(&e);
  if (!text) return raise_err(L, &e);
  lua_pushstring(L, text);
  free(text);
  return 1;
}

/* kiln.c.hash(text) -> 32 hex digits, the XXH3 128-bit hash of text (plans.lock's keys) */
static int l_hash(lua_State *L) {
  size_t n;
  const char *text = luaL_checklstring(L, 1, &n);
  XXH128_hash_t h = XXH3_128bits(text, n);
  char hex[33];
  snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
  lua_pushstring(L, hex);
  return 1;
}

/* kiln.c.list_dir(path) -> { name, ... } sorted (no "." or ".."), or nil, message */
static int l_list_dir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct dirent **names = NULL;
  int n = scandir(path, &names, NULL, alphasort);
  if (n < 0) {
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: %s", path, strerror(errno));
    return 2;
  }
  lua_createtable(L, n, 0);
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (strcmp(names[i]->d_name, ".") != 0 && strcmp(names[i]->d_name, "..") != 0) {
      lua_pushstring(L, names[i]->d_name);
      lua_rawseti(L, -2, ++k);
    }
    free(names[i]);
  }
  free(names);
  return 1;
}

/* kiln.c.ptx_compilers() -> { nvptxcompiler = version, ptxas = path, nvjitlink = path }: what
 * can compile PTX modules, kiln's PTX compiler library and NVRTC's toolkit (any may be absent). */
static int l_ptx_compilers(lua_State *L) {
  char path[PATH_MAX];
  lua_newtable(L);
  if (kiln_ptxas_lib_probe(path, sizeof path) == 0) {
    lua_pushstring(L, kiln_ptxas_lib_version());
    lua_setfield(L, -2, "nvptxcompiler");
  }
  if (kiln_ptxas_exe_probe(path, sizeof path) == 0) {
    lua_pushstring(L, path);
    lua_setfield(L, -2, "ptxas");
  }
  if (kiln_ptxas_probe(path, sizeof path) == 0) {
    lua_pushstring(L, path);
    lua_setfield(L, -2, "nvjitlink");
  }
  return 1;
}

void kiln_primitives_register(lua_State *L) {
  static const luaL_Reg fns[] = {{"compile", l_compile}, {"cache_command", l_cache_command},
                                 {"env_report", l_env_report}, {"cache_why", l_cache_why},
                                 {"pack_build", l_pack_build}, {"emit_c", l_emit_c},
                                 {"pack_command", l_pack_command}, {"device_arch", l_device_arch},
                                 {"run", l_run}, {"ptx_compilers", l_ptx_compilers},
                                 {"env_json", l_env_json}, {"hash", l_hash}, {"list_dir", l_list_dir}, {NULL, NULL}};
  kiln_host_register(L, fns);
}
