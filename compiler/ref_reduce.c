/* kiln reference executor: reduction (OPS.md §3). Y's dims say which axes reduce. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ref_impl.h"

typedef enum { R_ADD, R_MUL, R_MIN, R_MAX, R_AMAX, R_AVG, R_NORM1, R_NORM2, R_MUL_NO_ZEROS } rmode;

static const char *const MODE_NAMES[] = {"add",  "mul",   "min",   "max",         "amax",
                                         "avg",  "norm1", "norm2", "mul_no_zeros"};

static int eval_reduction(const ref_op *op, const ref_node *n, kiln_err *e);

static const char *const INPUTS[] = {"input|X", NULL};
static const char *const OUTPUTS[] = {"Y", NULL};
/* dims / axes only shape Y, whose declared dims decide here. */
static const char *const ATTRS[] = {"mode", "dims", "axes", "is_deterministic", NULL};
static const ref_op OPS[] = {{"reduction", INPUTS, OUTPUTS, ATTRS, eval_reduction, NULL}};

const ref_op *kiln__ref_reduce_op(const char *name) {
  return strcmp(name, OPS[0].name) == 0 ? &OPS[0] : NULL;
}

static double nan_pick(double acc, double x, int want_max) {
  if (isnan(acc) || isnan(x)) return NAN;
  return want_max ? (x > acc ? x : acc) : (x < acc ? x : acc);
}

static int eval_reduction(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  ref_tensor *x, *y;
  const char *ms;
  if (kiln__ref_need_in(n, "input|X", &x, e) || kiln__ref_need_out(n, "Y", &y, e) ||
      kiln__ref_attr_str(n, "mode", NULL, &ms, e))
    return -1;
  if (!ms) return kiln_err_set(e, "E_ATTR", "reduction needs attribute mode");
  int mode = -1;
  for (int i = 0; i < (int)(sizeof MODE_NAMES / sizeof MODE_NAMES[0]); i++)
    if (strcasecmp(ms, MODE_NAMES[i]) == 0) mode = i;
  if (mode < 0) return kiln_err_set(e, "E_ATTR", "reduction: unknown mode %s", ms);
  if (y->rank != x->rank)
    return kiln_err_set(e, "E_SHAPE", "reduction: Y rank %d differs from X rank %d", y->rank,
                        x->rank);
  size_t count = 1; /* elements per output value */
  for (int d = 0; d < x->rank; d++) {
    if (y->dims[d] == x->dims[d]) continue;
    if (y->dims[d] != 1)
      return kiln_err_set(e, "E_SHAPE", "reduction: Y extent %lld on axis %d is neither 1 "
                          "nor X's %lld", (long long)y->dims[d], d, (long long)x->dims[d]);
    count *= (size_t)x->dims[d];
  }

  double init = 0;
  switch ((rmode)mode) {
  case R_MUL: case R_MUL_NO_ZEROS: init = 1; break;
  case R_MIN: init = INFINITY; break;
  case R_MAX: init = -INFINITY; break;
  default: init = 0; break;
  }
  for (size_t i = 0; i < y->numel; i++) y->data[i] = init;

  ref_iter it;
  kiln__ref_iter_init(&it, x->rank, x->dims);
  if (kiln__ref_iter_add(&it, y->rank, y->dims, "Y", e) < 0) return -1;
  for (size_t i = 0; i < x->numel; i++, kiln__ref_iter_next(&it)) {
    double v = x->data[i], *acc = &y->data[it.off[0]];
    switch ((rmode)mode) {
    case R_ADD: case R_AVG: *acc += v; break;
    case R_MUL: *acc *= v; break;
    case R_MUL_NO_ZEROS: if (v != 0) *acc *= v; break;
    case R_MIN: *acc = nan_pick(*acc, v, 0); break;
    case R_MAX: *acc = nan_pick(*acc, v, 1); break;
    case R_AMAX: *acc = nan_pick(*acc, fabs(v), 1); break;
    case R_NORM1: *acc += fabs(v); break;
    case R_NORM2: *acc += v * v; break;
    }
  }
  for (size_t i = 0; i < y->numel; i++) {
    if (mode == R_AVG) y->data[i] /= (double)count;
    else if (mode == R_NORM2) y->data[i] = sqrt(y->data[i]);
  }
  return 0;
}
