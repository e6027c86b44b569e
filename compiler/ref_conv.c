/* kiln reference executor: causal depthwise conv1d (OPS.md §9.1, Dao causal_conv1d_fn).
 * x (B, D, L), weight (D, W), bias (D), initial_states / final_states (B, D, W-1), seq_idx
 * (B, L): packed sequences, a tap reaching into another sequence contributes 0. The backward
 * is the exact derivative (dx, dweight, dbias, dinitial_states; dfinal_states flows in). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ref_impl.h"

static int eval_conv(const ref_op *op, const ref_node *n, kiln_err *e);
static int eval_conv_bwd(const ref_op *op, const ref_node *n, kiln_err *e);

static const char *const INPUTS[] = {"x", "weight", "bias", "seq_idx", "initial_states", NULL};
static const char *const OUTPUTS[] = {"y", "final_states", NULL};
static const char *const ATTRS[] = {"activation", "return_final_states", NULL};
static const char *const B_INPUTS[] = {"x",       "weight",         "dout",          "bias",
                                       "seq_idx", "initial_states", "dfinal_states", NULL};
static const char *const B_OUTPUTS[] = {"dx", "dweight", "dbias", "dinitial_states", NULL};
static const char *const B_ATTRS[] = {"activation", "return_dinitial_states", NULL};
static const ref_op OPS[] = {
    {"causal_conv1d", INPUTS, OUTPUTS, ATTRS, eval_conv, NULL},
    {"causal_conv1d_backward", B_INPUTS, B_OUTPUTS, B_ATTRS, eval_conv_bwd, NULL},
};

const ref_op *kiln__ref_conv_op(const char *name) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
  return NULL;
}

/* The operands shared by the forward and the backward, checked. */
typedef struct {
  ref_tensor *x, *w, *bias, *init, *seq;
  int64_t B, D, L, W, H; /* H = W - 1, the history length */
  int silu;
} conv_args;

static int conv_args_of(const ref_node *n, conv_args *a, kiln_err *e) {
  const char *act;
  memset(a, 0, sizeof *a);
  a->bias = kiln__ref_in(n, "bias");
  a->init = kiln__ref_in(n, "initial_states");
  a->seq = kiln__ref_in(n, "seq_idx");
  if (kiln__ref_need_in(n, "x", &a->x, e) || kiln__ref_need_in(n, "weight", &a->w, e) ||
      kiln__ref_attr_str(n, "activation", "identity", &act, e))
    return -1;
  a->silu = strcasecmp(act, "silu") == 0 || strcasecmp(act, "swish") == 0;
  if (!a->silu && strcasecmp(act, "identity") != 0 && strcasecmp(act, "none") != 0)
    return kiln_err_set(e, "E_ATTR", "%s: activation must be identity or silu", n->op);
  if (a->x->rank != 3 || a->w->rank != 2)
    return kiln_err_set(e, "E_SHAPE", "%s: x must be (B, D, L), weight (D, W)", n->op);
  a->B = a->x->dims[0], a->D = a->x->dims[1], a->L = a->x->dims[2], a->W = a->w->dims[1];
  a->H = a->W - 1;
  int64_t wd[2] = {a->D, a->W}, sd[3] = {a->B, a->D, a->H}, qd[2] = {a->B, a->L};
  if (a->W < 1) return kiln_err_set(e, "E_SHAPE", "%s: weight width must be >= 1", n->op);
  if (kiln__ref_check_dims(a->w, 2, wd, "weight", e) ||
      (a->init && kiln__ref_check_dims(a->init, 3, sd, "initial_states", e)) ||
      (a->seq && kiln__ref_check_dims(a->seq, 2, qd, "seq_idx", e)))
    return -1;
  if (a->bias && a->bias->numel != (size_t)a->D)
    return kiln_err_set(e, "E_SHAPE", "%s: bias must have D=%lld values", n->op,
                        (long long)a->D);
  if (a->seq && a->init)
    return kiln_err_set(e, "E_PORT", "%s: seq_idx excludes initial_states", n->op);
  return 0;
}

/* xbar[tau]: the history (initial_states or zeros) for tau < H, then x. */
static double xbar(const conv_args *a, int64_t b, int64_t c, int64_t tau) {
  if (tau >= a->H) return a->x->data[(b * a->D + c) * a->L + tau - a->H];
  return a->init ? a->init->data[(b * a->D + c) * a->H + tau] : 0.0;
}

/* Does tap j of output t read a token of the same sequence (always, without seq_idx)? */
static int tap_ok(const conv_args *a, int64_t b, int64_t t, int64_t j) {
  if (!a->seq) return 1;
  int64_t tau = t + j - a->H;
  const double *sr = a->seq->data + b * a->L;
  return tau >= 0 && sr[tau] == sr[t];
}

