/* kiln compiler: Lua <-> JSON through jansson. Objects are encoded with sorted keys so
 * graph JSON is byte-for-byte deterministic. */
#include "luajson.h"

#include <jansson.h>
#include <lauxlib.h>
#include <math.h>
#include <string.h>

#include "luahost.h"

#define ARRAY_MT "kiln.json.array"
#define MAX_DEPTH 200

static int null_sentinel;

static void push_json(lua_State *L, json_t *j, int depth) {
  luaL_checkstack(L, 4, "json nesting");
  if (depth > MAX_DEPTH) kiln_host_raise(L, "E_JSON", "JSON nested deeper than %d", MAX_DEPTH);
  switch (json_typeof(j)) {
    case JSON_OBJECT: {
      const char *k;
      json_t *v;
      lua_createtable(L, 0, (int)json_object_size(j));
      json_object_foreach(j, k, v) {
        push_json(L, v, depth + 1);
        lua_setfield(L, -2, k);
      }
      break;
    }
    case JSON_ARRAY: {
      size_t i;
      json_t *v;
      lua_createtable(L, (int)json_array_size(j), 0);
      json_array_foreach(j, i, v) {
        push_json(L, v, depth + 1);
        lua_seti(L, -2, (lua_Integer)i + 1);
      }
      luaL_setmetatable(L, ARRAY_MT);
      break;
    }
    case JSON_STRING: lua_pushlstring(L, json_string_value(j), json_string_length(j)); break;
    case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(j)); break;
    case JSON_REAL: lua_pushnumber(L, json_real_value(j)); break;
    case JSON_TRUE: lua_pushboolean(L, 1); break;
    case JSON_FALSE: lua_pushboolean(L, 0); break;
    case JSON_NULL: lua_pushlightuserdata(L, &null_sentinel); break;
  }
}

static int push_json_protected(lua_State *L) {
  push_json(L, lua_touserdata(L, 1), 0);
  return 1;
}

static int l_json_decode(lua_State *L) {
  size_t n;
  const char *text = luaL_checklstring(L, 1, &n);
  json_error_t err;
  json_t *j = json_loadb(text, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
  if (!j) return kiln_host_raise(L, "E_JSON", "line %d column %d: %s", err.line, err.column, err.text);
  /* push_json raises (too deep, out of memory): in a protected call, so that j is freed */
  lua_pushcfunction(L, push_json_protected);
  lua_pushlightuserdata(L, j);
  int rc = lua_pcall(L, 1, 1, 0);
  json_decref(j);
  if (rc != LUA_OK) return lua_error(L);
  return 1;
}

static int is_array(lua_State *L, int idx) {
  if (lua_getmetatable(L, idx)) {
    luaL_getmetatable(L, ARRAY_MT);
    int same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    if (same) return 1;
  }
  lua_Integer len = (lua_Integer)lua_rawlen(L, idx), count = 0;
  if (len == 0) return 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    count++;
  }
  return count == len;
}

/* Adds v to its parent: appended to an array (key NULL) or set in an object. */
static void put(lua_State *L, json_t *parent, const char *key, json_t *v) {
  if (!v) kiln_host_raise(L, "E_JSON", "out of memory encoding JSON");
  if ((key ? json_object_set_new(parent, key, v) : json_array_append_new(parent, v)) != 0)
    kiln_host_raise(L, "E_JSON", "out of memory encoding JSON");
}

static json_t *scalar_json(lua_State *L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL: return json_null();
    case LUA_TBOOLEAN: return json_boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER: {
      if (lua_isinteger(L, idx)) return json_integer((json_int_t)lua_tointeger(L, idx));
      double d = lua_tonumber(L, idx);
      if (!isfinite(d)) kiln_host_raise(L, "E_JSON", "cannot encode %g in JSON", d);
      return json_real(d);
    }
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      json_t *j = json_stringn(s, n);
      if (!j) kiln_host_raise(L, "E_JSON", "string is not valid UTF-8");
      return j;
    }
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == &null_sentinel) return json_null();
      break;
    default: break;
  }
  kiln_host_raise(L, "E_JSON", "cannot encode a %s in JSON", luaL_typename(L, idx));
  return NULL;
}

/* Encodes the value at idx into parent. Containers join their parent before they are
 * filled, so whatever raises (a bad value, the stack, memory) leaves one tree, which the
 * caller frees. */
static void to_json(lua_State *L, int idx, int depth, json_t *parent, const char *key) {
  idx = lua_absindex(L, idx);
  if (depth > MAX_DEPTH) kiln_host_raise(L, "E_JSON", "value nested deeper than %d (cycle?)", MAX_DEPTH);
  if (lua_type(L, idx) != LUA_TTABLE) { put(L, parent, key, scalar_json(L, idx)); return; }
  luaL_checkstack(L, 4, "json nesting");
  if (is_array(L, idx)) {
    json_t *a = json_array();
    put(L, parent, key, a);
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(L, idx, i);
      to_json(L, -1, depth + 1, a, NULL);
      lua_pop(L, 1);
    }
    return;
  }
  json_t *o = json_object();
  put(L, parent, key, o);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      kiln_host_raise(L, "E_JSON", "object keys must be strings (got a %s key)", luaL_typename(L, -2));
    to_json(L, -1, depth + 1, o, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
}

static int encode_protected(lua_State *L) {
  to_json(L, 1, 0, lua_touserdata(L, 2), NULL);
  return 0;
}

static int l_json_encode(lua_State *L) {
  lua_Integer indent = luaL_optinteger(L, 2, 0);
  /* the tree hangs from a holder, built in a protected call: a raise cannot leak it */
  json_t *holder = json_array();
  if (!holder) return kiln_host_raise(L, "E_JSON", "out of memory encoding JSON");
  lua_pushcfunction(L, encode_protected);
  lua_pushvalue(L, 1);
  lua_pushlightuserdata(L, holder);
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
    json_decref(holder);
    return lua_error(L);
  }
  size_t flags = JSON_SORT_KEYS | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17);
  if (indent > 0) flags |= JSON_INDENT((int)indent);
  else flags |= JSON_COMPACT;
  char *s = json_dumps(json_array_get(holder, 0), flags);
  json_decref(holder);
  if (!s) return kiln_host_raise(L, "E_JSON", "JSON encoding failed");
  lua_pushstring(L, s);
  free(s);
  return 1;
}

static int l_json_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  else luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  luaL_setmetatable(L, ARRAY_MT);
  return 1;
}

void kiln_luajson_register(lua_State *L) {
  luaL_newmetatable(L, ARRAY_MT);
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {
      {"json_encode", l_json_encode}, {"json_decode", l_json_decode}, {"json_array", l_json_array}, {NULL, NULL}};
  kiln_host_register(L, fns);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "kiln.c");
  lua_pushlightuserdata(L, &null_sentinel);
  lua_setfield(L, -2, "json_null");
  lua_pop(L, 2);
}
