/* libFuzzer harness: the spec loader, through the C entry `kiln check` uses (compiler/main.c:
 * a Lua host from kiln_host_open with the primitives registered, then kiln.cli's main). The
 * input is a spec: written to a temporary file and checked as `kiln check FILE` (graph
 * JSON, as FILE.json, when it starts with '{' or '['). Which of `check`, `check --json` and
 * `check --sm 80` runs is fixed by the input's bytes.
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

static void fuzz_hook(lua_State *L, lua_Debug *ar) {
  if (ar->event == LUA_HOOKLINE) {
    if (lua_getinfo(L, "S", ar) && ar->source[0] == '=') {
      uint32_t h = 2166136261u;
      for (const unsigned char *p = (const unsigned char *)ar->source; *p; p++) h = (h ^ *p) * 16777619u;
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

static void cleanup(void) {
  unlink(lua_path);
  unlink(json_path);
  if (dir[0]) rmdir(dir);
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
  uint32_t h = 2166136261u;
  for (size_t k = 0; k < size; k++) h = (h ^ data[k]) * 16777619u;
  const char *argv[4] = {"check", path, NULL, NULL};
  int argc = 2;
  if (h % 3 == 1) argv[argc++] = "--json";
  else if (h % 3 == 2) argv[argc++] = "--sm", argv[argc++] = "80";

  kiln_err e = {0};
  lua_State *L = kiln_host_open(&e);
  if (!L) abort();
  __wrap_lua_sethook(L, NULL, 0, 0);
  kiln_primitives_register(L);
  lua_pushcfunction(L, kiln_host_on_error);
  lua_getglobal(L, "require");
  lua_pushstring(L, "kiln.cli");
  if (lua_pcall(L, 1, 1, 1) != LUA_OK) {
    fprintf(stderr, "fuzz_spec: cannot load kiln.cli: %s\n", lua_tostring(L, -1));
    abort();
  }
  lua_getfield(L, -1, "main");
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
  fflush(stdout);
  kiln_host_close(L);
  unlink(path);
  return 0;
}
