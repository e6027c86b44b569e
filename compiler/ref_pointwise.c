/* kiln reference executor: the pointwise modes of OPS.md §2.3 (50 FE modes + atan2), with
 * numpy broadcasting of the inputs to OUT_0. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ref_impl.h"

typedef struct {
  double lo, hi, slope;                    /* relu clips and negative slope */
  double swish_beta, elu_alpha, softplus_beta;
} pw_params;

typedef double (*pw_fn)(const double *x, const pw_params *p);

typedef struct {
  ref_op op;
  int arity;
  pw_fn f; /* NULL: gen_index */
} pw_mode;

static const double SQRT_2_PI = 0.79788456080286535588; /* sqrt(2/pi) */
static const double INV_SQRT_2PI = 0.39894228040143267794; /* 1/sqrt(2*pi) */
static const double GELU_C = 0.044715;

static double sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + exp(-z));
  double ez = exp(z);
  return ez / (1.0 + ez);
}
static double softplus1(double z) { return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)); }
static double norm_cdf(double z) { return 0.5 * erfc(-z / sqrt(2.0)); }

#define PW(name, expr) \
  static double name(const double *x, const pw_params *p) { (void)p; return (expr); }

PW(f_add, x[0] + x[1])
PW(f_sub, x[0] - x[1])
PW(f_mul, x[0] * x[1])
PW(f_div, x[0] / x[1])
PW(f_add_square, x[0] + x[1] * x[1])
PW(f_max, fmax(x[0], x[1])) /* as CUDA fmaxf: a NaN operand loses */
PW(f_min, fmin(x[0], x[1]))
PW(f_mod, fmod(x[0], x[1]))
PW(f_pow, pow(x[0], x[1]))
PW(f_atan2, atan2(x[0], x[1]))
PW(f_sqrt, sqrt(x[0]))
PW(f_rsqrt, 1.0 / sqrt(x[0]))
PW(f_reciprocal, 1.0 / x[0])
PW(f_exp, exp(x[0]))
PW(f_log, log(x[0]))
PW(f_neg, -x[0])
PW(f_abs, fabs(x[0]))
PW(f_ceil, ceil(x[0]))
PW(f_floor, floor(x[0]))
PW(f_sin, sin(x[0]))
PW(f_cos, cos(x[0]))
PW(f_tan, tan(x[0]))
PW(f_erf, erf(x[0]))
PW(f_identity, x[0])
PW(f_tanh, tanh(x[0]))
PW(f_sigmoid, sigmoid(x[0]))
PW(f_elu, x[0] > 0 ? x[0] : p->elu_alpha * expm1(x[0]))
PW(f_gelu, x[0] * norm_cdf(x[0]))
PW(f_gelu_tanh,
   0.5 * x[0] * (1.0 + tanh(SQRT_2_PI * (x[0] + GELU_C * x[0] * x[0] * x[0]))))
PW(f_softplus, softplus1(p->softplus_beta * x[0]) / p->softplus_beta)
PW(f_swish, x[0] * sigmoid(p->swish_beta * x[0]))
PW(f_cmp_eq, x[0] == x[1])
PW(f_cmp_neq, x[0] != x[1])
PW(f_cmp_gt, x[0] > x[1])
PW(f_cmp_ge, x[0] >= x[1])
PW(f_cmp_lt, x[0] < x[1])
PW(f_cmp_le, x[0] <= x[1])
PW(f_and, x[0] != 0 && x[1] != 0)
PW(f_or, x[0] != 0 || x[1] != 0)
PW(f_not, x[0] == 0)
PW(f_select, x[2] != 0 ? x[0] : x[1])

/* relu with clips: x <= L -> L + s(x - L); x >= U -> U; else x (NaN falls through). */
static double f_relu(const double *x, const pw_params *p) {
  double v = x[0];
  if (v <= p->lo) return p->lo + p->slope * (v - p->lo);
  if (v >= p->hi) return p->hi;
  return v;
}

/* Backward modes: x[0] = dy (loss), x[1] = forward input. */
static double f_relu_bwd(const double *x, const pw_params *p) {
  double v = x[1], d = v <= p->lo ? p->slope : v >= p->hi ? 0.0 : 1.0;
  if (isnan(v)) d = NAN;
  return x[0] * d;
}
static double f_tanh_bwd(const double *x, const pw_params *p) {
  (void)p;
  double t = tanh(x[1]);
  return x[0] * (1.0 - t * t);
}
static double f_sigmoid_bwd(const double *x, const pw_params *p) {
  (void)p;
  double s = sigmoid(x[1]);
  return x[0] * s * (1.0 - s);
}
static double f_elu_bwd(const double *x, const pw_params *p) {
  return x[0] * (x[1] > 0 ? 1.0 : p->elu_alpha * exp(x[1]));
}
static double f_gelu_bwd(const double *x, const pw_params *p) {
  (void)p;
  double v = x[1];
  return x[0] * (norm_cdf(v) + v * INV_SQRT_2PI * exp(-0.5 * v * v));
}
static double f_gelu_tanh_bwd(const double *x, const pw_params *p) {
  (void)p;
  double v = x[1], t = tanh(SQRT_2_PI * (v + GELU_C * v * v * v));
  return x[0] * (0.5 * (1.0 + t) +
                 0.5 * v * (1.0 - t * t) * SQRT_2_PI * (1.0 + 3.0 * GELU_C * v * v));
}
static double f_softplus_bwd(const double *x, const pw_params *p) {
  return x[0] * sigmoid(p->softplus_beta * x[1]);
}
static double f_swish_bwd(const double *x, const pw_params *p) {
  double bx = p->swish_beta * x[1], s = sigmoid(bx);
  return x[0] * (s + bx * s * (1.0 - s));
}

