/* kiln compiler: Lua state, sandbox budgets, embedded-module loading, kiln.c primitives. */
#include "luahost.h"
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "embedded.h"
#include "luajson.h"
#include "pack.h"
#include "kiln.h"  /* KILN_VERSION */

/* Budgets apply while spec code runs; trusted modules run unbounded. */
typedef struct host_state {
  size_t bytes, byte_limit;       /* byte_limit 0: unlimited */
  long long instr_left;           /* instructions left in the spec budget */
  int budget_on, exhausted;
} host_state;

#define HOOK_EVERY 1000

static void *bounded_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  host_state *hs = ud;
  if (!ptr) osize = 0;
  if (nsize == 0) {
    free(ptr);
    hs->bytes -= osize;
    return NULL;
  }
  if (hs->byte_limit && nsize > osize && hs->bytes + (nsize - osize) > hs->byte_limit) return NULL;
  void *p = realloc(ptr, nsize);
  if (p) hs->bytes += nsize - osize;
  return p;
}

static host_state *get_state(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return ud;
}

int kiln_host_raise(lua_State *L, const char *code, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lua_createtable(L, 0, 2);
  lua_pushstring(L, code);
  lua_setfield(L, -2, "code");
  lua_pushstring(L, msg);
  lua_setfield(L, -2, "msg");
  /* locate the error at the innermost frame running spec code (chunk names "@path") */
  lua_Debug ar;
  for (int level = 0; lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar) || ar.source[0] != '@' || ar.currentline <= 0) continue;
    lua_pushstring(L, ar.source + 1);
    lua_setfield(L, -2, "file");
    lua_pushinteger(L, ar.currentline);
    lua_setfield(L, -2, "line");
    break;
  }
  /* errors.lua installs the metatable that prints and locates the error */
  if (luaL_getmetatable(L, "kiln.error") != LUA_TNIL) lua_setmetatable(L, -2);
  else lua_pop(L, 1);
  return lua_error(L);
}

static void budget_hook(lua_State *L, lua_Debug *ar) {
  host_state *hs = get_state(L);
  if (!hs->budget_on) return;
  if (hs->exhausted) {
    /* spent: every instruction of spec code (chunks "@path") raises again, so a pcall in a
       loop cannot swallow the error; kiln's own code runs on to switch the budget off */
    if (lua_getinfo(L, "S", ar) && ar->source[0] == '@')
      kiln_host_raise(L, "E_LIMIT", "spec exceeded its instruction budget (KILN_SPEC_MAX_INSTR); infinite loop?");
    return;
  }
  hs->instr_left -= HOOK_EVERY;
  if (hs->instr_left < 0) {
    hs->exhausted = 1;
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
    kiln_host_raise(L, "E_LIMIT", "spec exceeded its instruction budget (KILN_SPEC_MAX_INSTR); infinite loop?");
  }
}

/* kiln.c.budget(instructions, bytes): starts the spec budget; budget(0) stops it. */
static int l_budget(lua_State *L) {
  host_state *hs = get_state(L);
  lua_Integer n = luaL_checkinteger(L, 1);
  lua_Integer bytes = luaL_optinteger(L, 2, 0);
  if (n <= 0) {
    hs->budget_on = 0;
    hs->byte_limit = 0;
    lua_sethook(L, NULL, 0, 0);
    lua_pushboolean(L, hs->exhausted);
    hs->exhausted = 0;
    return 1;
  }
  hs->instr_left = n;
  hs->budget_on = 1;
  hs->exhausted = 0;
  hs->byte_limit = bytes > 0 ? hs->bytes + (size_t)bytes : 0;
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
  return 0;
}

int kiln_host_read_embedded(const char *name, char **data, size_t *size) {
  const char *override = NULL, *rel = NULL;
  if (strncmp(name, "lua/", 4) == 0) override = getenv("KILN_LUA_PATH"), rel = name + 4;
  else if (strncmp(name, "templates/", 10) == 0) override = getenv("KILN_TEMPLATE_PATH"), rel = name + 10;
  if (override && *override) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", override, rel);
    if (kiln_read_file(path, data, size) == 0) return 0;
  }
  for (const kiln_embedded_file *f = kiln_embedded_files; f->name; f++) {
    if (strcmp(f->name, name) != 0) continue;
    *data = malloc(f->size + 1);
    if (!*data) return -1;
    memcpy(*data, f->data, f->size + 1);
    *size = f->size;
    return 0;
  }
  return -1;
}

