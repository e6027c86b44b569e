/* kiln compiler: JSON for the Lua front end, through jansson. */
#ifndef KILN_LUAJSON_H
#define KILN_LUAJSON_H

#include <lua.h>

/* Adds json_encode(value [, indent]) and json_decode(text) to kiln.c, plus
 * kiln.c.json_null and kiln.c.json_array_mt (marks a Lua table as a JSON array). */
void kiln_luajson_register(lua_State *L);

#endif
