/* kiln as a library: the front end in a private Lua state, called like `kiln build`. */
#include "jit.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "luahost.h"
#include "primitives.h"

/* Keeps typed error tables; adds a traceback to anything else. */
static int on_error(lua_State *L) {
  if (lua_istable(L, 1)) return 1;
  luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

static void push_strings(lua_State *L, const char *const *list, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, list[i]);
    lua_seti(L, -2, i + 1);
  }
}

int kiln_jit_build(const char *spec_path, const char *const *archs, int narchs, const char *const *sets,
                   int nsets, void **pack, size_t *size, kiln_err *e) {
  if (!spec_path || !pack || !size || narchs <= 0 || !archs)
    return kiln_err_set(e, "E_USAGE", "kiln_jit_build needs a spec path, at least one arch and outputs");
  *pack = NULL;
  *size = 0;
  lua_State *L = kiln_host_open(e);
  if (!L) return -1;
  kiln_primitives_register(L);
  int rc = 0;
  lua_pushcfunction(L, on_error);
  int handler = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushstring(L, "kiln.jit");
  if (lua_pcall(L, 1, 1, handler) == LUA_OK) {
    lua_getfield(L, -1, "build");
    lua_pushstring(L, spec_path);
    push_strings(L, archs, narchs);
    push_strings(L, sets, sets ? nsets : 0);
    if (lua_pcall(L, 3, 1, handler) == LUA_OK) {
      size_t n;
      const char *bytes = lua_tolstring(L, -1, &n);
      if (!bytes || !(*pack = malloc(n ? n : 1))) {
        rc = kiln_err_set(e, "E_IO", "out of memory for the pack");
      } else {
        memcpy(*pack, bytes, n);
        *size = n;
      }
      kiln_host_close(L);
      L = NULL;
    }
  }
  if (L) {
    if (rc == 0) {
      /* a typed error prints as "FILE:LINE: CODE: message" through its __tostring */
      const char *code = "E_INTERNAL";
      if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "code");
        if (lua_isstring(L, -1)) code = lua_tostring(L, -1);
        lua_pop(L, 1);
      }
      static const char *codes[] = {"E_USAGE", "E_IO", "E_SYNTAX", "E_SPEC", "E_SANDBOX", "E_LIMIT",
                                    "E_UNKNOWN_OP", "E_PORT", "E_ATTR", "E_SHAPE", "E_DTYPE", "E_JSON",
                                    "E_JSON_VERSION", "E_UID", "E_DANGLING", "E_CYCLE", "E_NO_ENGINE",
                                    "E_NVRTC", "E_CACHE_MISS", "E_CACHE", "E_CUDA", "E_PACK", "E_NUMERIC"};
      const char *stable = "E_INTERNAL"; /* e->code must outlive the Lua state */
      for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strcmp(codes[i], code) == 0) stable = codes[i];
      rc = kiln_err_set(e, stable, "%s", luaL_tolstring(L, -1, NULL));
    }
    kiln_host_close(L);
  }
  return rc;
}