/* Whether KILN_LUA_PATH provides this module (then it is loaded as source text only). */
static int from_override(const char *name) {
  const char *dir = getenv("KILN_LUA_PATH");
  if (!dir || !*dir) return 0;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name + 4);
  return access(path, R_OK) == 0;
}

/* package.searchers entry: "kiln.x.y" -> lua/kiln/x/y.lua or lua/kiln/x/y/init.lua
 * (embedded, or under KILN_LUA_PATH). Nothing else is searched: kiln loads only itself. */
static int embedded_searcher(lua_State *L) {
  const char *mod = luaL_checkstring(L, 1);
  char base[512];
  int n = snprintf(base, sizeof base, "lua/%s", mod);
  if (n <= 0 || (size_t)n >= sizeof base - 16) return 0;
  for (char *p = base + 4; *p; p++)
    if (*p == '.') *p = '/';
  static const char *suffixes[] = {".lua", "/init.lua"};
  for (int i = 0; i < 2; i++) {
    char name[600], *src;
    size_t size;
    snprintf(name, sizeof name, "%s%s", base, suffixes[i]);
    if (kiln_host_read_embedded(name, &src, &size) != 0) continue;
    char chunk[620];
    snprintf(chunk, sizeof chunk, "=%s", name + 4);
    /* embedded modules are precompiled bytecode (built with kiln); an override from
     * KILN_LUA_PATH is loaded as source text only */
    int rc = luaL_loadbufferx(L, src, size, chunk, from_override(name) ? "t" : "b");
    free(src);
    if (rc != LUA_OK) return lua_error(L);
    lua_pushstring(L, name);
    return 2;
  }
  lua_pushfstring(L, "no kiln module '%s'", mod);
  return 1;
}

/* kiln.c.template(name) -> text of templates/<name>. */
static int l_template(lua_State *L) {
  const char *tname = luaL_checkstring(L, 1);
  char name[512], *src;
  size_t size;
  snprintf(name, sizeof name, "templates/%s", tname);
  if (kiln_host_read_embedded(name, &src, &size) != 0)
    return kiln_host_raise(L, "E_IO", "no template '%s'", tname);
  lua_pushlstring(L, src, size);
  free(src);
  return 1;
}

/* kiln.c.read_file(path) -> text | nil, message */
static int l_read_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  char *data;
  size_t size;
  if (kiln_read_file(path, &data, &size) != 0) {
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: %s", path, strerror(errno ? errno : EIO));
    return 2;
  }
  lua_pushlstring(L, data, size);
  free(data);
  return 1;
}

/* kiln.c.write_file(path, text): temp file + rename so readers never see half a file. */
static int l_write_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t n;
  const char *text = luaL_checklstring(L, 2, &n);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return kiln_host_raise(L, "E_IO", "cannot write %s: %s", path, strerror(errno));
  int bad = fwrite(text, 1, n, f) != n;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    remove(tmp);
    return kiln_host_raise(L, "E_IO", "cannot write %s: %s", path, strerror(errno));
  }
  return 0;
}

/* kiln.c.append_line(path, text): text and a newline appended under an exclusive lock, so
 * lines of processes appending at once never interleave. */
static int l_append_line(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t n;
  const char *text = luaL_checklstring(L, 2, &n);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return kiln_host_raise(L, "E_IO", "cannot append to %s: %s", path, strerror(errno));
  int bad = flock(fd, LOCK_EX) != 0;
  for (size_t done = 0; !bad && done < n + 1;) {
    ssize_t w = done < n ? write(fd, text + done, n - done) : write(fd, "\n", 1);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) bad = 1;
    else done += (size_t)w;
  }
  int err = errno;
  close(fd); /* releases the lock */
  if (bad) return kiln_host_raise(L, "E_IO", "cannot append to %s: %s", path, strerror(err));
  return 0;
}

/* kiln.c.realpath(path) -> the absolute path | nil */
static int l_realpath(lua_State *L) {
  char buf[PATH_MAX];
  if (!realpath(luaL_checkstring(L, 1), buf)) {
    luaL_pushfail(L);
    return 1;
  }
  lua_pushstring(L, buf);
  return 1;
}

