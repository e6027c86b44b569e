/* kiln numeric conversions: one table-driven rounder/encoder for the small float formats. */
#include "numeric.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A small binary float format. emin is the exponent of the smallest normal (e8m0: of its
 * smallest value); ieee: an all-ones exponent means inf/NaN; sat: satfinite on overflow. */
typedef struct {
  int ebits, mbits, bias, emin;
  double maxf;
  int ieee, sat, sign;
} small_fmt;

static const small_fmt FP16 = {5, 10, 15, -14, 65504.0, 1, 0, 1};
static const small_fmt BF16 = {8, 7, 127, -126, 0x1.fep127, 1, 0, 1};
static const small_fmt E4M3 = {4, 3, 7, -6, 448.0, 0, 1, 1};
static const small_fmt E5M2 = {5, 2, 15, -14, 57344.0, 1, 1, 1};
static const small_fmt E8M0 = {8, 0, 127, -127, 0x1p127, 0, 1, 0};

/* Round-half-to-even of a non-negative y, without depending on the fenv rounding mode. */
static double rne(double y) {
  double f = floor(y), d = y - f;
  if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0.0)) f += 1.0;
  return f;
}

static double fmt_round(const small_fmt *f, double v) {
  if (isnan(v)) return v;
  if (!f->sign) {
    if (v < 0) return NAN;
    if (v == 0) return ldexp(1.0, f->emin);
  }
  if (isinf(v)) return f->sat ? copysign(f->maxf, v) : v;
  if (v == 0) return v;
  double a = fabs(v);
  int ex;
  frexp(a, &ex);
  int e = ex - 1;
  if (e < f->emin) e = f->emin;
  double q = ldexp(1.0, e - f->mbits);
  double r = rne(a / q) * q;
  if (r > f->maxf) r = f->sat ? f->maxf : INFINITY;
  if (!f->sign && r == 0) r = ldexp(1.0, f->emin);
  return copysign(r, v);
}

static uint32_t fmt_bits(const small_fmt *f, double v) {
  double r = fmt_round(f, v);
  int width = f->sign + f->ebits + f->mbits;
  uint32_t s = (f->sign && signbit(r)) ? 1u << (width - 1) : 0;
  uint32_t emax_field = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
  if (isnan(r)) {
    if (!f->ieee) return s | (emax_field << f->mbits) | mmask; /* e4m3 S.1111.111, e8m0 0xff */
    return s | (emax_field << f->mbits) | (1u << (f->mbits - 1));
  }
  if (isinf(r)) return s | (emax_field << f->mbits);
  double a = fabs(r);
  if (a == 0) return s;
  int ex;
  frexp(a, &ex);
  int e = ex - 1;
  if (!f->sign) return (uint32_t)(e + f->bias); /* e8m0: exponent only */
  if (e < f->emin) return s | (uint32_t)ldexp(a, f->mbits - f->emin);
  uint32_t m = (uint32_t)ldexp(a / ldexp(1.0, e) - 1.0, f->mbits);
  return s | ((uint32_t)(e + f->bias) << f->mbits) | m;
}

static double fmt_value(const small_fmt *f, uint32_t bits) {
  if (!f->sign) return bits == 0xffu ? NAN : ldexp(1.0, (int)bits - f->bias);
  int width = 1 + f->ebits + f->mbits;
  uint32_t emax_field = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
  uint32_t ef = (bits >> f->mbits) & emax_field, m = bits & mmask;
  double sgn = (bits >> (width - 1)) & 1u ? -1.0 : 1.0;
  if (f->ieee && ef == emax_field) return m ? NAN : sgn * INFINITY;
  if (!f->ieee && ef == emax_field && m == mmask) return NAN;
  if (ef == 0) return sgn * ldexp((double)m, f->emin - f->mbits);
  return sgn * ldexp(1.0 + ldexp((double)m, -f->mbits), (int)ef - f->bias);
}

uint16_t kiln_fp16_bits(double v) { return (uint16_t)fmt_bits(&FP16, v); }
double kiln_fp16_value(uint16_t bits) { return fmt_value(&FP16, bits); }
uint16_t kiln_bf16_bits(double v) { return (uint16_t)fmt_bits(&BF16, v); }
double kiln_bf16_value(uint16_t bits) { return fmt_value(&BF16, bits); }
uint8_t kiln_fp8_e4m3_bits(double v) { return (uint8_t)fmt_bits(&E4M3, v); }
double kiln_fp8_e4m3_value(uint8_t bits) { return fmt_value(&E4M3, bits); }
uint8_t kiln_fp8_e5m2_bits(double v) { return (uint8_t)fmt_bits(&E5M2, v); }
double kiln_fp8_e5m2_value(uint8_t bits) { return fmt_value(&E5M2, bits); }
uint8_t kiln_fp8_e8m0_bits(double v) { return (uint8_t)fmt_bits(&E8M0, v); }
double kiln_fp8_e8m0_value(uint8_t bits) { return fmt_value(&E8M0, bits); }

