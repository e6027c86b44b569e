/* libkilnrt: runtime handle, status texts, per-thread error detail, dtype names. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dl.h"
#include "internal.h"

#if !defined(KILN_ERRMSG_SIZE)
#define KILN_ERRMSG_SIZE 1024
#endif

/* Detail messages are kept per thread (keyed by the runtime's id), so that threads
 * launching through one runtime never overwrite each other's detail. */
static _Thread_local struct {
  uint64_t rt_id;
  char msg[KILN_ERRMSG_SIZE];
} last_error;

static atomic_uint_fast64_t next_rt_id = 1;

kiln_status kiln__fail(const kiln_rt *rt, kiln_status status, const char *fmt, ...) {
  if (!rt) return status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error.msg, sizeof last_error.msg, fmt, ap);
  va_end(ap);
  last_error.rt_id = rt->id;
  return status;
}

const char *kiln_rt_errmsg(const kiln_rt *rt) {
  if (!rt || last_error.rt_id != rt->id) return "";
  return last_error.msg;
}

const char *kiln_errstr(kiln_status status) {
  switch (status) {
  case KILN_OK: return "not an error";
  case KILN_ERR_INVALID_ARG: return "invalid argument";
  case KILN_ERR_NOMEM: return "out of memory";
  case KILN_ERR_IO: return "pack file cannot be read";
  case KILN_ERR_PACK: return "pack malformed, corrupt or of another format version";
  case KILN_ERR_NO_DRIVER: return "no usable CUDA driver";
  case KILN_ERR_NO_CUBIN: return "the pack has no code for this GPU's architecture";
  case KILN_ERR_CUDA: return "a CUDA driver call failed";
  case KILN_ERR_NOT_FOUND: return "no such plan, tensor or dim";
  case KILN_ERR_UNBOUND: return "a tensor, scalar, dim or workspace of the plan is not bound";
  case KILN_ERR_SHAPE: return "shape does not match the plan";
  case KILN_ERR_DTYPE: return "dtype does not match the plan";
  case KILN_ERR_STRIDE: return "strides do not match the plan";
  case KILN_ERR_ALIGN: return "pointer is less aligned than the plan needs";
  }
  return "unknown status";
}

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {
    [KILN_DTYPE_FP32] = {"fp32", 4},         [KILN_DTYPE_FP16] = {"fp16", 2},
    [KILN_DTYPE_BF16] = {"bf16", 2},         [KILN_DTYPE_FP8_E4M3] = {"fp8_e4m3", 1},
    [KILN_DTYPE_FP8_E5M2] = {"fp8_e5m2", 1}, [KILN_DTYPE_FP8_E8M0] = {"fp8_e8m0", 1},
    [KILN_DTYPE_INT32] = {"int32", 4},       [KILN_DTYPE_INT64] = {"int64", 8},
    [KILN_DTYPE_BOOL] = {"bool", 1},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

const char *kiln_dtype_name(kiln_dtype dtype) {
  return (int)dtype > 0 && (int)dtype < NDTYPES ? dtypes[dtype].name : NULL;
}

size_t kiln_dtype_size(kiln_dtype dtype) {
  return (int)dtype > 0 && (int)dtype < NDTYPES ? dtypes[dtype].size : 0;
}

kiln_dtype kiln_dtype_from_name(const char *name) {
  for (int i = 1; name && i < NDTYPES; i++)
    if (strcmp(dtypes[i].name, name) == 0) return (kiln_dtype)i;
  return KILN_DTYPE_INVALID;
}

const char *kiln_role_name(kiln_role role) {
  static const char *const names[] = {"input", "output", "virtual", "constant", "scalar",
                                      "scratch"};
  return (unsigned)role < sizeof names / sizeof names[0] ? names[role] : NULL;
}

kiln_status kiln_rt_create(kiln_rt **out) {
  if (!out) return KILN_ERR_INVALID_ARG;
  *out = NULL;
  kiln_rt *rt = calloc(1, sizeof *rt);
  if (!rt) return KILN_ERR_NOMEM;
  if (pthread_mutex_init(&rt->lock, NULL) != 0) {
    free(rt);
    return KILN_ERR_NOMEM;
  }
  rt->id = atomic_fetch_add(&next_rt_id, 1);
  *out = rt;
  return KILN_OK;
}

kiln_status kiln_rt_destroy(kiln_rt *rt) {
  if (!rt) return KILN_OK;
  for (;;) {
    pthread_mutex_lock(&rt->lock);
    kiln_pack *p = rt->packs;
    pthread_mutex_unlock(&rt->lock);
    if (!p) break;
    kiln_pack_close(p);
  }
  pthread_mutex_destroy(&rt->lock);
  free(rt);
  return KILN_OK;
}

kiln_status kiln_rt_driver_version(kiln_rt *rt, int *version) {
  if (!rt || !version) return kiln__fail(rt, KILN_ERR_INVALID_ARG, "NULL argument");
  *version = 0;
  kiln_status st = kiln__cuda_load(rt);
  if (st != KILN_OK) return st;
  *version = kiln__cu.version;
  return KILN_OK;
}
