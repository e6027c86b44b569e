/* kiln compiler: typed errors carried from C modules up to the CLI. */
#ifndef KILN_ERR_H
#define KILN_ERR_H

#include <stddef.h>

/* code is one of the typed error codes of docs/INTERNALS.md ("E_NVRTC", ...). */
typedef struct kiln_err {
  const char *code;
  char msg[4096];
} kiln_err;

/* Records code and message in e (e may be NULL); always returns -1 so callers can
 * `return kiln_err_set(e, "E_IO", "reading %s", path);`. */
int kiln_err_set(kiln_err *e, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes more context to an existing message: "ctx: old message". Returns -1. */
int kiln_err_wrap(kiln_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void kiln_err_clear(kiln_err *e);

/* The static string of a typed error code (docs/INTERNALS.md), "E_INTERNAL" for an unknown
 * one: for codes that come from a Lua state that is about to be closed. */
const char *kiln_err_code(const char *code);

#endif
