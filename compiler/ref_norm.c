/* kiln reference executor: normalizations (OPS.md §4) — layernorm, rmsnorm, adalayernorm,
 * instancenorm, batchnorm (training, with running statistics), batchnorm_inference, and the
 * backwards. Statistics are per "row": x's dims with 1 on the normalized axes, which are
 *   layernorm, rmsnorm: the axes where scale's extent is not 1;
 *   adalayernorm:       the same but never axis 0 (scale is per sample);
 *   instancenorm:       axes 2.. (per n, c);
 *   batchnorm:          every axis but 1 (per channel).
 * scale and bias broadcast against x; DSCALE / DBIAS sum dy*xhat / dy into their shape. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ref_impl.h"

typedef enum { NORM_LAYER, NORM_RMS, NORM_ADA, NORM_INSTANCE, NORM_BATCH } norm_kind;

static int eval_norm_fwd(const ref_op *op, const ref_node *n, kiln_err *e);
static int eval_norm_bwd(const ref_op *op, const ref_node *n, kiln_err *e);
static int eval_bn_infer(const ref_op *op, const ref_node *n, kiln_err *e);

static const norm_kind LAYER = NORM_LAYER, RMS = NORM_RMS, ADA = NORM_ADA,
                       INSTANCE = NORM_INSTANCE, BATCH = NORM_BATCH;

static const char *const FWD_IN[] = {"input|X", "scale|SCALE", "bias|BIAS", "epsilon|EPSILON",
                                     NULL};
static const char *const FWD_OUT[] = {"Y", "MEAN", "INV_VARIANCE", NULL};
static const char *const FWD_ATTRS[] = {"phase", "epsilon", NULL};
static const char *const RMS_OUT[] = {"Y", "INV_VARIANCE", NULL};
static const char *const BN_IN[] = {"input|X", "scale|SCALE", "bias|BIAS",
                                    "in_running_mean|PREV_RUNNING_MEAN",
                                    "in_running_var|PREV_RUNNING_VAR", "epsilon|EPSILON",
                                    "momentum|MOMENTUM", "peer_stats", NULL};
static const char *const BN_OUT[] = {"Y", "MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN",
                                     "NEXT_RUNNING_VAR", NULL};
static const char *const BN_ATTRS[] = {"epsilon", "momentum", NULL};
static const char *const BNI_IN[] = {"input|X", "mean|MEAN", "inv_variance|INV_VARIANCE",
                                     "scale|SCALE", "bias|BIAS", NULL};
static const char *const BNI_OUT[] = {"Y", NULL};
static const char *const BWD_IN[] = {"grad|DY", "input|X", "scale|SCALE", "mean|MEAN",
                                     "inv_variance|INV_VARIANCE", "epsilon|EPSILON",
                                     "peer_stats", NULL};
static const char *const RMSB_IN[] = {"grad|DY", "input|X", "scale|SCALE",
                                      "inv_variance|INV_VARIANCE", NULL};
static const char *const BWD_OUT[] = {"DX", "DSCALE", "DBIAS", NULL};
static const char *const BWD_ATTRS[] = {"epsilon", NULL};
static const char *const RMSB_ATTRS[] = {"has_dbias", NULL};
static const char *const NO_ATTRS[] = {NULL};
static const char *const UNSUPPORTED[] = {"peer_stats", NULL};

static const ref_op OPS[] = {
    {"layernorm", FWD_IN, FWD_OUT, FWD_ATTRS, eval_norm_fwd, &LAYER},
    {"rmsnorm", FWD_IN, RMS_OUT, FWD_ATTRS, eval_norm_fwd, &RMS},
    {"adalayernorm", FWD_IN, FWD_OUT, FWD_ATTRS, eval_norm_fwd, &ADA},
    {"instancenorm", FWD_IN, FWD_OUT, FWD_ATTRS, eval_norm_fwd, &INSTANCE},
    {"batchnorm", BN_IN, BN_OUT, BN_ATTRS, eval_norm_fwd, &BATCH},
    {"batchnorm_inference", BNI_IN, BNI_OUT, NO_ATTRS, eval_bn_infer, &BATCH},
    {"layernorm_backward", BWD_IN, BWD_OUT, BWD_ATTRS, eval_norm_bwd, &LAYER},
    {"rmsnorm_backward", RMSB_IN, BWD_OUT, RMSB_ATTRS, eval_norm_bwd, &RMS},
    {"adalayernorm_backward", BWD_IN, BWD_OUT, BWD_ATTRS, eval_norm_bwd, &ADA},
    {"instancenorm_backward", BWD_IN, BWD_OUT, BWD_ATTRS, eval_norm_bwd, &INSTANCE},
    {"batchnorm_backward", BWD_IN, BWD_OUT, BWD_ATTRS, eval_norm_bwd, &BATCH},
};

const ref_op *kiln__ref_norm_op(const char *name) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
  return NULL;
}

/* Rows: x's dims with 1 on the normalized axes; m = elements per row. */
typedef struct {
  int64_t sdims[KILN_REF_MAXRANK];
  size_t rows, m;
} norm_shape;