static const char *const P_AB[] = {"a|IN_0", "b|IN_1", NULL};
static const char *const P_I01[] = {"input0|IN_0", "input1|IN_1", NULL};
static const char *const P_UN[] = {"input|IN_0", NULL};
static const char *const P_BWD[] = {"loss|IN_0", "input|IN_1", NULL};
static const char *const P_CMP[] = {"input|IN_0", "comparison|IN_1", NULL};
static const char *const P_SEL[] = {"input0|IN_0", "input1|IN_1", "mask|IN_2", NULL};
static const char *const P_BIAS[] = {"input|IN_0", "bias|IN_1", NULL};
static const char *const P_SCALE[] = {"input|IN_0", "scale|IN_1", NULL};
static const char *const P_OUT[] = {"OUT_0", NULL};
static const char *const ATTRS[] = {"negative_slope", "lower_clip", "upper_clip", "swish_beta",
                                    "elu_alpha", "softplus_beta", "axis", NULL};

static int eval_pointwise(const ref_op *op, const ref_node *n, kiln_err *e);

#define MODE(name, ports, arity, f) {{name, ports, P_OUT, ATTRS, eval_pointwise, NULL}, arity, f}

static const pw_mode MODES[] = {
    MODE("add", P_AB, 2, f_add),
    MODE("bias", P_BIAS, 2, f_add),
    MODE("sub", P_AB, 2, f_sub),
    MODE("mul", P_AB, 2, f_mul),
    MODE("scale", P_SCALE, 2, f_mul),
    MODE("div", P_AB, 2, f_div),
    MODE("add_square", P_AB, 2, f_add_square),
    MODE("max", P_I01, 2, f_max),
    MODE("min", P_I01, 2, f_min),
    MODE("mod", P_I01, 2, f_mod),
    MODE("pow", P_I01, 2, f_pow),
    MODE("atan2", P_AB, 2, f_atan2),
    MODE("sqrt", P_UN, 1, f_sqrt),
    MODE("rsqrt", P_UN, 1, f_rsqrt),
    MODE("reciprocal", P_UN, 1, f_reciprocal),
    MODE("exp", P_UN, 1, f_exp),
    MODE("log", P_UN, 1, f_log),
    MODE("neg", P_UN, 1, f_neg),
    MODE("abs", P_UN, 1, f_abs),
    MODE("ceil", P_UN, 1, f_ceil),
    MODE("floor", P_UN, 1, f_floor),
    MODE("sin", P_UN, 1, f_sin),
    MODE("cos", P_UN, 1, f_cos),
    MODE("tan", P_UN, 1, f_tan),
    MODE("erf", P_UN, 1, f_erf),
    MODE("identity", P_UN, 1, f_identity),
    MODE("relu", P_UN, 1, f_relu),
    MODE("leaky_relu", P_UN, 1, f_relu),
    MODE("tanh", P_UN, 1, f_tanh),
    MODE("sigmoid", P_UN, 1, f_sigmoid),
    MODE("elu", P_UN, 1, f_elu),
    MODE("gelu", P_UN, 1, f_gelu),
    MODE("gelu_approx_tanh", P_UN, 1, f_gelu_tanh),
    MODE("softplus", P_UN, 1, f_softplus),
    MODE("swish", P_UN, 1, f_swish),
    MODE("relu_backward", P_BWD, 2, f_relu_bwd),
    MODE("leaky_relu_backward", P_BWD, 2, f_relu_bwd),
    MODE("tanh_backward", P_BWD, 2, f_tanh_bwd),
    MODE("sigmoid_backward", P_BWD, 2, f_sigmoid_bwd),
    MODE("elu_backward", P_BWD, 2, f_elu_bwd),
    MODE("gelu_backward", P_BWD, 2, f_gelu_bwd),
    MODE("gelu_approx_tanh_backward", P_BWD, 2, f_gelu_tanh_bwd),
    MODE("softplus_backward", P_BWD, 2, f_softplus_bwd),
    MODE("swish_backward", P_BWD, 2, f_swish_bwd),
    MODE("cmp_eq", P_CMP, 2, f_cmp_eq),
    MODE("cmp_neq", P_CMP, 2, f_cmp_neq),
    MODE("cmp_gt", P_CMP, 2, f_cmp_gt),
    MODE("cmp_ge", P_CMP, 2, f_cmp_ge),
    MODE("cmp_lt", P_CMP, 2, f_cmp_lt),
    MODE("cmp_le", P_CMP, 2, f_cmp_le),
    MODE("logical_and", P_AB, 2, f_and),
    MODE("logical_or", P_AB, 2, f_or),
    MODE("logical_not", P_UN, 1, f_not),
    MODE("gen_index", P_UN, 1, NULL),
    MODE("binary_select", P_SEL, 3, f_select),
};

