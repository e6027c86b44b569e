/* libFuzzer harness: the spec loader, through `kiln check`'s Lua entry (kiln.cli's main, as
 * compiler/main.c calls it). The input is a spec: written to a temporary file and checked as
 * `kiln check FILE` (graph JSON, as FILE.json, when it starts with '{' or '['). Which of
 * `check`, `check --json` and `check --sm 80` runs is fixed by the input's bytes.
 *
 * One Lua host serves the whole run: kiln_host_open, the primitives and kiln.cli are loaded
 * once, and every input is a fresh spec load inside it, each behind its own sandbox membrane
 * (kiln.spec). That is the sandbox's contract put to work: a spec may change nothing but its
 * own graph. After every input the harness fingerprints what specs must not reach (every
 * table in package.loaded and the tables in their fields, the string metatable and the
 * string library behind it, the metatables of the other basic types) and aborts on any
 * change, so libFuzzer saves an escape as it saves a crash.
 *
 * The spec budget bounds time and memory: KILN_SPEC_MAX_INSTR and KILN_SPEC_MAX_MEM default
 * here to 5e6 instructions and 64 MB (the environment may set others).
 *
 * libFuzzer sees coverage of C code only, and most of the loader is Lua: a line hook maps
 * each line of kiln's own Lua modules (chunks "=kiln/...") that runs to one of libFuzzer's
 * extra counters, so new paths through the front end count as new coverage too (lines of
 * the spec itself do not: every new line would). The host's budget hook (luahost.c) is kept
 * working by wrapping lua_sethook at link time (-Wl,--wrap=lua_sethook): both run.
 *
 * A typed error ({code, msg}) is the loader doing its job. An untyped one, which `kiln`
 * prints as "kiln: internal error", is a bug in kiln's own Lua; with KILN_FUZZ_STRICT=1 the
 * harness aborts on it so that libFuzzer saves the input. */
#include <fcntl.h>
#include <lauxlib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "luahost.h"
#include "primitives.h"

/* ---- Lua line coverage as libFuzzer extra counters ---- */
#define NCOUNTERS 65536
__attribute__((section("__libfuzzer_extra_counters"))) static uint8_t lua_lines[NCOUNTERS];

static lua_Hook host_hook; /* the hook luahost.c asked for (the spec budget), and its mask */
static int host_mask;

void __real_lua_sethook(lua_State *L, lua_Hook f, int mask, int count);

/* runs on every line of Lua or every input: not itself instrumented (its branches are not
 * kiln's coverage) */
#define NOT_COVERED __attribute__((no_sanitize("coverage")))

/* FNV-1a over n bytes, from h (2166136261u to start) */
NOT_COVERED static uint32_t fnv1a(uint32_t h, const void *p, size_t n) {
  for (size_t k = 0; k < n; k++) h = (h ^ ((const unsigned char *)p)[k]) * 16777619u;
  return h;
}

NOT_COVERED static void fuzz_hook(lua_State *L, lua_Debug *ar) {
  if (ar->event == LUA_HOOKLINE) {
    if (lua_getinfo(L, "S", ar) && ar->source[0] == '=') {
      uint32_t h = fnv1a(2166136261u, ar->source, strlen(ar->source));
      h = (h ^ (uint32_t)ar->currentline) * 16777619u;
      uint8_t *c = &lua_lines[h % NCOUNTERS];
      if (*c < 255) (*c)++;
    }
    return;
  }
  if (host_hook && (host_mask & (1 << ar->event))) host_hook(L, ar);
}

/* luahost.c's lua_sethook calls land here: its hook runs from ours, next to the line hook. */
void __wrap_lua_sethook(lua_State *L, lua_Hook f, int mask, int count) {
  host_hook = f;
  host_mask = f ? mask : 0;
  __real_lua_sethook(L, fuzz_hook, host_mask | LUA_MASKLINE, f ? count : 0);
}

static char dir[4096], lua_path[4200], json_path[4200];
static int strict;
static lua_State *host; /* the one Lua host, with kiln.cli loaded */
static int main_ref;    /* kiln.cli's main, in the registry */