static int norm_shape_of(norm_kind kind, const ref_tensor *x, const ref_tensor *scale,
                         norm_shape *s, kiln_err *e) {
  char a[160], b[160];
  s->rows = s->m = 1;
  if (scale->rank > x->rank) goto bad;
  if ((kind == NORM_INSTANCE && x->rank < 3) || (kind == NORM_BATCH && x->rank < 2))
    return kiln_err_set(e, "E_SHAPE", "input needs rank >= %d",
                        kind == NORM_INSTANCE ? 3 : 2);
  for (int d = 0; d < x->rank; d++) {
    int sd = d - (x->rank - scale->rank);
    int64_t ext = sd >= 0 ? scale->dims[sd] : 1;
    if (ext != 1 && ext != x->dims[d]) goto bad;
    int norm;
    switch (kind) {
    case NORM_INSTANCE: norm = d >= 2; break;
    case NORM_BATCH: norm = d != 1; break;
    case NORM_ADA: norm = d >= 1 && ext != 1; break;
    default: norm = ext != 1; break;
    }
    s->sdims[d] = norm ? 1 : x->dims[d];
    if (norm) s->m *= (size_t)x->dims[d];
    else s->rows *= (size_t)x->dims[d];
  }
  return 0;
bad:
  return kiln_err_set(e, "E_SHAPE", "scale dims %s do not fit input dims %s",
                      kiln__ref_dims_str(scale->rank, scale->dims, a, sizeof a),
                      kiln__ref_dims_str(x->rank, x->dims, b, sizeof b));
}

/* Adds t to the walk over x; t must have exactly want values (so no axis is broadcast). */
static int add_exact(ref_iter *it, const ref_tensor *t, size_t want, kiln_err *e) {
  if (t->numel != want) {
    char a[160];
    return kiln_err_set(e, "E_SHAPE", "'%s' has dims %s (%zu values), expected %zu", t->name,
                        kiln__ref_dims_str(t->rank, t->dims, a, sizeof a), t->numel, want);
  }
  return kiln__ref_iter_add(it, t->rank, t->dims, t->name, e);
}

/* A scalar parameter given as the attribute or as the input port, exactly one. */
static int scalar_param(const ref_node *n, const char *name, const char *port, double *v,
                        kiln_err *e) {
  ref_tensor *t = kiln__ref_in(n, port);
  if (t) {
    if (kiln__ref_attr_has(n, name))
      return kiln_err_set(e, "E_ATTR", "%s: %s given both as attribute and port", n->op, name);
    return kiln__ref_scalar(t, v, e);
  }
  if (!kiln__ref_attr_has(n, name))
    return kiln_err_set(e, "E_ATTR", "%s needs %s (attribute or port)", n->op, name);
  return kiln__ref_attr_num(n, name, 0.0, v, e);
}

/* batchnorm's running statistics: next = (1 - momentum) prev + momentum * batch value, with
 * the unbiased batch variance (PyTorch; unverified for cuDNN, OPS.md §4.4). */
static int running_stats(const ref_node *n, const norm_shape *s, const double *mean,
                         const double *var, kiln_err *e) {
  ref_tensor *pm = kiln__ref_in(n, "in_running_mean|PREV_RUNNING_MEAN");
  ref_tensor *pv = kiln__ref_in(n, "in_running_var|PREV_RUNNING_VAR");
  ref_tensor *nm = kiln__ref_out(n, "NEXT_RUNNING_MEAN"), *nv = kiln__ref_out(n, "NEXT_RUNNING_VAR");
  if (!pm && !pv && !nm && !nv) return 0;
  if (!pm || !pv)
    return kiln_err_set(e, "E_PORT", "batchnorm: running statistics need in_running_mean and "
                        "in_running_var");
  double mom;
  if (scalar_param(n, "momentum", "momentum|MOMENTUM", &mom, e)) return -1;
  ref_tensor *all[4] = {pm, pv, nm, nv};
  for (int i = 0; i < 4; i++)
    if (all[i] && all[i]->numel != s->rows)
      return kiln_err_set(e, "E_SHAPE", "batchnorm: '%s' must have C=%zu values",
                          all[i]->name, s->rows);
  double unbias = s->m > 1 ? (double)s->m / (double)(s->m - 1) : 1.0;
  for (size_t r = 0; r < s->rows; r++) {
    if (nm) nm->data[r] = (1 - mom) * pm->data[r] + mom * mean[r];
    if (nv) nv->data[r] = (1 - mom) * pv->data[r] + mom * var[r] * unbias;
  }
  return 0;
}

