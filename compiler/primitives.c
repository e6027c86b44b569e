/* kiln compiler: Lua bindings of the C back end. */
#include "primitives.h"

#include <lauxlib.h>

#include "luahost.h"

void kiln_primitives_register(lua_State *L) {
  static const luaL_Reg fns[] = {{NULL, NULL}};
  kiln_host_register(L, fns);
}
