// kiln: GELU, x Φ(x), for a value stored in 16 bits or fewer. Φ's lower tail is
// q(a) = Φ(-a) = 2^(a R(min(a, 9)) - 1), a = |x|, R a degree-7 fit of log2(erfc(a/√2)) / a:
// relative error under 1.6e-5 for |x| <= 9 (fp16's half-ulp is 4.9e-4), ±inf and NaN as
// erff's formula gives them; 14 instructions and one MUFU.EX2 where erff takes about 30
// (needs common/exp2.cuh).
__device__ __forceinline__ float kiln_gelu_narrow(float x) {
  const float a = fabsf(x), c = fminf(a, 9.0f);
  float r = 7.347970410e-08f;
  r = fmaf(r, c, -3.615636615e-06f);
  r = fmaf(r, c, 7.886790991e-05f);
  r = fmaf(r, c, -1.015811344e-03f);
  r = fmaf(r, c, 8.733196184e-03f);
  r = fmaf(r, c, -5.426368862e-02f);
  r = fmaf(r, c, -4.582904875e-01f);
  r = fmaf(r, c, -1.151269794e+00f);
  const float q = kiln_exp2(fmaf(a, r, -1.0f));
  return x * (x >= 0.0f ? 1.0f - q : q);
}
