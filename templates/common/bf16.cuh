// kiln: bf16 <-> fp32 (round to nearest even), no cuda_bf16.h needed.
__device__ __forceinline__ float kiln_bf16_to_f32(kiln_u16 h) { return __uint_as_float(((kiln_u32)h) << 16); }
__device__ __forceinline__ kiln_u16 kiln_f32_to_bf16(float f) {
  kiln_u16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