static void cleanup(void) {
  kiln_host_close(host);
  unlink(lua_path);
  unlink(json_path);
  if (dir[0]) rmdir(dir);
}

/* ---- what no spec may change: fingerprints of the shared tables ---- */
#define NSEEN 8192
static struct seen { const void *table; uint64_t hash; const char *root; } seen[NSEEN];
static const void *loaded; /* package.loaded: grows as kiln loads modules, by design */

NOT_COVERED static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* A value by identity: strings and numbers by content, the rest by address. */
NOT_COVERED static uint64_t value_hash(lua_State *L, int idx) {
  switch (lua_type(L, idx)) {
  case LUA_TSTRING: {
    size_t n;
    const char *p = lua_tolstring(L, idx, &n);
    return fnv1a(2166136261u, p, n);
  }
  case LUA_TNUMBER: {
    lua_Number x = lua_tonumber(L, idx);
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    return mix(bits, (uint64_t)lua_isinteger(L, idx));
  }
  case LUA_TBOOLEAN: return (uint64_t)lua_toboolean(L, idx) + 7;
  case LUA_TNIL: return 3;
  default: return mix((uint64_t)lua_type(L, idx), (uint64_t)(uintptr_t)lua_topointer(L, idx));
  }
}

/* The table at idx: its metatable and every raw field, order-free; with depth > 0 the
 * tables in its fields are hashed the same way one level down. */
NOT_COVERED static uint64_t table_hash(lua_State *L, int idx, int depth) {
  idx = lua_absindex(L, idx);
  uint64_t h = lua_getmetatable(L, idx) ? mix(11, (uint64_t)(uintptr_t)lua_topointer(L, -1)) : 5;
  if (h != 5) lua_pop(L, 1);
  for (lua_pushnil(L); lua_next(L, idx);) {
    uint64_t v = value_hash(L, -1);
    if (depth > 0 && lua_type(L, -1) == LUA_TTABLE && lua_topointer(L, -1) != loaded) v = mix(v, table_hash(L, -1, depth - 1));
    h += mix(value_hash(L, -2), v);
    lua_pop(L, 1);
  }
  return h;
}

/* Records the table at idx (first sight) or aborts if it changed since. */
static void check_table(lua_State *L, int idx, const char *root) {
  const void *t = lua_topointer(L, idx);
  uint64_t h = table_hash(L, idx, 1);
  size_t k = ((uintptr_t)t >> 4) % NSEEN;
  for (size_t probes = 0; probes < NSEEN; probes++, k = (k + 1) % NSEEN) {
    if (seen[k].table == t) {
      if (seen[k].hash == h) return;
      fprintf(stderr, "fuzz_spec: the input changed %s, which specs must not reach\n", seen[k].root);
      abort();
    }
    if (!seen[k].table) {
      seen[k] = (struct seen){t, h, strdup(root)};
      return;
    }
  }
  fprintf(stderr, "fuzz_spec: more than %d shared tables\n", NSEEN);
  abort();
}

/* Every module's table, the string metatable, and the metatables of values with none: a
 * table met for the first time (at start, or a module as it loads) is recorded as it is. */
static void snapshot_shared(lua_State *L) {
  char root[256];
  int top = lua_gettop(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  loaded = lua_topointer(L, -1);
  for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) {
    if (lua_type(L, -1) != LUA_TTABLE || lua_type(L, -2) != LUA_TSTRING) continue;
    snprintf(root, sizeof root, "package.loaded[\"%s\"]", lua_tostring(L, -2));
    check_table(L, -1, root);
  }
  lua_pushliteral(L, "");
  if (!lua_getmetatable(L, -1)) abort();
  check_table(L, -1, "the string metatable");
  lua_pushnil(L);
  lua_pushinteger(L, 0);
  lua_pushboolean(L, 0);
  lua_pushcfunction(L, kiln_host_on_error);
  for (int i = -4; i < 0; i++) {
    if (lua_getmetatable(L, i)) {
      fprintf(stderr, "fuzz_spec: the input gave %s values a metatable\n", luaL_typename(L, i - 1));
      abort();
    }
  }
  lua_settop(L, top);
}

