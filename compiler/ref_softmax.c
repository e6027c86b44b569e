/* kiln reference executor: softmax, log_softmax and their backwards (OPS.md §5), over one
 * axis, with an optional sink logit and the Stats (LSE) / Max / Sum_exp outputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_impl.h"

typedef enum { SM_SOFTMAX, SM_LOG_SOFTMAX } sm_kind;
static const sm_kind SOFT = SM_SOFTMAX, LOGSOFT = SM_LOG_SOFTMAX;

static int eval_softmax(const ref_op *op, const ref_node *n, kiln_err *e);
static int eval_softmax_bwd(const ref_op *op, const ref_node *n, kiln_err *e);

static const char *const FWD_IN[] = {"input|P", "sink|SINK", NULL};
static const char *const FWD_OUT[] = {"S|OUT_0", "Stats", "Max", "Sum_exp", NULL};
static const char *const BWD_IN[] = {"grad|DY", "output|Y", NULL};
static const char *const BWD_OUT[] = {"DX|OUT_0", NULL};
/* generate_* only say which statistics outputs exist; the bound ports decide here. */
static const char *const FWD_ATTRS[] = {"axis", "generate_stats", "generate_max",
                                        "generate_sum_exp", "stats_use_log2", NULL};
static const char *const BWD_ATTRS[] = {"axis", NULL};

static const ref_op OPS[] = {
    {"softmax", FWD_IN, FWD_OUT, FWD_ATTRS, eval_softmax, &SOFT},
    {"log_softmax", FWD_IN, FWD_OUT, FWD_ATTRS, eval_softmax, &LOGSOFT},
    {"softmax_backward", BWD_IN, BWD_OUT, BWD_ATTRS, eval_softmax_bwd, &SOFT},
    {"log_softmax_backward", BWD_IN, BWD_OUT, BWD_ATTRS, eval_softmax_bwd, &LOGSOFT},
};

const ref_op *kiln__ref_softmax_op(const char *name) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
  return NULL;
}

/* Element (o, j, i) of an [outer, len, inner] view sits at (o*len + j)*inner + i. */
typedef struct {
  size_t outer, len, inner;
  int64_t sdims[KILN_REF_MAXRANK]; /* dims with 1 on the axis: the stats shape */
} axis_view;

static int axis_view_of(const ref_node *n, const ref_tensor *x, axis_view *v, kiln_err *e) {
  int64_t axis;
  if (kiln__ref_attr_int(n, "axis", -1, &axis, e)) return -1;
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis >= x->rank)
    return kiln_err_set(e, "E_ATTR", "%s: axis out of range for rank %d", n->op, x->rank);
  v->outer = v->inner = 1;
  for (int d = 0; d < x->rank; d++) {
    v->sdims[d] = d == axis ? 1 : x->dims[d];
    if (d < axis) v->outer *= (size_t)x->dims[d];
    if (d > axis) v->inner *= (size_t)x->dims[d];
  }
  v->len = (size_t)x->dims[axis];
  return 0;
}

/* A stats-shaped output (or sink input): exactly outer*inner values, broadcast-aligned. */
static int check_stats(const ref_tensor *t, const ref_tensor *x, const axis_view *v,
                       int exact, kiln_err *e) {
  ref_iter it;
  kiln__ref_iter_init(&it, x->rank, v->sdims);
  if (kiln__ref_iter_add(&it, t->rank, t->dims, t->name, e) < 0) return -1;
  if (exact && t->numel != v->outer * v->inner)
    return kiln_err_set(e, "E_SHAPE", "'%s' must have %zu values, has %zu", t->name,
                        v->outer * v->inner, t->numel);
  return 0;
}