static int l_mkdir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  if (mkdir(path, 0777) != 0 && errno != EEXIST)
    return kiln_host_raise(L, "E_IO", "cannot create directory %s: %s", path, strerror(errno));
  return 0;
}

static int l_clock_ms(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, ts.tv_sec * 1e3 + ts.tv_nsec / 1e6);
  return 1;
}

static int l_getenv(lua_State *L) {
  const char *v = getenv(luaL_checkstring(L, 1));
  if (v) lua_pushstring(L, v);
  else lua_pushnil(L);
  return 1;
}

static const luaL_Reg host_fns[] = {
    {"budget", l_budget},       {"template", l_template}, {"read_file", l_read_file},
    {"write_file", l_write_file}, {"mkdir", l_mkdir},     {"clock_ms", l_clock_ms},
    {"append_line", l_append_line}, {"realpath", l_realpath},
    {"getenv", l_getenv},       {NULL, NULL}};

int kiln_host_on_error(lua_State *L) {
  if (lua_istable(L, 1)) return 1;
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
  return 1;
}

void kiln_host_register(lua_State *L, const luaL_Reg *fns) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "kiln.c");
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 2);
}

/* Steps a pattern match may take at most: every variable-length item may retry over the
 * whole subject, from every start position. */
static double pattern_cost(const char *p, size_t plen, size_t slen, int plain) {
  double n = (double)slen + 1, cost = (plen && p[0] == '^' && !plain ? 1 : n) * (double)(plen + 1);
  for (size_t i = 0; i < plen && !plain; i++) {
    if (p[i] == '%') {
      if (i + 1 < plen && p[i + 1] == 'b') cost *= n;
      i++;
    } else if (p[i] == '[') {
      if (++i < plen && p[i] == '^') i++;
      do { if (i < plen && p[i] == '%') i++; i++; } while (i < plen && p[i] != ']');
    } else if (p[i] == '*' || p[i] == '+' || p[i] == '-') {
      cost *= n;
    } else if (p[i] == '?') {
      cost *= 2;
    }
  }
  return cost;
}

/* Whether the caller is kiln's own Lua code (chunks "=name"), which the budget trusts. */
static int trusted_caller(lua_State *L) {
  lua_Debug ar;
  return lua_getstack(L, 1, &ar) && lua_getinfo(L, "S", &ar) && ar.what[0] == 'L' && ar.source[0] == '=';
}

/* How a library function's C work grows with its arguments. */
enum { COST_LINEAR, COST_FIND, COST_MATCH, COST_SORT, COST_REP };

/* Size of one argument: a string's bytes or a table's border. */
static double arg_size(lua_State *L, int i) {
  if (lua_type(L, i) == LUA_TSTRING) return (double)lua_rawlen(L, i);
  if (lua_type(L, i) == LUA_TTABLE) return (double)lua_rawlen(L, i);
  return 0;
}

static double call_cost(lua_State *L, int kind) {
  double n = 1;
  for (int i = 1, top = lua_gettop(L); i <= top; i++) n += arg_size(L, i);
  size_t slen, plen;
  switch (kind) {
  case COST_FIND:
  case COST_MATCH: {
    if (!lua_isstring(L, 1) || !lua_isstring(L, 2)) return n;
    lua_tolstring(L, 1, &slen);
    const char *p = lua_tolstring(L, 2, &plen);
    return pattern_cost(p, plen, slen, kind == COST_FIND && lua_toboolean(L, 4));
  }
  case COST_SORT: return n * (log2(n) + 1) * 4;
  case COST_REP: return n * (lua_isinteger(L, 2) && lua_tointeger(L, 2) > 0 ? (double)lua_tointeger(L, 2) : 1);
  default: return n;
  }
}

/* Library functions run in C, where the count hook never fires: while a spec runs, each
 * call is charged to the instruction budget up front by the size of its arguments. */
