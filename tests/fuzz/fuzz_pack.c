/* libFuzzer harness: the pack reader of libkilnrt (runtime/pack_read.c), through the public
 * kiln_pack_open_memory, then every info call and a binding check of each plan it opened
 * (runtime/plan.c, bind.c: the code that trusts what the reader accepted), and the
 * positional kiln_launch_args.
 *
 * Each input is opened twice: as it is (magic, version, size and checksum checks), and
 * with the header's file size and CRC-32C made to match, so that mutations reach the
 * metadata, string table and image checks behind the checksum.
 *
 * The CUDA driver is stubbed out (runtime/cuda_dl.c is not linked): a pack opens without
 * one, and launch paths stop at "no driver" instead of initializing a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dl.h"
#include "internal.h"
#include "kiln.h"
#include "pack.h"

/* ---- driver stub (replaces runtime/cuda_dl.c) ---- */
kiln__cuda kiln__cu;
kiln_status kiln__cuda_load(const kiln_rt *rt) {
  return kiln__fail(rt, KILN_ERR_NO_DRIVER, "fuzz harness: no driver");
}
void kiln__cuda_describe(CUresult r, char *buf, size_t size) {
  if (size) snprintf(buf, size, "CUDA error %d", (int)r);
}

static kiln_rt *rt;
static int verbose; /* KILN_FUZZ_VERBOSE=1: what became of each input, to check a corpus */

/* A small value for a dynamic dim, fixed by its name. */
static int64_t dim_value(const char *name) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
  return 1 + (int64_t)(h % 8);
}

static volatile size_t sink; /* keeps reads of returned strings and images */

static void touch(const char *s) {
  if (s) sink += strlen(s);
}