/* Pre-activation z[b, c, t]. */
static double conv_z(const conv_args *a, int64_t b, int64_t c, int64_t t) {
  double z = a->bias ? a->bias->data[c] : 0.0;
  const double *wr = a->w->data + c * a->W;
  for (int64_t j = 0; j < a->W; j++)
    if (tap_ok(a, b, t, j)) z += wr[j] * xbar(a, b, c, t + j);
  return z;
}

static double sigmoid(double z) { return z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z)); }

static int eval_conv(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  conv_args a;
  ref_tensor *y, *fin = kiln__ref_out(n, "final_states");
  if (conv_args_of(n, &a, e) || kiln__ref_need_out(n, "y", &y, e) ||
      kiln__ref_check_dims(y, 3, a.x->dims, "y", e))
    return -1;
  int64_t sd[3] = {a.B, a.D, a.H};
  if (fin && kiln__ref_check_dims(fin, 3, sd, "final_states", e)) return -1;
  if (a.seq && fin)
    return kiln_err_set(e, "E_PORT", "causal_conv1d: seq_idx excludes final_states");
  for (int64_t b = 0; b < a.B; b++)
    for (int64_t c = 0; c < a.D; c++) {
      for (int64_t t = 0; t < a.L; t++) {
        double z = conv_z(&a, b, c, t);
        y->data[(b * a.D + c) * a.L + t] = a.silu ? z * sigmoid(z) : z;
      }
      for (int64_t s = 0; fin && s < a.H; s++)
        fin->data[(b * a.D + c) * a.H + s] = xbar(&a, b, c, a.L + s);
    }
  return 0;
}

static int eval_conv_bwd(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  conv_args a;
  ref_tensor *dy, *dx, *dw, *db = kiln__ref_out(n, "dbias");
  ref_tensor *dfin = kiln__ref_in(n, "dfinal_states"), *dinit = kiln__ref_out(n, "dinitial_states");
  if (conv_args_of(n, &a, e) || kiln__ref_need_in(n, "dout", &dy, e) ||
      kiln__ref_need_out(n, "dx", &dx, e) || kiln__ref_need_out(n, "dweight", &dw, e) ||
      kiln__ref_check_dims(dy, 3, a.x->dims, "dout", e) ||
      kiln__ref_check_dims(dx, 3, a.x->dims, "dx", e) ||
      kiln__ref_check_dims(dw, 2, a.w->dims, "dweight", e))
    return -1;
  int64_t sd[3] = {a.B, a.D, a.H};
  if ((dfin && kiln__ref_check_dims(dfin, 3, sd, "dfinal_states", e)) ||
      (dinit && kiln__ref_check_dims(dinit, 3, sd, "dinitial_states", e)))
    return -1;
  if (db && db->numel != (size_t)a.D)
    return kiln_err_set(e, "E_SHAPE", "causal_conv1d_backward: dbias must have D values");
  if (a.seq && dfin)
    return kiln_err_set(e, "E_PORT", "causal_conv1d_backward: seq_idx excludes dfinal_states");
  double *dxbar = kiln__ref_alloc((size_t)(a.L + a.H), e);
  if (!dxbar) return -1;
  memset(dw->data, 0, dw->numel * sizeof(double));
  if (db) memset(db->data, 0, db->numel * sizeof(double));
  for (int64_t b = 0; b < a.B; b++)
    for (int64_t c = 0; c < a.D; c++) {
      const double *wr = a.w->data + c * a.W;
      double *dwr = dw->data + c * a.W;
      memset(dxbar, 0, (size_t)(a.L + a.H) * sizeof *dxbar);
      for (int64_t s = 0; dfin && s < a.H; s++)
        dxbar[a.L + s] += dfin->data[(b * a.D + c) * a.H + s];
      for (int64_t t = 0; t < a.L; t++) {
        double g = dy->data[(b * a.D + c) * a.L + t];
        if (a.silu) {
          double z = conv_z(&a, b, c, t), sg = sigmoid(z);
          g *= sg * (1 + z * (1 - sg));
        }
        if (db) db->data[c] += g;
        for (int64_t j = 0; j < a.W; j++) {
          if (!tap_ok(&a, b, t, j)) continue;
          dxbar[t + j] += wr[j] * g;
          dwr[j] += g * xbar(&a, b, c, t + j);
        }
      }
      for (int64_t t = 0; t < a.L; t++) dx->data[(b * a.D + c) * a.L + t] = dxbar[a.H + t];
      for (int64_t s = 0; dinit && s < a.H; s++)
        dinit->data[(b * a.D + c) * a.H + s] = dxbar[s];
    }
  free(dxbar);
  return 0;
}
