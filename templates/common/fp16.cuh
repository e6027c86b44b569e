// kiln: fp16 <-> fp32 (round to nearest even), no cuda_fp16.h needed.
__device__ __forceinline__ float kiln_fp16_to_f32(kiln_u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ kiln_u16 kiln_f32_to_fp16(float f) {
  kiln_u16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
// Two fp32 as one 32-bit word of fp16 (the lower-indexed element in the low half).
__device__ __forceinline__ kiln_u32 kiln_f32x2_to_fp16x2(float lo, float hi) {
  kiln_u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
