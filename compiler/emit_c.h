/* kiln compiler: `kiln build ... --emit-c DIR`: C source that embeds a pack. */
#ifndef KILN_EMIT_C_H
#define KILN_EMIT_C_H

#include <stddef.h>

#include "err.h"

/* Writes DIR/<name>.c (the pack bytes as a static array, <name>_load, and one typed launch
 * function per plan) and DIR/<name>.h (their declarations). name must be a C identifier.
 * The plans are read from the pack bytes themselves. Returns 0 or -1 (E_USAGE, E_IO,
 * E_PACK). The output compiles as C11 with -Wall -Wextra -Werror against kiln.h. */
int kiln_emit_c(const char *dir, const char *name, const void *pack, size_t size, kiln_err *e);

#endif
