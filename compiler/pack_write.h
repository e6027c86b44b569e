/* kiln compiler: writes pack files (format: runtime/pack.h) from plan manifests
 * (docs/INTERNALS.md) and the code images compiled for them. */
#ifndef KILN_PACK_WRITE_H
#define KILN_PACK_WRITE_H

#include <stddef.h>

#include "err.h"

typedef struct kiln_blob {
  const void *data;
  size_t size;
} kiln_blob;

typedef struct kiln_pack_writer kiln_pack_writer;

/* NULL when out of memory. */
kiln_pack_writer *kiln_pack_writer_new(void);
void kiln_pack_writer_free(kiln_pack_writer *w);

/* Adds one plan: its manifest JSON text and, for kernel k and arch a ("sm_90a",
 * "compute_90" for PTX), images[k * narch + a] (data NULL or size 0: no image for that
 * arch; every kernel needs at least one). Identical images are stored once. On error
 * (E_JSON, E_JSON_VERSION, E_PACK) the writer is left as it was. Returns 0 or -1. */
int kiln_pack_writer_add_plan(kiln_pack_writer *w, const char *manifest_json,
                              const char *const *archs, int narch, const kiln_blob *images,
                              kiln_err *e);

/* The pack bytes in a malloc'ed buffer the caller frees. Returns 0 or -1. */
int kiln_pack_writer_to_memory(kiln_pack_writer *w, void **data, size_t *size, kiln_err *e);

/* Writes the pack to path atomically (temp file, fsync, rename). Returns 0 or -1 (E_IO). */
int kiln_pack_writer_write(kiln_pack_writer *w, const char *path, kiln_err *e);

#endif
