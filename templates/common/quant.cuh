// kiln: block-scale quantize (docs/OPS.md §10.2): a block's scale from its amax, given as the
// bits of |v| (NaN sorts above inf), and what its values are multiplied or divided by, in the
// fp32 arithmetic the reference executor does too.
// fp32 scale = fl(amax / vmax), multiplier fl(vmax / amax); amax 0: 1 and 1; a multiplier past
// fp32's range: FLT_MAX (Transformer Engine's rule).
__device__ __forceinline__ float kiln_bq_fp32(kiln_u32 amax_bits, float vmax, float *mul) {
  const float a = __uint_as_float(amax_bits);
  if (a == 0.0f) { *mul = 1.0f; return 1.0f; }
  const float m = __fdiv_rn(vmax, a);
  *mul = m == __int_as_float(0x7f800000) ? 3.40282347e38f : m;
  return __fdiv_rn(a, vmax);
}
// e8m0 scale 2^ceil(log2(amax / vmax)) for vmax = 1.75 * 2^vexp (448, 57344): its biased exponent
// byte, clamped to [0, 254] (inf: 254, NaN: 0xff); the multiplier 2^-p, exact.
__device__ __forceinline__ kiln_u8 kiln_bq_e8m0(kiln_u32 amax_bits, int vexp, float *mul) {
  if (amax_bits > 0x7f800000u) { *mul = __int_as_float(0x7fc00000); return 0xff; }
  int e = amax_bits == 0x7f800000u ? 254 : (int)(amax_bits >> 23) - vexp + ((amax_bits & 0x7fffffu) > 0x600000u ? 1 : 0);
  e = min(max(e, 0), 254);
  *mul = e == 254 ? __int_as_float(0x00400000) : __int_as_float((254 - e) << 23);
  return (kiln_u8)e;
}
// e4m3 scale: the least e4m3 value at or above fl(amax / vmax), at most 448 (its byte in *byte);
// values are divided by it.
__device__ __forceinline__ float kiln_bq_e4m3(kiln_u32 amax_bits, float vmax, kiln_u8 *byte) {
  const float r = __fdiv_rn(__uint_as_float(amax_bits), vmax);
  kiln_u8 b = kiln_f32_to_e4m3(r);
  float s = kiln_e4m3_to_f32(b);
  if (s < r && s < 448.0f) { b = (kiln_u8)(b + 1); s = kiln_e4m3_to_f32(b); }
  *byte = b;
  return s;
}
