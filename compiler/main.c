/* kiln: the compiler executable. Runs the Lua front end's CLI in a protected call and
 * turns a typed error into "kiln: error: ..." and an exit status (usage 2, failure 1). */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "luahost.h"
#include "primitives.h"
#include "run.h"

static int error_text(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

static int report(lua_State *L) {
  if (lua_istable(L, -1)) {
    lua_pushliteral(L, "code");
    lua_rawget(L, -2);
    const char *code = lua_tostring(L, -1);
    int usage = code && strcmp(code, "E_USAGE") == 0;
    lua_pop(L, 1);
    /* the error table's __tostring gives "FILE:LINE: CODE: message"; protected, as a
       metamethod may raise */
    lua_pushcfunction(L, error_text);
    lua_insert(L, -2);
    int ok = lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING;
    fprintf(stderr, "kiln: error: %s\n", ok ? lua_tostring(L, -1) : "(the error could not be printed)");
    lua_pop(L, 1);
    if (usage) fprintf(stderr, "kiln: run 'kiln --help' for usage\n");
    return usage ? 2 : 1;
  }
  fprintf(stderr, "kiln: internal error: %s\n", lua_tostring(L, -1));
  return 1;
}

int main(int argc, char **argv) {
  kiln_main_start_ms = kiln_now_ms();
  kiln_err e = {0};
  lua_State *L = kiln_host_open(&e);
  if (!L) {
    fprintf(stderr, "kiln: error: %s: %s\n", e.code, e.msg);
    return 1;
  }
  kiln_primitives_register(L);
  lua_pushcfunction(L, kiln_host_on_error);
  lua_getglobal(L, "require");
  lua_pushstring(L, "kiln.cli");
  int status = 0;
  if (lua_pcall(L, 1, 1, 1) != LUA_OK) {
    status = report(L);
  } else {
    lua_getfield(L, -1, "main");
    lua_createtable(L, argc, 0);
    for (int i = 1; i < argc; i++) {
      lua_pushstring(L, argv[i]);
      lua_seti(L, -2, i);
    }
    if (lua_pcall(L, 1, 1, 1) != LUA_OK) status = report(L);
    else status = (int)luaL_optinteger(L, -1, 0);
  }
  fflush(stdout);
  kiln_host_close(L);
  return status;
}
