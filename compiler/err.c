/* kiln compiler: typed error helpers. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kiln_err_set(kiln_err *e, const char *code, const char *fmt, ...) {
  if (!e) return -1;
  e->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

int kiln_err_wrap(kiln_err *e, const char *fmt, ...) {
  if (!e) return -1;
  char prefix[1024], old[sizeof e->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, e->msg, sizeof old);
  size_t n = strlen(prefix);
  if (n > sizeof e->msg - 3) n = sizeof e->msg - 3;
  memcpy(e->msg, prefix, n);
  memcpy(e->msg + n, ": ", 2);
  size_t room = sizeof e->msg - n - 3, m = strlen(old);
  if (m > room) m = room;
  memcpy(e->msg + n + 2, old, m);
  e->msg[n + 2 + m] = '\0';
  return -1;
}

void kiln_err_clear(kiln_err *e) {
  if (!e) return;
  e->code = NULL;
  e->msg[0] = '\0';
}

const char *kiln_err_code(const char *code) {
  static const char *const codes[] = {
      "E_USAGE", "E_IO",    "E_SYNTAX",       "E_SPEC", "E_SANDBOX",  "E_LIMIT",  "E_UNKNOWN_OP", "E_PORT",
      "E_ATTR",  "E_SHAPE", "E_DTYPE",        "E_JSON", "E_JSON_VERSION", "E_UID", "E_DANGLING", "E_CYCLE",
      "E_NO_ENGINE", "E_NVRTC", "E_CACHE_MISS", "E_CACHE", "E_CUDA", "E_PACK", "E_NUMERIC", "E_INTERNAL"};
  for (size_t i = 0; code && i < sizeof codes / sizeof codes[0]; i++)
    if (strcmp(codes[i], code) == 0) return codes[i];
  return "E_INTERNAL";
}