static int eval_softmax(const ref_op *op, const ref_node *n, kiln_err *e) {
  sm_kind kind = *(const sm_kind *)op->impl;
  ref_tensor *x, *y = kiln__ref_out(n, "S|OUT_0"), *sink = kiln__ref_in(n, "sink|SINK");
  ref_tensor *stats = kiln__ref_out(n, "Stats"), *mx = kiln__ref_out(n, "Max");
  ref_tensor *sum = kiln__ref_out(n, "Sum_exp");
  axis_view v;
  int log2_stats;
  if (kiln__ref_need_in(n, "input|P", &x, e) || axis_view_of(n, x, &v, e) ||
      kiln__ref_attr_bool(n, "stats_use_log2", 0, &log2_stats, e))
    return -1;
  if (y && kiln__ref_check_dims(y, x->rank, x->dims, "S", e)) return -1;
  if ((stats && check_stats(stats, x, &v, 1, e)) || (mx && check_stats(mx, x, &v, 1, e)) ||
      (sum && check_stats(sum, x, &v, 1, e)) || (sink && check_stats(sink, x, &v, 0, e)))
    return -1;
  ref_iter sit; /* walks the stats shape to find each row's sink value */
  kiln__ref_iter_init(&sit, x->rank, v.sdims);
  if (sink && kiln__ref_iter_add(&sit, sink->rank, sink->dims, "sink", e) < 0) return -1;

  for (size_t o = 0; o < v.outer; o++)
    for (size_t i = 0; i < v.inner; i++, kiln__ref_iter_next(&sit)) {
      const double *row = x->data + o * v.len * v.inner + i;
      double s0 = sink ? sink->data[sit.off[0]] : -INFINITY;
      double m = s0;
      for (size_t j = 0; j < v.len; j++) {
        double t = row[j * v.inner];
        if (isnan(t) || t > m) m = isnan(m) ? m : t;
      }
      double z = 0;
      if (m != -INFINITY) {
        for (size_t j = 0; j < v.len; j++) z += exp(row[j * v.inner] - m);
        if (sink) z += exp(s0 - m);
      }
      double lse = m + log(z); /* fully masked row: -inf + -inf */
      size_t r = o * v.inner + i;
      if (stats) stats->data[r] = log2_stats ? lse * 1.4426950408889634074 : lse;
      if (mx) mx->data[r] = m;
      if (sum) sum->data[r] = z;
      if (!y) continue;
      double *out = y->data + o * v.len * v.inner + i;
      for (size_t j = 0; j < v.len; j++) {
        double t = row[j * v.inner];
        if (m == -INFINITY) out[j * v.inner] = kind == SM_SOFTMAX ? 0.0 : -INFINITY;
        else out[j * v.inner] = kind == SM_SOFTMAX ? exp(t - m) / z : t - m - log(z);
      }
    }
  return 0;
}

static int eval_softmax_bwd(const ref_op *op, const ref_node *n, kiln_err *e) {
  sm_kind kind = *(const sm_kind *)op->impl;
  ref_tensor *dy, *y, *dx;
  axis_view v;
  if (kiln__ref_need_in(n, "grad|DY", &dy, e) || kiln__ref_need_in(n, "output|Y", &y, e) ||
      kiln__ref_need_out(n, "DX|OUT_0", &dx, e) || axis_view_of(n, y, &v, e))
    return -1;
  if (kiln__ref_check_dims(dy, y->rank, y->dims, "grad", e) ||
      kiln__ref_check_dims(dx, y->rank, y->dims, "DX", e))
    return -1;
  for (size_t o = 0; o < v.outer; o++)
    for (size_t i = 0; i < v.inner; i++) {
      size_t base = o * v.len * v.inner + i;
      double dot = 0;
      for (size_t j = 0; j < v.len; j++) {
        size_t k = base + j * v.inner;
        dot += kind == SM_SOFTMAX ? dy->data[k] * y->data[k] : dy->data[k];
      }
      for (size_t j = 0; j < v.len; j++) {
        size_t k = base + j * v.inner;
        dx->data[k] = kind == SM_SOFTMAX ? y->data[k] * (dy->data[k] - dot)
                                         : dy->data[k] - exp(y->data[k]) * dot;
      }
    }
  return 0;
}
