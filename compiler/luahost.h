/* kiln compiler: the embedded Lua 5.4 state that runs the front end. */
#ifndef KILN_LUAHOST_H
#define KILN_LUAHOST_H

#include <lauxlib.h>
#include <lua.h>
#include <stddef.h>

#include "err.h"

/* Opens a Lua state with the standard libraries, a bounded allocator, the instruction
 * budget hook, a searcher for the embedded (or KILN_LUA_PATH) modules, and the C
 * primitives in package.loaded["kiln.c"]. */
lua_State *kiln_host_open(kiln_err *e);
void kiln_host_close(lua_State *L);

/* Reads an embedded file ("lua/kiln/graph.lua", "templates/x.cuh"), honouring the
 * KILN_LUA_PATH / KILN_TEMPLATE_PATH directory overrides. *data is malloc'ed. */
int kiln_host_read_embedded(const char *name, char **data, size_t *size);

/* Raises a typed error (a {code=, msg=} table) in L; never returns. */
int kiln_host_raise(lua_State *L, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Message handler for lua_pcall: keeps typed error tables as they are, adds a traceback to
 * any other error. */
int kiln_host_on_error(lua_State *L);

/* Registers further C primitives into the kiln.c table (used by modules that add them). */
void kiln_host_register(lua_State *L, const luaL_Reg *fns);

#endif
