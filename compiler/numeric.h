/* kiln numeric conversions: fp16, bf16, fp8 (e4m3fn, e5m2, e8m0), ints and bool to and from
 * fp64 values, element array encode/decode for host<->device staging.
 *
 * Rounding is round-to-nearest-even everywhere. fp16 and bf16 overflow to +-inf (IEEE).
 * fp8 conversions are "satfinite": finite overflow and +-inf become +-max finite (448 for
 * e4m3, 57344 for e5m2); NaN stays NaN. e8m0 (unsigned, 2^(e-127), e = 255 is NaN) rounds the
 * power of two to nearest (ties up to the larger one), clamps to [2^-127, 2^127], maps 0 to
 * 2^-127 and negative values to NaN. A float argument converts to double exactly, so these
 * double entry points serve float callers too. */
#ifndef KILN_NUMERIC_H
#define KILN_NUMERIC_H

#include <stddef.h>
#include <stdint.h>

uint16_t kiln_fp16_bits(double v);
double kiln_fp16_value(uint16_t bits);
uint16_t kiln_bf16_bits(double v);
double kiln_bf16_value(uint16_t bits);
uint8_t kiln_fp8_e4m3_bits(double v);
double kiln_fp8_e4m3_value(uint8_t bits);
uint8_t kiln_fp8_e5m2_bits(double v);
double kiln_fp8_e5m2_value(uint8_t bits);
uint8_t kiln_fp8_e8m0_bits(double v);
double kiln_fp8_e8m0_value(uint8_t bits);

/* dtype names: fp32 fp16 bf16 fp8_e4m3 fp8_e5m2 fp8_e8m0 int32 int64 bool fp64. */

/* Element size in bytes; 0 for an unknown dtype. */
int kiln_dtype_name_size(const char *dtype);

/* Largest finite value of a float dtype (448 for fp8_e4m3, ...); 0 for non-float dtypes. */
double kiln_dtype_max_finite(const char *dtype);

/* v rounded through dtype: fp32 via float, fp16/bf16/fp8 as above, int32/int64 truncate toward
 * zero with saturation (NaN -> 0), bool -> 0/1 (nonzero or NaN -> 1), fp64 unchanged.
 * An unknown dtype returns v unchanged (check kiln_dtype_size first). */
double kiln_round_to(const char *dtype, double v);

/* n elements of dtype (native little-endian layout) from/to fp64 values. Encoding rounds as
 * kiln_round_to. Return 0, or -1 for an unknown dtype. */
int kiln_encode(const char *dtype, const double *src, void *dst, size_t n);
int kiln_decode(const char *dtype, const void *src, double *dst, size_t n);

#endif