static int eval_norm_fwd(const ref_op *op, const ref_node *n, kiln_err *e) {
  norm_kind kind = *(const norm_kind *)op->impl;
  ref_tensor *x, *scale, *y, *bias = kiln__ref_in(n, "bias|BIAS");
  ref_tensor *mean_out = kiln__ref_out(n, "MEAN"), *inv_out = kiln__ref_out(n, "INV_VARIANCE");
  const char *phase;
  double eps;
  if (kiln__ref_reject_ports(n, UNSUPPORTED, e) || kiln__ref_need_in(n, "input|X", &x, e) ||
      kiln__ref_need_in(n, "scale|SCALE", &scale, e) || kiln__ref_need_out(n, "Y", &y, e) ||
      scalar_param(n, "epsilon", "epsilon|EPSILON", &eps, e) ||
      kiln__ref_attr_str(n, "phase", "inference", &phase, e))
    return -1;
  if (strcasecmp(phase, "training") != 0 && strcasecmp(phase, "inference") != 0)
    return kiln_err_set(e, "E_ATTR", "%s: phase must be training or inference", n->op);
  if (!bias && (kind == NORM_LAYER || kind == NORM_INSTANCE || kind == NORM_BATCH))
    return kiln_err_set(e, "E_PORT", "%s needs bias", n->op);
  if (kiln__ref_check_dims(y, x->rank, x->dims, "Y", e)) return -1;
  norm_shape s;
  if (norm_shape_of(kind, x, scale, &s, e)) return -1;

  ref_iter it;
  kiln__ref_iter_init(&it, x->rank, x->dims);
  int k_row = kiln__ref_iter_add(&it, x->rank, s.sdims, "stats", e);
  int k_g = k_row < 0 ? -1 : kiln__ref_iter_add(&it, scale->rank, scale->dims, "scale", e);
  int k_b = k_g < 0 ? -1 : bias ? kiln__ref_iter_add(&it, bias->rank, bias->dims, "bias", e) : 0;
  if (k_b < 0) return -1;
  if ((mean_out && add_exact(&it, mean_out, s.rows, e) < 0) ||
      (inv_out && add_exact(&it, inv_out, s.rows, e) < 0))
    return -1;
  ref_iter start = it;

  double *mean = kiln__ref_alloc(s.rows, e), *var = mean ? kiln__ref_alloc(s.rows, e) : NULL;
  double *inv = var ? kiln__ref_alloc(s.rows, e) : NULL;
  if (!inv) return free(mean), free(var), -1;
  if (kind != NORM_RMS) {
    for (size_t i = 0; i < x->numel; i++, kiln__ref_iter_next(&it))
      mean[it.off[k_row]] += x->data[i];
    for (size_t r = 0; r < s.rows; r++) mean[r] /= (double)s.m;
    it = start;
  }
  for (size_t i = 0; i < x->numel; i++, kiln__ref_iter_next(&it)) {
    double d = x->data[i] - mean[it.off[k_row]];
    var[it.off[k_row]] += d * d;
  }
  for (size_t r = 0; r < s.rows; r++) {
    var[r] /= (double)s.m;
    inv[r] = 1.0 / sqrt(var[r] + eps);
  }
  it = start;
  for (size_t i = 0; i < x->numel; i++, kiln__ref_iter_next(&it)) {
    size_t r = it.off[k_row];
    double v = (x->data[i] - mean[r]) * inv[r] * scale->data[it.off[k_g]];
    y->data[i] = bias ? v + bias->data[it.off[k_b]] : v;
  }
  if (mean_out) memcpy(mean_out->data, mean, s.rows * sizeof *mean);
  if (inv_out) memcpy(inv_out->data, inv, s.rows * sizeof *inv);
  int rc = kind == NORM_BATCH ? running_stats(n, &s, mean, var, e) : 0;
  free(mean);
  free(var);
  free(inv);
  return rc;
}

