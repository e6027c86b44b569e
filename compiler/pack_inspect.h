/* kiln compiler: `kiln pack inspect FILE` and `kiln pack verify FILE`, on top of the
 * runtime's pack reader (libkilnrt). */
#ifndef KILN_PACK_INSPECT_H
#define KILN_PACK_INSPECT_H

#include <stdio.h>

#include "err.h"
#include "kiln.h"

/* Prints plans, dims, tensors, kernels and archs with sizes. Returns 0 or -1. */
int kiln_pack_inspect(const char *path, FILE *out, kiln_err *e);

/* Checks the pack (format, checksum, structure, and that every image looks like a cubin
 * or PTX for its arch and every graph JSON parses); prints each problem and a summary.
 * Returns 0 when the pack is sound, else -1 (E_PACK, or E_IO). */
int kiln_pack_verify(const char *path, FILE *out, kiln_err *e);

/* The typed error code of docs/INTERNALS.md for a runtime status ("E_PACK", ...). */
const char *kiln_status_code(kiln_status status);

#endif
