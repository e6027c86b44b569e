/* kiln compiler: `kiln env` — what this machine offers kiln (driver, GPUs, NVRTC, cuDNN,
 * cache), each library reported as loaded (path, version) or not found. */
#ifndef KILN_ENV_H
#define KILN_ENV_H

#include <stdio.h>

#include "err.h"

/* The SMs kiln builds for, space-separated. */
#define KILN_SUPPORTED_SMS "sm_80 sm_89 sm_90a sm_100a sm_120"

/* Writes the report to out: one "key: value" per line, or (json) one JSON object with
 * the same keys. Works, and says so, without a GPU, a driver, NVRTC or cuDNN. A driver
 * older than NVRTC is flagged in "warning" lines. 0, or -1 (E_IO when out fails). */
int kiln_env_report(FILE *out, int json, kiln_err *e);

/* The same report as one compact JSON string (the caller frees it), or NULL with e set. */
char *kiln_env_json(kiln_err *e);

#endif