const ref_op *kiln__ref_pointwise_op(const char *name) {
  for (size_t i = 0; i < sizeof MODES / sizeof MODES[0]; i++)
    if (strcmp(MODES[i].op.name, name) == 0) return &MODES[i].op;
  return NULL;
}

static int read_params(const ref_node *n, pw_params *p, kiln_err *e) {
  if (kiln__ref_attr_num(n, "lower_clip", 0.0, &p->lo, e) ||
      kiln__ref_attr_num(n, "upper_clip", DBL_MAX, &p->hi, e) ||
      kiln__ref_attr_num(n, "negative_slope", 0.0, &p->slope, e) ||
      kiln__ref_attr_num(n, "swish_beta", 1.0, &p->swish_beta, e) ||
      kiln__ref_attr_num(n, "elu_alpha", 1.0, &p->elu_alpha, e) ||
      kiln__ref_attr_num(n, "softplus_beta", 1.0, &p->softplus_beta, e))
    return -1;
  /* The frontend clamps the upper clip to float max when the math is fp32. */
  if (n->compute_dtype && strcmp(n->compute_dtype, "fp32") == 0 && p->hi > FLT_MAX)
    p->hi = FLT_MAX;
  return 0;
}

/* numpy broadcast of the inputs; OUT_0 must have that shape (up to leading 1s). */
static int check_broadcast(const ref_node *n, ref_tensor *const *in, int arity,
                           const ref_tensor *out, kiln_err *e) {
  int r = out->rank;
  for (int k = 0; k < arity; k++)
    if (in[k]->rank > r) r = in[k]->rank;
  for (int d = 1; d <= r; d++) {
    int64_t want = 1;
    for (int k = 0; k < arity; k++) {
      int64_t ext = d <= in[k]->rank ? in[k]->dims[in[k]->rank - d] : 1;
      if (ext == 1) continue;
      if (want != 1 && ext != want)
        return kiln_err_set(e, "E_SHAPE", "%s: inputs do not broadcast (extents %lld and %lld)",
                            n->op, (long long)want, (long long)ext);
      want = ext;
    }
    int64_t got = d <= out->rank ? out->dims[out->rank - d] : 1;
    if (got != want) {
      char a[160];
      return kiln_err_set(e, "E_SHAPE", "%s: OUT_0 dims %s are not the broadcast of the inputs",
                          n->op, kiln__ref_dims_str(out->rank, out->dims, a, sizeof a));
    }
  }
  return 0;
}

static int eval_pointwise(const ref_op *op, const ref_node *n, kiln_err *e) {
  const pw_mode *m = (const pw_mode *)op;
  ref_tensor *in[3], *out;
  for (int k = 0; k < m->arity; k++)
    if (kiln__ref_need_in(n, op->inputs[k], &in[k], e)) return -1;
  if (kiln__ref_need_out(n, "OUT_0", &out, e)) return -1;
  if (check_broadcast(n, in, m->arity, out, e)) return -1;
  pw_params p;
  if (read_params(n, &p, e)) return -1;

  ref_iter it;
  kiln__ref_iter_init(&it, out->rank, out->dims);
  for (int k = 0; k < m->arity; k++)
    if (kiln__ref_iter_add(&it, in[k]->rank, in[k]->dims, in[k]->name, e) < 0) return -1;

  if (!m->f) { /* gen_index: the coordinate along axis of the input's shape */
    int64_t axis;
    if (kiln__ref_attr_int(n, "axis", -1, &axis, e)) return -1;
    if (axis < 0) axis += in[0]->rank;
    if (axis < 0 || axis >= in[0]->rank)
      return kiln_err_set(e, "E_ATTR", "gen_index: axis out of range for rank %d",
                          in[0]->rank);
    int d = (int)axis + (out->rank - in[0]->rank);
    for (size_t i = 0; i < out->numel; i++, kiln__ref_iter_next(&it))
      out->data[i] = d >= 0 ? (double)it.coord[d] : 0.0;
    return 0;
  }
  double x[3];
  for (size_t i = 0; i < out->numel; i++, kiln__ref_iter_next(&it)) {
    for (int k = 0; k < m->arity; k++) x[k] = in[k]->data[it.off[k]];
    out->data[i] = m->f(x, &p);
  }
  return 0;
}
