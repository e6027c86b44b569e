/* kiln as a library: the front end in a private Lua state, called like `kiln build`. */
#include "jit.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "luahost.h"
#include "primitives.h"

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
  lua_pushcfunction(L, kiln_host_on_error);
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
      /* a typed error prints as "FILE:LINE: CODE: message" through its __tostring; its code
       * string is copied to the static one, as the state is closed below */
      const char *code = "E_INTERNAL";
      if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "code");
        if (lua_isstring(L, -1)) code = lua_tostring(L, -1);
        lua_pop(L, 1);
      }
      rc = kiln_err_set(e, kiln_err_code(code), "%s", luaL_tolstring(L, -1, NULL));
    }
    kiln_host_close(L);
  }
  return rc;
}
