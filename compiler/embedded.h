/* kiln compiler: Lua modules and CUDA templates compiled into the executable. */
#ifndef KILN_EMBEDDED_H
#define KILN_EMBEDDED_H

#include <stddef.h>

/* name is "lua/kiln/graph.lua" or "templates/pointwise.cuh"; the table ends with a NULL name. */
typedef struct kiln_embedded_file {
  const char *name;
  const char *data;
  size_t size;
} kiln_embedded_file;

extern const kiln_embedded_file kiln_embedded_files[];

#endif