/* The host, as compiler/main.c opens it, with kiln.cli's main kept in the registry. */
static void open_host(void) {
  kiln_err e = {0};
  host = kiln_host_open(&e);
  if (!host) {
    fprintf(stderr, "fuzz_spec: cannot open the Lua host: %s\n", e.msg);
    abort();
  }
  __wrap_lua_sethook(host, NULL, 0, 0);
  kiln_primitives_register(host);
  lua_pushcfunction(host, kiln_host_on_error);
  lua_getglobal(host, "require");
  lua_pushstring(host, "kiln.cli");
  if (lua_pcall(host, 1, 1, 1) != LUA_OK) {
    fprintf(stderr, "fuzz_spec: cannot load kiln.cli: %s\n", lua_tostring(host, -1));
    abort();
  }
  lua_getfield(host, -1, "main");
  main_ref = luaL_ref(host, LUA_REGISTRYINDEX);
  lua_settop(host, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setenv("KILN_SPEC_MAX_INSTR", "5000000", 0);
  setenv("KILN_SPEC_MAX_MEM", "67108864", 0);
  strict = getenv("KILN_FUZZ_STRICT") && strcmp(getenv("KILN_FUZZ_STRICT"), "1") == 0;
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/kiln-fuzz-spec.XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(dir)) {
    perror("fuzz_spec: mkdtemp");
    abort();
  }
  snprintf(lua_path, sizeof lua_path, "%s/spec.lua", dir);
  snprintf(json_path, sizeof json_path, "%s/graph.json", dir);
  /* a cache the loader never needs, kept away from the user's */
  char cache[4200];
  snprintf(cache, sizeof cache, "%s/cache", dir);
  setenv("KILN_CACHE_DIR", cache, 1);
  atexit(cleanup);
  /* `kiln check` prints the graph on stdout: not wanted thousands of times a second */
  int null = open("/dev/null", O_WRONLY);
  if (null >= 0) {
    fflush(stdout);
    dup2(null, 1);
    close(null);
  }
  open_host();
  snapshot_shared(host);
  return 0;
}

static int write_file(const char *path, const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int bad = fwrite(data, 1, size, f) != size;
  bad |= fclose(f) != 0;
  return bad ? -1 : 0;
}


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t i = 0;
  while (i < size && (data[i] == ' ' || data[i] == '\n' || data[i] == '\t' || data[i] == '\r')) i++;
  const char *path = i < size && (data[i] == '{' || data[i] == '[') ? json_path : lua_path;
  if (write_file(path, data, size) != 0) abort();
  uint32_t h = fnv1a(2166136261u, data, size);
  const char *argv[4] = {"check", path, NULL, NULL};
  int argc = 2;
  if (h % 3 == 1) argv[argc++] = "--json";
  else if (h % 3 == 2) argv[argc++] = "--sm", argv[argc++] = "80";

  lua_State *L = host;
  lua_pushcfunction(L, kiln_host_on_error);
  lua_rawgeti(L, LUA_REGISTRYINDEX, main_ref);
  lua_createtable(L, argc, 0);
  for (int a = 0; a < argc; a++) {
    lua_pushstring(L, argv[a]);
    lua_seti(L, -2, a + 1);
  }
  if (lua_pcall(L, 1, 1, 1) != LUA_OK && !lua_istable(L, -1)) {
    /* what main.c prints as "kiln: internal error: ..." */
    if (strict) {
      fprintf(stderr, "fuzz_spec: internal error: %s\n", lua_tostring(L, -1));
      abort();
    }
  }
  lua_settop(L, 0);
  fflush(stdout);
  unlink(path);
  /* this input's garbage goes now: libFuzzer's leak check compares mallocs and frees per input */
  lua_gc(L, LUA_GCCOLLECT);
  snapshot_shared(L);
  return 0;
}
