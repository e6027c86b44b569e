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