typedef enum { DT_UNKNOWN, DT_FP32, DT_FP16, DT_BF16, DT_E4M3, DT_E5M2, DT_E8M0,
               DT_INT32, DT_INT64, DT_BOOL, DT_FP64 } dtype_id;

static const struct {
  const char *name;
  dtype_id id;
  int size;
  const small_fmt *fmt;
} DTYPES[] = {
    {"fp32", DT_FP32, 4, NULL},      {"fp16", DT_FP16, 2, &FP16},
    {"bf16", DT_BF16, 2, &BF16},     {"fp8_e4m3", DT_E4M3, 1, &E4M3},
    {"fp8_e5m2", DT_E5M2, 1, &E5M2}, {"fp8_e8m0", DT_E8M0, 1, &E8M0},
    {"int32", DT_INT32, 4, NULL},    {"int64", DT_INT64, 8, NULL},
    {"bool", DT_BOOL, 1, NULL},      {"fp64", DT_FP64, 8, NULL},
};

static int dtype_index(const char *dtype) {
  if (!dtype) return -1;
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (strcmp(DTYPES[i].name, dtype) == 0) return (int)i;
  return -1;
}

int kiln_dtype_name_size(const char *dtype) {
  int i = dtype_index(dtype);
  return i < 0 ? 0 : DTYPES[i].size;
}

double kiln_dtype_max_finite(const char *dtype) {
  int i = dtype_index(dtype);
  if (i < 0) return 0;
  if (DTYPES[i].fmt) return DTYPES[i].fmt->maxf;
  if (DTYPES[i].id == DT_FP32) return 0x1.fffffep127;
  if (DTYPES[i].id == DT_FP64) return 0x1.fffffffffffffp1023;
  return 0;
}

static double trunc_sat(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  v = trunc(v);
  return v < lo ? lo : v > hi ? hi : v;
}

double kiln_round_to(const char *dtype, double v) {
  int i = dtype_index(dtype);
  if (i < 0) return v;
  if (DTYPES[i].fmt) return fmt_round(DTYPES[i].fmt, v);
  switch (DTYPES[i].id) {
  case DT_FP32: return (double)(float)v;
  case DT_INT32: return trunc_sat(v, -2147483648.0, 2147483647.0);
  case DT_INT64: return trunc_sat(v, -0x1p63, 0x1p63);
  case DT_BOOL: return v != 0 ? 1.0 : 0.0;
  default: return v;
  }
}

static int64_t to_int64(double v) {
  v = trunc_sat(v, -0x1p63, 0x1p63);
  return v >= 0x1p63 ? INT64_MAX : (int64_t)v;
}

int kiln_encode(const char *dtype, const double *src, void *dst, size_t n) {
  int i = dtype_index(dtype);
  if (i < 0) return -1;
  unsigned char *p = dst;
  const small_fmt *f = DTYPES[i].fmt;
  for (size_t k = 0; k < n; k++) {
    double v = src[k];
    switch (DTYPES[i].id) {
    case DT_FP16: case DT_BF16: {
      uint16_t b = (uint16_t)fmt_bits(f, v);
      memcpy(p + 2 * k, &b, 2);
      break;
    }
    case DT_E4M3: case DT_E5M2: case DT_E8M0: p[k] = (uint8_t)fmt_bits(f, v); break;
    case DT_FP32: { float x = (float)v; memcpy(p + 4 * k, &x, 4); break; }
    case DT_FP64: memcpy(p + 8 * k, &v, 8); break;
    case DT_INT32: { int32_t x = (int32_t)trunc_sat(v, -2147483648.0, 2147483647.0);
      memcpy(p + 4 * k, &x, 4); break; }
    case DT_INT64: { int64_t x = to_int64(v); memcpy(p + 8 * k, &x, 8); break; }
    case DT_BOOL: p[k] = v != 0; break;
    default: return -1;
    }
  }
  return 0;
}

int kiln_decode(const char *dtype, const void *src, double *dst, size_t n) {
  int i = dtype_index(dtype);
  if (i < 0) return -1;
  const unsigned char *p = src;
  const small_fmt *f = DTYPES[i].fmt;
  for (size_t k = 0; k < n; k++) {
    switch (DTYPES[i].id) {
    case DT_FP16: case DT_BF16: {
      uint16_t b;
      memcpy(&b, p + 2 * k, 2);
      dst[k] = fmt_value(f, b);
      break;
    }
    case DT_E4M3: case DT_E5M2: case DT_E8M0: dst[k] = fmt_value(f, p[k]); break;
    case DT_FP32: { float x; memcpy(&x, p + 4 * k, 4); dst[k] = x; break; }
    case DT_FP64: memcpy(&dst[k], p + 8 * k, 8); break;
    case DT_INT32: { int32_t x; memcpy(&x, p + 4 * k, 4); dst[k] = x; break; }
    case DT_INT64: { int64_t x; memcpy(&x, p + 8 * k, 8); dst[k] = (double)x; break; }
    case DT_BOOL: dst[k] = p[k] != 0; break;
    default: return -1;
    }
  }
  return 0;
}