static int charged_call(lua_State *L) {
  host_state *hs = get_state(L);
  if (hs->budget_on && !trusted_caller(L)) {
    double cost = call_cost(L, (int)lua_tointeger(L, lua_upvalueindex(2)));
    if (hs->exhausted || cost > (double)hs->instr_left) {
      hs->exhausted = 1;
      lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
      return kiln_host_raise(L, "E_LIMIT", "spec exceeded its instruction budget (KILN_SPEC_MAX_INSTR) in a library call");
    }
    hs->instr_left -= (long long)cost;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int kind_of(const char *lib, const char *name) {
  if (strcmp(lib, LUA_STRLIBNAME) == 0) {
    if (strcmp(name, "find") == 0) return COST_FIND;
    if (strcmp(name, "match") == 0 || strcmp(name, "gmatch") == 0 || strcmp(name, "gsub") == 0) return COST_MATCH;
    if (strcmp(name, "rep") == 0) return COST_REP;
  }
  if (strcmp(lib, LUA_TABLIBNAME) == 0 && strcmp(name, "sort") == 0) return COST_SORT;
  return COST_LINEAR;
}

/* Wraps every function of one library table in charged_call. */
static int charge_library(lua_State *L, const char *lib) {
  if (lua_getglobal(L, lib) != LUA_TTABLE) { lua_pop(L, 1); return -1; }
  lua_newtable(L);  /* the wrappers, set after the walk so it never sees a changed table */
  for (lua_pushnil(L); lua_next(L, -3);) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_iscfunction(L, -1)) {
      lua_pushinteger(L, kind_of(lib, lua_tostring(L, -2)));
      lua_pushcclosure(L, charged_call, 2);
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_settable(L, -4);
    } else {
      lua_pop(L, 1);
    }
  }
  for (lua_pushnil(L); lua_next(L, -2);) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_settable(L, -5);
  }
  lua_pop(L, 2);
  return 0;
}

static int charge_libraries(lua_State *L) {
  return charge_library(L, LUA_STRLIBNAME) || charge_library(L, LUA_TABLIBNAME) || charge_library(L, LUA_UTF8LIBNAME);
}

/* Every string reaches the string metatable: guard it, and give strings a copy of the string
 * library without dump, so no spec can rewrite string.format for the whole compiler. */
static int guard_string_metatable(lua_State *L) {
  lua_pushliteral(L, "");
  if (!lua_getmetatable(L, -1)) { lua_pop(L, 1); return -1; }
  lua_newtable(L);
  if (lua_getglobal(L, LUA_STRLIBNAME) != LUA_TTABLE) { lua_pop(L, 4); return -1; }
  for (lua_pushnil(L); lua_next(L, -2);) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_settable(L, -5);
  }
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_setfield(L, -2, "__index");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 2);
  return 0;
}

lua_State *kiln_host_open(kiln_err *e) {
  host_state *hs = calloc(1, sizeof *hs);
  if (!hs) { kiln_err_set(e, "E_IO", "out of memory"); return NULL; }
  lua_State *L = lua_newstate(bounded_alloc, hs);
  if (!L) { free(hs); kiln_err_set(e, "E_IO", "cannot create the Lua state"); return NULL; }
  luaL_openlibs(L);
  if (charge_libraries(L) != 0 || guard_string_metatable(L) != 0) {
    kiln_host_close(L);
    kiln_err_set(e, "E_IO", "cannot guard the string metatable");
    return NULL;
  }
  /* kiln.c: the C primitives the front end calls */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_newtable(L);
  luaL_setfuncs(L, host_fns, 0);
  lua_pushstring(L, KILN_VERSION);
  lua_setfield(L, -2, "version");
  lua_pushstring(L, LUA_RELEASE);
  lua_setfield(L, -2, "lua_version");
  lua_pushinteger(L, KILN_PACK_MAX_SMS); /* SM counts the runtime's rules see at most */
  lua_setfield(L, -2, "max_sms");
  lua_setfield(L, -2, "kiln.c");
  lua_pop(L, 1);
  kiln_luajson_register(L);
  /* embedded modules only: the preload searcher, then ours */
  lua_getglobal(L, "package");
  lua_createtable(L, 2, 0);
  lua_getfield(L, -2, "searchers");
  lua_geti(L, -1, 1);
  lua_seti(L, -3, 1);
  lua_pop(L, 1);
  lua_pushcfunction(L, embedded_searcher);
  lua_seti(L, -2, 2);
  lua_setfield(L, -2, "searchers");
  lua_pop(L, 1);
  return L;
}

void kiln_host_close(lua_State *L) {
  if (!L) return;
  void *ud;
  lua_getallocf(L, &ud);
  lua_close(L);
  free(ud);
}
