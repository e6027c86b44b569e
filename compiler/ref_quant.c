/* kiln reference executor: block_scale_quantize / block_scale_dequantize (OPS.md §10.2):
 * fp8 e4m3/e5m2 data with e8m0 power-of-two scales (MXFP8) or e4m3 scales, rounded up, or
 * fp32 scales (the 1x128 / 128x128 recipes) in the fp32 arithmetic the kernels do. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "numeric.h"
#include "ref_impl.h"

enum { SCALE_E8M0, SCALE_E4M3, SCALE_FP32 };

static int eval_quantize(const ref_op *op, const ref_node *n, kiln_err *e);
static int eval_dequantize(const ref_op *op, const ref_node *n, kiln_err *e);

static const char *const Q_IN[] = {"input|X", NULL};
static const char *const Q_OUT[] = {"Y", "scale|SCALE", NULL};
static const char *const Q_ATTRS[] = {"block_size", "axis", "transpose", NULL};
static const char *const D_IN[] = {"input|X", "descale|scale|SCALE", NULL};
static const char *const D_OUT[] = {"Y", NULL};
static const char *const D_ATTRS[] = {"block_size", "is_negative_scale", NULL};

static const ref_op OPS[] = {
    {"block_scale_quantize", Q_IN, Q_OUT, Q_ATTRS, eval_quantize, NULL},
    {"block_scale_dequantize", D_IN, D_OUT, D_ATTRS, eval_dequantize, NULL},
};

const ref_op *kiln__ref_quant_op(const char *name) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
  return NULL;
}

/* 2^ceil(log2(amax / vmax)), exponent clamped to [-127, 127]; amax = 0 gives 2^-127. */
static double e8m0_scale_up(double amax, double vmax) {
  if (isnan(amax)) return NAN;
  if (amax == 0) return ldexp(1.0, -127);
  if (isinf(amax)) return ldexp(1.0, 127);
  int ex;
  double m = frexp(amax / vmax, &ex); /* ratio = m * 2^ex, m in [0.5, 1) */
  int p = m == 0.5 ? ex - 1 : ex;
  if (p < -127) p = -127;
  if (p > 127) p = 127;
  return ldexp(1.0, p);
}

/* The smallest e4m3 value >= amax / vmax (the quotient rounded to fp32, as the kernels
 * compute it), at most 448; amax = 0 gives 0. */
static double e4m3_scale_up(double amax, double vmax) {
  if (isnan(amax)) return NAN;
  float ratio = (float)amax / (float)vmax;
  double r = kiln_round_to("fp8_e4m3", ratio);
  if (r < ratio && r < 448.0) r = kiln_fp8_e4m3_value((uint8_t)(kiln_fp8_e4m3_bits(r) + 1));
  return r;
}

/* An fp32 scale: scale = amax / vmax and the multiplier vmax / amax, each quotient rounded to
 * fp32 (y = v * multiplier, as the kernels compute it); amax = 0 gives 1 and 1 (y = v = 0); a
 * multiplier past fp32's range is FLT_MAX (Transformer Engine's rule). */
static void fp32_scale(double amax, double vmax, float *scale, float *mul) {
  float a = (float)amax, m = (float)vmax;
  if (a == 0) {
    *scale = 1, *mul = 1;
    return;
  }
  *scale = a / m;
  *mul = m / a;
  if (isinf(*mul)) *mul = FLT_MAX;
}

/* One block's data: v / scale rounded to Y's dtype, the quotient computed in fp32 as the kernels
 * do (fp32 scales: v times the multiplier; e8m0: exact either way). */
static double quantize_value(const char *ydt, int scale_kind, double v, double s, float mul) {
  if (scale_kind == SCALE_FP32) return kiln_round_to(ydt, (float)v * mul);
  if (s == 0) return 0.0;
  if (scale_kind == SCALE_E4M3) return kiln_round_to(ydt, (float)v / (float)s);
  return kiln_round_to(ydt, v / s);
}