static void exercise_plan(kiln_pack *pack, kiln_plan *plan) {
  kiln_plan_info pi;
  if (kiln_plan_info_get(plan, &pi) != KILN_OK) return;
  touch(pi.graph);
  touch(pi.instance);
  touch(pi.graph_json);
  touch(pi.workspace);
  kiln_plan *again = NULL;
  (void)kiln_plan_get(pack, pi.graph, pi.instance, &again);
  (void)kiln_plan_get(pack, pi.graph, NULL, &again);
  int64_t dyn[KILN_PACK_MAX_DYN];
  for (int d = 0; d < pi.ndims && d < KILN_PACK_MAX_DYN; d++) {
    const char *name = NULL;
    dyn[d] = 1;
    if (kiln_plan_dim(plan, d, &name) == KILN_OK && name) {
      touch(name);
      dyn[d] = dim_value(name);
    }
  }
  for (int d = 0; d < pi.nspecialized; d++) {
    const char *name = NULL;
    int64_t v;
    if (kiln_plan_specialized(plan, d, &name, &v) == KILN_OK) touch(name);
  }
  for (int k = 0; k < pi.nkernels; k++) {
    kiln_kernel_info ki;
    if (kiln_plan_kernel(plan, k, &ki) != KILN_OK) continue;
    touch(ki.symbol);
    touch(ki.engine);
    touch(ki.plan_id);
    for (int a = 0; a < 3; a++) touch(ki.grid[a]);
    for (int m = 0; m < ki.nimages; m++) {
      const char *arch = NULL;
      const void *data = NULL;
      size_t size = 0;
      if (kiln_plan_kernel_image(plan, k, m, &arch, &data, &size) != KILN_OK) continue;
      touch(arch);
      if (data && size) sink += ((const unsigned char *)data)[0] + ((const unsigned char *)data)[size - 1];
    }
  }
  size_t ws = 0;
  (void)kiln_plan_workspace_size(plan, NULL, &ws);

  kiln_bind *b = NULL;
  if (kiln_bind_create(plan, &b) != KILN_OK) return;
  for (int d = 0; d < pi.ndims && d < KILN_PACK_MAX_DYN; d++) {
    const char *name = NULL;
    if (kiln_plan_dim(plan, d, &name) == KILN_OK) (void)kiln_bind_dim(b, name, dyn[d]);
  }
  for (int i = 0; i < pi.ntensors; i++) {
    kiln_tensor_info ti;
    if (kiln_plan_tensor(plan, i, &ti) != KILN_OK) continue;
    touch(ti.name);
    for (int j = 0; j < ti.ndim; j++) {
      touch(ti.dim_names[j]);
      touch(ti.stride_exprs[j]);
    }
    int index;
    (void)kiln_plan_tensor_index(plan, ti.name, &index);
    (void)kiln_plan_tensor_index_uid(plan, ti.uid, &index);
    if (ti.role == KILN_ROLE_SCALAR) {
      (void)kiln_bind_scalar(b, ti.name, 0.5);
    } else if (ti.role == KILN_ROLE_INPUT || ti.role == KILN_ROLE_OUTPUT) {
      int64_t dims[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
      int fixed_strides = 1; /* the plan's strides where all are literal, else contiguous */
      for (int j = 0; j < ti.ndim && j < KILN_MAX_DIMS; j++) {
        strides[j] = ti.strides[j];
        if (strides[j] < 0) fixed_strides = 0;
        dims[j] = ti.dims[j];
        if (dims[j] < 0) {
          dims[j] = 1;
          for (int d = 0; d < pi.ndims && d < KILN_PACK_MAX_DYN; d++) {
            const char *name = NULL;
            if (kiln_plan_dim(plan, d, &name) == KILN_OK && name && ti.dim_names[j] &&
                strcmp(name, ti.dim_names[j]) == 0)
              dims[j] = dyn[d];
          }
        }
      }
      /* fake device pointers: 4 KiB aligned, never dereferenced without a driver */
      (void)kiln_bind_tensor_uid(b, ti.uid, (kiln_devptr)(0x100000000ull + (uint64_t)i * 0x10000000ull),
                                 ti.ndim, dims, fixed_strides ? strides : NULL, ti.dtype);
    }
  }
  if (kiln_plan_workspace_size(plan, b, &ws) == KILN_OK && ws)
    (void)kiln_bind_workspace(b, (kiln_devptr)0x7000000000ull, ws);
  kiln_status st = kiln_bind_check(plan, b);
  if (verbose)
    fprintf(stderr, "fuzz_pack: plan %s [%s]: bind check: %s %s\n", pi.graph, pi.instance,
            kiln_errstr(st), st ? kiln_rt_errmsg(rt) : "");
  if (st == KILN_OK) (void)kiln_launch(plan, b, NULL);
  (void)kiln_bind_reset(b);
  (void)kiln_bind_destroy(b);

  /* the positional launch of `kiln build --emit-c` wrappers: same checks, no binding */
  kiln_devptr *ptrs = calloc((size_t)pi.ntensors + 1, sizeof *ptrs);
  double *scalars = calloc((size_t)pi.ntensors + 1, sizeof *scalars);
  if (ptrs && scalars) {
    for (int i = 0; i < pi.ntensors; i++) ptrs[i] = (kiln_devptr)(0x100000000ull + (uint64_t)i * 0x10000000ull);
    (void)kiln_launch_args(plan, NULL, ptrs, scalars, dyn, ws ? (kiln_devptr)0x7000000000ull : 0);
  }
  free(ptrs);
  free(scalars);
}

static void open_one(const unsigned char *data, size_t size) {
  kiln_pack *pack = NULL;
  if (kiln_pack_open_memory(rt, data, size, &pack) != KILN_OK) {
    touch(kiln_rt_errmsg(rt));
    if (verbose) fprintf(stderr, "fuzz_pack: open: %s\n", kiln_rt_errmsg(rt));
    return;
  }
  kiln_pack_info info;
  if (kiln_pack_info_get(pack, &info) == KILN_OK)
    for (int i = 0; i < info.nplans; i++) {
      kiln_plan *plan = NULL;
      if (kiln_pack_plan_at(pack, i, &plan) == KILN_OK) exercise_plan(pack, plan);
    }
  (void)kiln_pack_plan_at(pack, -1, &(kiln_plan *){NULL});
  (void)kiln_plan_get(pack, "no such graph", NULL, &(kiln_plan *){NULL});
  kiln_pack_close(pack);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!rt) {
    if (kiln_rt_create(&rt) != KILN_OK) abort();
    verbose = getenv("KILN_FUZZ_VERBOSE") != NULL;
  }
  /* a copy of exactly size bytes (so ASan sees a read past the end), 64-byte aligned as
   * kiln_pack_open gives */
  void *mem = NULL;
  if (posix_memalign(&mem, 64, size ? size : 1) != 0) return 0;
  unsigned char *buf = mem;
  memcpy(buf, data, size);
  open_one(buf, size);
  if (size >= KILN_PACK_HEADER_SIZE && memcmp(buf, KILN_PACK_MAGIC, 8) == 0) {
    uint64_t n = size;
    uint32_t sum;
    for (int i = 0; i < 8; i++) buf[KILN_PACK_OFF_FILE_SIZE + i] = (unsigned char)(n >> (8 * i));
    sum = kiln__pack_checksum(buf, size);
    for (int i = 0; i < 4; i++) buf[KILN_PACK_OFF_CHECKSUM + i] = (unsigned char)(sum >> (8 * i));
    if (memcmp(buf, data, size) != 0) open_one(buf, size);
  }
  free(buf);
  return 0;
}
