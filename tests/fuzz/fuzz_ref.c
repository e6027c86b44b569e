/* libFuzzer harness: the graph JSON reader of the reference executor (compiler/ref.c).
 * The input is graph JSON text. The harness reads it once itself (jansson, as ref.c does)
 * to find each tensor's size, so that it can hand kiln_ref_eval a buffer for every input,
 * output and scalar tensor (else every input would stop at "no buffer" and the evaluation
 * would never run), and it skips inputs whose tensors are too large to evaluate quickly
 * (ref.c allocates constants and virtual tensors itself: a dims of [1e12] would only test
 * the allocator).
 *
 * Two keys that ref.c ignores steer the harness, so that the fuzzer controls the data too
 * (index inputs such as cu_seqlens, state_indices and the matmul overrides are data):
 *   top level "fuzz_dims": {"T": 3}: the value passed for a dim (0..64); a dim without one
 *     gets 1..4, fixed by its name;
 *   a tensor's "fuzz_values": [1, -2.5, "inf", "nan"]: its buffer's values, repeated; without
 *     one, a fixed pseudo-random pattern in [-2, 2).
 * KILN_FUZZ_VERBOSE=1 prints what became of each input (evaluated, or the error). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

#define MAX_TENSOR ((size_t)1 << 14) /* values per tensor */
#define MAX_TOTAL ((size_t)1 << 16)  /* values over all tensors */
#define MAX_RANK 8                   /* KILN_REF_MAXRANK */
#define MAX_BUFS 256
#define MAX_DIMS 32

/* A small value for a dynamic dim, fixed by its name (so equal names agree). */
static int64_t dim_value(const char *name) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
  return 1 + (int64_t)(h % 4);
}

/* The tensor's values as ref.c computes them: 0 ok; 1 ref.c stops at this tensor (so no
 * tensor after it matters); 2 empty, but with an extent above MAX_TENSOR (op loops run over
 * extents: such a graph is only run when ref.c stops at a later tensor); 3 ref.c stops here
 * as its extents' product overflows int64, but *numel holds the wrapped product that ref.c
 * took before it checked that (a buffer of that size keeps the crash reproducible); -1 too
 * large. */
static int tensor_numel(json_t *root, json_t *t, const kiln_ref_dim *dims, int nd, size_t *numel) {
  json_t *jd = json_object_get(t, "dims");
  if (!json_is_array(jd) || json_array_size(jd) > MAX_RANK) return 1;
  size_t n = 1, wrapped = 1;
  int zero = 0, large = 0, overflow = 0;
  int64_t span = 1;
  for (size_t i = 0; i < json_array_size(jd); i++) {
    json_t *d = json_array_get(jd, i);
    int64_t v = -1;
    if (json_is_integer(d)) {
      v = json_integer_value(d);
    } else if (json_is_string(d)) {
      const char *name = json_string_value(d);
      for (int k = 0; k < nd && v < 0; k++)
        if (strcmp(dims[k].name, name) == 0) v = dims[k].value;
      if (v < 0) {
        json_t *val = json_object_get(json_object_get(json_object_get(root, "dims"), name), "value");
        if (!json_is_integer(val)) return 1;
        v = json_integer_value(val);
      }
    } else {
      return 1;
    }
    if (v < 0) return 1;
    wrapped *= (size_t)v;
    if (v > 0 && __builtin_mul_overflow(span, v, &span)) overflow = 1;
    if (v > (int64_t)MAX_TENSOR) large = 1;
    else if (v == 0) zero = 1;
    else if (n <= MAX_TENSOR) n *= (size_t)v; /* at most 2^28: no overflow */
  }
  if (overflow) {
    *numel = wrapped;
    return wrapped <= MAX_TENSOR ? 3 : 1;
  }
  if (zero) n = 0;
  if (n > MAX_TENSOR || (large && !zero)) return -1;
  *numel = n;
  return large ? 2 : 0;
}

/* A number, or the strings inf, -inf and nan (as ref.c reads constants). */
static double json_value(const json_t *j) {
  const char *s = json_string_value(j);
  if (s) return strcmp(s, "inf") == 0 ? INFINITY : strcmp(s, "-inf") == 0 ? -INFINITY : NAN;
  return json_is_boolean(j) ? json_is_true(j) : json_number_value(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';

  kiln_ref_dim dims[MAX_DIMS];
  int nd = 0;
  kiln_ref_buffer bufs[MAX_BUFS];
  int nb = 0;
  double *store = NULL;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
  if (json_is_object(root)) {
    json_t *jd = json_object_get(root, "dims");
    const char *key;
    json_t *v;
    if (json_is_object(jd))
      json_object_foreach(jd, key, v) {
        if (nd == MAX_DIMS) break;
        json_t *fv = json_object_get(json_object_get(root, "fuzz_dims"), key);
        int64_t val = dim_value(key);
        if (json_is_integer(fv) && json_integer_value(fv) >= 0 && json_integer_value(fv) <= 64)
          val = json_integer_value(fv);
        dims[nd++] = (kiln_ref_dim){key, val};
      }
    json_t *jt = json_object_get(root, "tensors");
    int run_long = 1; /* no tensor is empty with a long extent, or ref.c stops before it runs */
    size_t total = 0, need[MAX_BUFS];
    int64_t uid[MAX_BUFS];
    json_t *vals[MAX_BUFS];
    for (size_t i = 0; i < json_array_size(jt); i++) {
      json_t *t = json_array_get(jt, i);
      size_t n = 0;
      int rc = tensor_numel(root, t, dims, nd, &n);
      if (rc < 0) goto skip;
      if (rc == 1) {
        run_long = 1;
        break;
      }
      if (rc == 2) run_long = 0;
      if ((total += n) > MAX_TOTAL) goto skip;
      const char *role = json_string_value(json_object_get(t, "role"));
      json_t *ju = json_object_get(t, "uid");
      if (role && json_is_integer(ju) && nb < MAX_BUFS &&
          (!strcmp(role, "input") || !strcmp(role, "output") || !strcmp(role, "scalar"))) {
        uid[nb] = json_integer_value(ju);
        vals[nb] = json_object_get(t, "fuzz_values");
        need[nb++] = n;
      }
      if (rc == 3) {
        run_long = 1;
        break;
      }
    }
    if (!run_long) goto skip;
    store = malloc((total ? total : 1) * sizeof *store);
    if (!store) goto skip;
    /* inputs: a fixed pseudo-random pattern in [-2, 2), with a few exact zeros and ones */
    uint32_t s = 12345;
    for (size_t i = 0; i < total; i++) {
      s = s * 1103515245u + 12345u;
      store[i] = i % 17 == 0 ? 0.0 : i % 13 == 0 ? 1.0 : ((double)(s >> 8) / (1 << 24)) * 4.0 - 2.0;
    }
    size_t off = 0;
    for (int i = 0; i < nb; i++) {
      bufs[i] = (kiln_ref_buffer){uid[i], store + off, need[i]};
      size_t nv = json_array_size(vals[i]);
      for (size_t k = 0; nv && k < need[i]; k++) store[off + k] = json_value(json_array_get(vals[i], k % nv));
      off += need[i];
    }
  }
  kiln_err e = {0};
  int rc = kiln_ref_eval(text, dims, nd, bufs, nb, &e);
  if (getenv("KILN_FUZZ_VERBOSE")) /* what became of the input: to check a corpus */
    fprintf(stderr, "fuzz_ref: %s\n", rc == 0 ? "evaluated" : e.msg);
skip:
  free(store);
  json_decref(root);
  free(text);
  return 0;
}
