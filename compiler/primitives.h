/* kiln compiler: the C back end (NVRTC, cache, packs, reference executor, env) as Lua functions. */
#ifndef KILN_PRIMITIVES_H
#define KILN_PRIMITIVES_H

#include <lua.h>

/* Adds the back-end functions to the kiln.c table. */
void kiln_primitives_register(lua_State *L);

#endif