static int eval_bn_infer(const ref_op *op, const ref_node *n, kiln_err *e) {
  ref_tensor *x, *mean, *inv, *scale, *bias, *y;
  if (kiln__ref_need_in(n, "input|X", &x, e) || kiln__ref_need_in(n, "mean|MEAN", &mean, e) ||
      kiln__ref_need_in(n, "inv_variance|INV_VARIANCE", &inv, e) ||
      kiln__ref_need_in(n, "scale|SCALE", &scale, e) ||
      kiln__ref_need_in(n, "bias|BIAS", &bias, e) || kiln__ref_need_out(n, "Y", &y, e) ||
      kiln__ref_check_dims(y, x->rank, x->dims, "Y", e))
    return -1;
  norm_shape s;
  if (norm_shape_of(*(const norm_kind *)op->impl, x, scale, &s, e)) return -1;
  ref_iter it;
  kiln__ref_iter_init(&it, x->rank, x->dims);
  if (add_exact(&it, mean, s.rows, e) < 0 || add_exact(&it, inv, s.rows, e) < 0 ||
      kiln__ref_iter_add(&it, scale->rank, scale->dims, "scale", e) < 0 ||
      kiln__ref_iter_add(&it, bias->rank, bias->dims, "bias", e) < 0)
    return -1;
  for (size_t i = 0; i < x->numel; i++, kiln__ref_iter_next(&it))
    y->data[i] = scale->data[it.off[2]] * (x->data[i] - mean->data[it.off[0]]) *
                     inv->data[it.off[1]] + bias->data[it.off[3]];
  return 0;
}

static int eval_norm_bwd(const ref_op *op, const ref_node *n, kiln_err *e) {
  norm_kind kind = *(const norm_kind *)op->impl;
  ref_tensor *dy, *x, *scale, *inv = kiln__ref_in(n, "inv_variance|INV_VARIANCE"), *dx;
  ref_tensor *mean = kind == NORM_RMS ? NULL : kiln__ref_in(n, "mean|MEAN");
  ref_tensor *dscale = kiln__ref_out(n, "DSCALE"), *dbias = kiln__ref_out(n, "DBIAS");
  if (kiln__ref_reject_ports(n, UNSUPPORTED, e) || kiln__ref_need_in(n, "grad|DY", &dy, e) ||
      kiln__ref_need_in(n, "input|X", &x, e) || kiln__ref_need_in(n, "scale|SCALE", &scale, e) ||
      kiln__ref_need_out(n, "DX", &dx, e))
    return -1;
  if (!inv || (kind != NORM_RMS && !mean)) {
    if (kind == NORM_INSTANCE) return kiln__ref_unsupported(n, "recomputed statistics", e);
    return kiln_err_set(e, "E_PORT", "%s needs %s", n->op, inv ? "mean" : "inv_variance");
  }
  if (kiln__ref_check_dims(dy, x->rank, x->dims, "grad", e) ||
      kiln__ref_check_dims(dx, x->rank, x->dims, "DX", e))
    return -1;
  norm_shape s;
  if (norm_shape_of(kind, x, scale, &s, e)) return -1;

  ref_iter it;
  kiln__ref_iter_init(&it, x->rank, x->dims);
  int k_inv = add_exact(&it, inv, s.rows, e);
  int k_mean = k_inv < 0 ? -1 : mean ? add_exact(&it, mean, s.rows, e) : 0;
  int k_g = k_mean < 0 ? -1 : kiln__ref_iter_add(&it, scale->rank, scale->dims, "scale", e);
  int k_ds = k_g < 0 ? -1 : dscale ? add_exact(&it, dscale, scale->numel, e) : 0;
  int k_db = k_ds < 0 ? -1 : dbias ? add_exact(&it, dbias, scale->numel, e) : 0;
  if (k_db < 0) return -1;
  ref_iter start = it;

  double *sum_g = kiln__ref_alloc(s.rows, e), *sum_gx = sum_g ? kiln__ref_alloc(s.rows, e) : NULL;
  if (!sum_gx) return free(sum_g), -1;
  if (dscale) memset(dscale->data, 0, dscale->numel * sizeof(double));
  if (dbias) memset(dbias->data, 0, dbias->numel * sizeof(double));
  for (size_t i = 0; i < x->numel; i++, kiln__ref_iter_next(&it)) {
    size_t r = it.off[k_inv];
    double mu = mean ? mean->data[it.off[k_mean]] : 0.0;
    double xhat = (x->data[i] - mu) * inv->data[r], g = dy->data[i] * scale->data[it.off[k_g]];
    sum_g[r] += g;
    sum_gx[r] += g * xhat;
    if (dscale) dscale->data[it.off[k_ds]] += dy->data[i] * xhat;
    if (dbias) dbias->data[it.off[k_db]] += dy->data[i];
  }
  it = start;
  double m = (double)s.m;
  for (size_t i = 0; i < x->numel; i++, kiln__ref_iter_next(&it)) {
    size_t r = it.off[k_inv];
    double mu = mean ? mean->data[it.off[k_mean]] : 0.0;
    double xhat = (x->data[i] - mu) * inv->data[r], g = dy->data[i] * scale->data[it.off[k_g]];
    double c = mean ? sum_g[r] / m : 0.0;
    dx->data[i] = inv->data[r] * (g - c - xhat * sum_gx[r] / m);
  }
  free(sum_g);
  free(sum_gx);
  return 0;
}
