/* Unit test of templates/common/gelu.cuh (the GELU for 16-bit and narrower outputs), compiled
 * for the host: its error against x Φ(x) in doubles over a dense grid, and inf and NaN. */
#include <math.h>

#include "tap.h"

/* the template's CUDA qualifiers and its MUFU helper, for the host (exp2f: 2^x to 1 ulp, as
 * close as ex2.approx's 2 ulp) */
#define __device__
#define __forceinline__ static inline
static inline float kiln_exp2(float x) { return exp2f(x); }
#include "../../templates/common/gelu.cuh"

static double gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }

int main(void) {
  double worst = 0, worst_x = 0, worst_abs = 0;
  for (int i = -900000; i <= 900000; i++) {  /* |x| <= 9 in steps of 1e-5 */
    float x = (float)(i * 1e-5);
    double ref = gelu(x), got = kiln_gelu_narrow(x), d = fabs(got - ref);
    if (ref != 0 && d / fabs(ref) > worst) worst = d / fabs(ref), worst_x = x;
    if (d > worst_abs) worst_abs = d;
  }
  DIAG("max relative error %.3g at x = %.5f, max absolute %.3g", worst, worst_x, worst_abs);
  OK(worst < 2e-5, "relative error under 2e-5 for |x| <= 9 (fp16's half-ulp: 4.9e-4)");
  double tail = 0, last = kiln_gelu_narrow(-9.0f);
  for (float x = 9.25f; x < 60; x += 0.25f) {  /* past the fit: the tail shrinks, no sign flip */
    double g = kiln_gelu_narrow(-x);
    if (g > 0 || g < last || kiln_gelu_narrow(x) != x) tail = x;
    last = g;
  }
  OK(tail == 0 && fabs(kiln_gelu_narrow(-9.0f)) < 1e-17,
     "past |x| = 9: gelu(x) = x, gelu(-x) shrinks from gelu(-9) ~ -1e-18 to 0 (first bad x %g)", tail);
  OK(isinf(kiln_gelu_narrow(INFINITY)) && kiln_gelu_narrow(INFINITY) > 0, "gelu(inf) = inf");
  OK(isnan(kiln_gelu_narrow(-INFINITY)), "gelu(-inf) is NaN, as erff's formula gives it");
  OK(isnan(kiln_gelu_narrow(NAN)), "gelu(NaN) is NaN");
  OK(kiln_gelu_narrow(0.0f) == 0.0f, "gelu(0) = 0");
  TAP_PLAN(tap_n);
  return TAP_DONE();
}
