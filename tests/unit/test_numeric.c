/* Unit tests of compiler/numeric.c: conversions checked against hand-computed encodings. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "numeric.h"
#include "tap.h"

static int same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

int main(void) {
  /* fp16: 1/3 = 1365.33 * 2^-12 -> 1365/4096; bits 0 01101 0101010101 */
  OK(kiln_round_to("fp16", 1.0 / 3) == 0.333251953125, "fp16(1/3) = 0.333251953125");
  OK(kiln_fp16_bits(1.0 / 3) == 0x3555, "fp16 bits of 1/3 = 0x3555");
  OK(kiln_fp16_bits(1.0) == 0x3C00 && kiln_fp16_bits(-2.0) == 0xC000, "fp16 1, -2");
  OK(kiln_fp16_value(0x7BFF) == 65504.0, "fp16 max 65504");
  OK(kiln_round_to("fp16", 65519.0) == 65504.0, "fp16 65519 rounds down to max");
  OK(isinf(kiln_round_to("fp16", 65520.0)), "fp16 65520 (tie, odd max) overflows to inf");
  OK(kiln_fp16_bits(ldexp(1, -24)) == 0x0001, "fp16 smallest subnormal 2^-24");
  OK(kiln_round_to("fp16", ldexp(1, -25)) == 0, "fp16 2^-25 ties to even zero");
  OK(kiln_round_to("fp16", ldexp(3, -26)) == ldexp(1, -24), "fp16 0.75 ulp rounds up");
  OK(kiln_fp16_value(0x7C00) == INFINITY && isnan(kiln_fp16_value(0x7E00)), "fp16 inf, NaN");
  OK((kiln_fp16_bits(NAN) & 0x7C00) == 0x7C00 && (kiln_fp16_bits(NAN) & 0x3FF),
     "fp16 NaN encodes as NaN");
  OK(kiln_round_to("fp16", 1.0 + ldexp(1, -11)) == 1.0, "fp16 1+2^-11 ties to even 1");
  OK(kiln_round_to("fp16", 1.0 + 3 * ldexp(1, -11)) == 1.0 + ldexp(1, -9),
     "fp16 1+3*2^-11 ties to even 1+2^-9");

  /* bf16: 1/3 = 170.67 * 2^-9 -> 171/512 */
  OK(kiln_round_to("bf16", 1.0 / 3) == 0.333984375, "bf16(1/3) = 0.333984375");
  OK(kiln_bf16_bits(1.0 / 3) == 0x3EAB, "bf16 bits of 1/3 = 0x3EAB");
  OK(kiln_bf16_bits(1.0) == 0x3F80, "bf16 1.0 = 0x3F80");
  OK(kiln_bf16_value(0x7F7F) == 0x1.fep127, "bf16 max");
  OK(isinf(kiln_round_to("bf16", 3.4e38)), "bf16 3.4e38 overflows to inf");
  OK(isnan(kiln_bf16_value(kiln_bf16_bits(NAN))), "bf16 NaN round trip");

  /* fp8 e4m3 */
  OK(kiln_round_to("fp8_e4m3", 500.0) == 448.0, "e4m3(500) saturates to 448");
  OK(kiln_fp8_e4m3_bits(500.0) == 0x7E && kiln_fp8_e4m3_bits(-500.0) == 0xFE, "e4m3 +-448 bits");
  OK(kiln_round_to("fp8_e4m3", 0.1) == 0.1015625, "e4m3(0.1) = 0.1015625 (13 * 2^-7)");
  OK(kiln_fp8_e4m3_bits(0.1) == 0x1D, "e4m3 bits of 0.1 = 0 0011 101");
  OK(kiln_round_to("fp8_e4m3", INFINITY) == 448.0, "e4m3(inf) saturates to 448");
  OK(kiln_fp8_e4m3_bits(NAN) == 0x7F, "e4m3 NaN = S.1111.111");
  OK(isnan(kiln_fp8_e4m3_value(0x7F)) && isnan(kiln_fp8_e4m3_value(0xFF)), "e4m3 decode NaN");
  OK(kiln_fp8_e4m3_value(0x7E) == 448.0 && kiln_fp8_e4m3_value(0x78) == 256.0,
     "e4m3 S.1111.110 = 448, S.1111.000 = 256 (no inf)");
  OK(kiln_fp8_e4m3_value(0x01) == ldexp(1, -9), "e4m3 smallest subnormal 2^-9");
  OK(kiln_round_to("fp8_e4m3", ldexp(1, -10)) == 0, "e4m3 2^-10 ties to even zero");
  OK(kiln_round_to("fp8_e4m3", 17.0) == 16.0 && kiln_round_to("fp8_e4m3", 19.0) == 20.0,
     "e4m3 17 -> 16 (tie even), 19 -> 20");
  OK(kiln_round_to("fp8_e4m3", 464.0) == 448.0, "e4m3 464 -> 448");

  /* fp8 e5m2 */
  OK(kiln_round_to("fp8_e5m2", 57344.0) == 57344.0 && kiln_fp8_e5m2_bits(57344.0) == 0x7B,
     "e5m2 max 57344 = 0x7B");
  OK(kiln_round_to("fp8_e5m2", 1e6) == 57344.0, "e5m2 1e6 saturates to 57344");
  OK(kiln_round_to("fp8_e5m2", -INFINITY) == -57344.0, "e5m2 -inf saturates");
  OK(kiln_fp8_e5m2_bits(1.0) == 0x3C && kiln_fp8_e5m2_bits(1.25) == 0x3D, "e5m2 1, 1.25");
  OK(kiln_round_to("fp8_e5m2", 1.125) == 1.0 && kiln_round_to("fp8_e5m2", 1.375) == 1.5,
     "e5m2 ties to even: 1.125 -> 1, 1.375 -> 1.5");
  OK(kiln_round_to("fp8_e5m2", 3.0) == 3.0 && kiln_round_to("fp8_e5m2", 0.75) == 0.75,
     "e5m2 exact 3, 0.75");
  OK(kiln_fp8_e5m2_value(0x7C) == INFINITY && isnan(kiln_fp8_e5m2_value(0x7E)),
     "e5m2 decode inf, NaN");
  OK(isnan(kiln_round_to("fp8_e5m2", NAN)) && isnan(kiln_fp8_e5m2_value(kiln_fp8_e5m2_bits(NAN))),
     "e5m2 keeps NaN");
  OK(kiln_fp8_e5m2_value(0x01) == ldexp(1, -16), "e5m2 smallest subnormal 2^-16");

  /* fp8 e8m0 */
  OK(kiln_fp8_e8m0_bits(1.0) == 127 && kiln_fp8_e8m0_bits(0.5) == 126, "e8m0 1, 0.5");
  OK(kiln_fp8_e8m0_value(254) == ldexp(1, 127) && kiln_fp8_e8m0_value(0) == ldexp(1, -127),
     "e8m0 range 2^-127..2^127");
  OK(isnan(kiln_fp8_e8m0_value(255)) && kiln_fp8_e8m0_bits(NAN) == 255, "e8m0 255 is NaN");
  OK(kiln_round_to("fp8_e8m0", 2.9) == 2.0 && kiln_round_to("fp8_e8m0", 3.0) == 4.0,
     "e8m0 rounds to nearest power of two (3 ties up to 4)");

  /* other dtypes */
  OK(kiln_round_to("fp32", 0.1) == 0.100000001490116119384765625, "fp32(0.1)");
  OK(kiln_round_to("int32", 2.7) == 2 && kiln_round_to("int32", -2.7) == -2, "int32 truncates");
  OK(kiln_round_to("int32", 3e9) == 2147483647.0 && kiln_round_to("int32", -3e9) == -2147483648.0,
     "int32 saturates");
  OK(kiln_round_to("int32", NAN) == 0, "int32 NaN -> 0");
  OK(kiln_round_to("int64", -1e30) == -0x1p63, "int64 saturates");
  OK(kiln_round_to("bool", 0.5) == 1 && kiln_round_to("bool", 0.0) == 0 &&
     kiln_round_to("bool", -3) == 1, "bool 0/1");
  OK(same(kiln_round_to("fp64", 0.1), 0.1), "fp64 unchanged");
  OK(kiln_dtype_name_size("fp32") == 4 && kiln_dtype_name_size("fp16") == 2 &&
     kiln_dtype_name_size("bf16") == 2 && kiln_dtype_name_size("fp8_e4m3") == 1 &&
     kiln_dtype_name_size("fp8_e5m2") == 1 && kiln_dtype_name_size("fp8_e8m0") == 1 &&
     kiln_dtype_name_size("int32") == 4 && kiln_dtype_name_size("int64") == 8 &&
     kiln_dtype_name_size("bool") == 1 && kiln_dtype_name_size("fp64") == 8,
     "dtype sizes 4 2 2 1 1 1 4 8 1 8");
  OK(kiln_dtype_name_size("fp4") == 0 && kiln_dtype_name_size(NULL) == 0, "unknown dtype size 0");

  /* encode / decode */
  double src[4] = {1.0, -2.0, 1.0 / 3, 500.0}, back[4];
  uint16_t h[4];
  uint8_t b8[4];
  int32_t i32[4];
  OK(kiln_encode("fp16", src, h, 4) == 0 && h[0] == 0x3C00 && h[1] == 0xC000 &&
     h[2] == 0x3555 && h[3] == 0x5FD0, "encode fp16 (500 = 0x5FD0)");
  OK(kiln_decode("fp16", h, back, 4) == 0 && back[2] == 0.333251953125 && back[3] == 500.0,
     "decode fp16");
  OK(kiln_encode("fp8_e4m3", src, b8, 4) == 0 && b8[0] == 0x38 && b8[1] == 0xC0 &&
     b8[3] == 0x7E, "encode e4m3 (1 = 0x38, -2 = 0xC0, 500 -> 0x7E)");
  OK(kiln_decode("fp8_e4m3", b8, back, 4) == 0 && back[3] == 448.0, "decode e4m3");
  OK(kiln_encode("int32", src, i32, 4) == 0 && i32[1] == -2 && i32[2] == 0 && i32[3] == 500,
     "encode int32");
  float f[4];
  OK(kiln_encode("fp32", src, f, 4) == 0 && f[2] == 1.0f / 3, "encode fp32");
  OK(kiln_decode("fp32", f, back, 4) == 0 && back[2] == (double)(1.0f / 3), "decode fp32");
  uint8_t bl[4];
  OK(kiln_encode("bool", src, bl, 4) == 0 && bl[0] == 1 && bl[3] == 1, "encode bool");
  OK(kiln_encode("nope", src, bl, 4) == -1 && kiln_decode("nope", bl, back, 4) == -1,
     "unknown dtype -> -1");

  /* exhaustive round trips: decode(encode(decode(b))) == decode(b) for every 8/16-bit code */
  int bad = 0;
  for (unsigned b = 0; b < 65536; b++) {
    double v = kiln_fp16_value((uint16_t)b);
    if (!same(kiln_fp16_value(kiln_fp16_bits(v)), v) || (!isnan(v) && kiln_fp16_bits(v) != b)) bad++;
    v = kiln_bf16_value((uint16_t)b);
    if (!same(kiln_bf16_value(kiln_bf16_bits(v)), v) || (!isnan(v) && kiln_bf16_bits(v) != b)) bad++;
  }
  OK(bad == 0, "every fp16/bf16 code round-trips (%d bad)", bad);
  bad = 0;
  for (unsigned b = 0; b < 256; b++) {
    double v = kiln_fp8_e4m3_value((uint8_t)b);
    if (!isnan(v) && kiln_fp8_e4m3_bits(v) != b) bad++;
    v = kiln_fp8_e5m2_value((uint8_t)b);
    if (!isnan(v) && !isinf(v) && kiln_fp8_e5m2_bits(v) != b) bad++;
    v = kiln_fp8_e8m0_value((uint8_t)b);
    if (!isnan(v) && kiln_fp8_e8m0_bits(v) != b) bad++;
  }
  OK(bad == 0, "every fp8 code round-trips (%d bad)", bad);
  /* fp16 agrees with the C compiler's _Float16 conversion where available */
#ifdef __FLT16_MAX__
  bad = 0;
  for (int i = 0; i < 200000; i++) {
    double v = ldexp((double)(i * 2654435761u % 1000003u) / 1000003.0, i % 40 - 24) * (i & 1 ? -1 : 1);
    _Float16 x = (_Float16)(float)v;
    if ((double)x != kiln_round_to("fp16", (double)(float)v)) bad++;
  }
  OK(bad == 0, "fp16 matches _Float16 on 200000 values (%d bad)", bad);
#endif
  TAP_PLAN(tap_n);
  return TAP_DONE();
}