static int eval_quantize(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  ref_tensor *x, *y, *sc;
  int64_t bs, axis;
  if (kiln__ref_need_in(n, "input|X", &x, e) || kiln__ref_need_out(n, "Y", &y, e) ||
      kiln__ref_need_out(n, "scale|SCALE", &sc, e) ||
      kiln__ref_attr_int(n, "block_size", 0, &bs, e) ||
      kiln__ref_attr_int(n, "axis", -1, &axis, e))
    return -1;
  if (bs <= 0) return kiln_err_set(e, "E_ATTR", "block_scale_quantize needs block_size > 0");
  if (x->rank == 0) return kiln_err_set(e, "E_SHAPE", "block_scale_quantize: rank 0 input");
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis >= x->rank)
    return kiln_err_set(e, "E_ATTR", "block_scale_quantize: axis out of range");
  if (strcmp(y->dtype, "fp8_e4m3") != 0 && strcmp(y->dtype, "fp8_e5m2") != 0)
    return kiln_err_set(e, "E_DTYPE", "block_scale_quantize: Y must be fp8_e4m3 or fp8_e5m2, "
                        "not %s", y->dtype);
  int kind = strcmp(sc->dtype, "fp8_e4m3") == 0 ? SCALE_E4M3
             : strcmp(sc->dtype, "fp32") == 0   ? SCALE_FP32
             : strcmp(sc->dtype, "fp8_e8m0") == 0 ? SCALE_E8M0
                                                  : -1;
  if (kind < 0)
    return kiln_err_set(e, "E_DTYPE", "block_scale_quantize: scale must be fp8_e8m0, fp8_e4m3 "
                        "or fp32, not %s", sc->dtype);
  int64_t sdims[KILN_REF_MAXRANK];
  memcpy(sdims, x->dims, (size_t)x->rank * sizeof *sdims);
  int64_t len = x->dims[axis], nblk = (len + bs - 1) / bs;
  sdims[axis] = nblk;
  if (kiln__ref_check_dims(y, x->rank, x->dims, "Y", e) ||
      kiln__ref_check_dims(sc, x->rank, sdims, "scale", e))
    return -1;
  size_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= (size_t)x->dims[d];
  for (int d = (int)axis + 1; d < x->rank; d++) inner *= (size_t)x->dims[d];
  double vmax = kiln_dtype_max_finite(y->dtype);
  for (size_t o = 0; o < outer; o++)
    for (int64_t b = 0; b < nblk; b++)
      for (size_t i = 0; i < inner; i++) {
        int64_t j0 = b * bs, j1 = j0 + bs < len ? j0 + bs : len;
        double amax = 0;
        for (int64_t j = j0; j < j1; j++) {
          double a = fabs(x->data[(o * (size_t)len + (size_t)j) * inner + i]);
          if (isnan(a) || a > amax) amax = isnan(amax) ? amax : a;
        }
        float fs = 0, mul = 0;
        if (kind == SCALE_FP32) fp32_scale(amax, vmax, &fs, &mul);
        double s = kind == SCALE_FP32 ? fs
                 : kind == SCALE_E4M3 ? e4m3_scale_up(amax, vmax)
                                      : e8m0_scale_up(amax, vmax);
        sc->data[(o * (size_t)nblk + (size_t)b) * inner + i] = s;
        for (int64_t j = j0; j < j1; j++) {
          size_t k = (o * (size_t)len + (size_t)j) * inner + i;
          y->data[k] = quantize_value(y->dtype, kind, x->data[k], s, mul);
        }
      }
  return 0;
}

static int eval_dequantize(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  ref_tensor *x, *sc, *y;
  int neg;
  if (kiln__ref_need_in(n, "input|X", &x, e) ||
      kiln__ref_need_in(n, "descale|scale|SCALE", &sc, e) ||
      kiln__ref_need_out(n, "Y", &y, e) ||
      kiln__ref_attr_bool(n, "is_negative_scale", 0, &neg, e))
    return -1;
  if (neg)
    return kiln_err_set(e, "E_ATTR", "block_scale_dequantize: is_negative_scale is not "
                        "supported by the reference executor");
  if (kiln__ref_check_dims(y, x->rank, x->dims, "Y", e)) return -1;
  /* block_size: a list over the trailing dims, or one integer for the last dim. */
  int64_t blk[KILN_REF_MAXRANK];
  for (int d = 0; d < x->rank; d++) blk[d] = 1;
  json_t *js = json_object_get(n->attrs, "block_size");
  if (json_is_integer(js) && x->rank > 0) {
    blk[x->rank - 1] = json_integer_value(js);
  } else if (json_is_array(js) && (int)json_array_size(js) <= x->rank) {
    int L = (int)json_array_size(js);
    for (int i = 0; i < L; i++) {
      json_t *v = json_array_get(js, (size_t)i);
      if (!json_is_integer(v)) goto bad_attr;
      blk[x->rank - L + i] = json_integer_value(v);
    }
  } else {
    goto bad_attr;
  }
  int64_t sdims[KILN_REF_MAXRANK];
  for (int d = 0; d < x->rank; d++) {
    if (blk[d] <= 0) goto bad_attr;
    sdims[d] = (x->dims[d] + blk[d] - 1) / blk[d];
  }
  if (kiln__ref_check_dims(sc, x->rank, sdims, "descale", e)) return -1;
  ref_iter it;
  kiln__ref_iter_init(&it, x->rank, x->dims);
  for (size_t i = 0; i < x->numel; i++, kiln__ref_iter_next(&it)) {
    size_t s = 0;
    for (int d = 0; d < x->rank; d++) s = s * (size_t)sdims[d] + (size_t)(it.coord[d] / blk[d]);
    y->data[i] = x->data[i] * sc->data[s];
  }
  return 0;
bad_attr:
  return kiln_err_set(e, "E_ATTR", "block_scale_dequantize: block_size must be a positive "
                      "integer or a list of them (one per trailing dim)");
}
