// kiln: fp8 e4m3 / e5m2 <-> fp32, round to nearest even, saturating to the largest finite
// value (NaN stays NaN), one value or a pair; e8m0 (block scales) -> fp32. sm_89+ uses the hardware converts; older SMs compute it (the
// encoder out of line: inlined per element it dominates a fused kernel's compile time).
__device__ __forceinline__ float kiln_fp8_decode(kiln_u8 v, int mbits, int bias, int has_inf) {
  int e = (v & 0x7f) >> mbits, m = v & ((1 << mbits) - 1);
  float s = (v & 0x80) ? -1.0f : 1.0f;
  int emax = (1 << (7 - mbits)) - 1;
  if (has_inf && e == emax) return m ? __int_as_float(0x7fc00000) : s * __int_as_float(0x7f800000);
  if (!has_inf && e == emax && m == (1 << mbits) - 1) return __int_as_float(0x7fc00000);
  if (e == 0) return s * ldexpf((float)m, 1 - bias - mbits);
  return s * ldexpf((float)(m + (1 << mbits)), e - bias - mbits);
}
__device__ __noinline__ kiln_u8 kiln_fp8_encode(float f, int mbits, int bias, float maxv, kiln_u8 nan) {
  kiln_u32 b = __float_as_uint(f);
  kiln_u8 sign = (b >> 24) & 0x80;
  if (f != f) return sign | nan;
  float a = fminf(fabsf(f), maxv);
  int e = (int)((__float_as_uint(a) >> 23) & 0xff) - 127;
  int emin = 1 - bias;
  if (e < emin) e = emin;
  float q = ldexpf(1.0f, e - mbits);
  float r = fminf(rintf(a / q) * q, maxv);
  if (r == 0.0f) return sign;
  kiln_u32 rb = __float_as_uint(r);
  int re = (int)((rb >> 23) & 0xff) - 127;
  if (re < emin) return sign | (kiln_u8)(r / ldexpf(1.0f, emin - mbits));
  return sign | (kiln_u8)(((re + bias) << mbits) | ((rb >> (23 - mbits)) & ((1 << mbits) - 1)));
}
__device__ __forceinline__ float kiln_e4m3_to_f32(kiln_u8 v) {
#if __CUDA_ARCH__ >= 890
  kiln_u32 h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((kiln_u16)v));
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((kiln_u16)(h2 & 0xffff)));
  return f;
#else
  return kiln_fp8_decode(v, 3, 7, 0);
#endif
}
__device__ __forceinline__ kiln_u8 kiln_f32_to_e4m3(float f) {
#if __CUDA_ARCH__ >= 890
  kiln_u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  return (kiln_u8)(r & 0xff);
#else
  return kiln_fp8_encode(f, 3, 7, 448.0f, 0x7f);
#endif
}
__device__ __forceinline__ float kiln_e5m2_to_f32(kiln_u8 v) {
  return kiln_fp8_decode(v, 2, 15, 1);
}
__device__ __forceinline__ kiln_u8 kiln_f32_to_e5m2(float f) {
#if __CUDA_ARCH__ >= 890
  kiln_u16 r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  return (kiln_u8)(r & 0xff);
#else
  return kiln_fp8_encode(f, 2, 15, 57344.0f, 0x7f);
#endif
}
// An e8m0 byte's value: 2^(b - 127), 0xff NaN.
__device__ __forceinline__ float kiln_e8m0_to_f32(kiln_u8 b) {
  return b == 0xff ? __int_as_float(0x7fc00000) : b == 0 ? __int_as_float(0x00400000) : __int_as_float((int)b << 23);
}
// Two values to fp8 in one convert where the SM has it (a the lower byte).
__device__ __forceinline__ kiln_u16 kiln_f32x2_to_e4m3x2(float a, float b) {
#if __CUDA_ARCH__ >= 890
  kiln_u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  return r;
#else
  return (kiln_u16)(kiln_f32_to_e4m3(a) | (kiln_f32_to_e4m3(b) << 8));
#endif
}
__device__ __forceinline__ kiln_u16 kiln_f32x2_to_e5m2x2(float a, float b) {
#if __CUDA_ARCH__ >= 890
  kiln_u16 r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  return r;
#else
  return (kiln_u16)(kiln_f32_to_e5m2(a) | (kiln_f32_to_e5m2(b) << 8));
#endif
}
