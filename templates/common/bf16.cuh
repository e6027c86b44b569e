// kiln: bf16 <-> fp32 (round to nearest even), no cuda_bf16.h needed.
// The element packed above a zero half: one PTX instruction where a shift of the widened
// value takes three (NVVM unpacks, widens, shifts), which shortens compiles and the SASS.
__device__ __forceinline__ float kiln_bf16_to_f32(kiln_u16 h) {
  float f;
  asm("{ .reg .b16 z; mov.b16 z, 0; mov.b32 %0, {z, %1}; }" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ kiln_u16 kiln_f32_to_bf16(float f) {
  kiln_u16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
// A 32-bit word of two bf16 (the lower-indexed element in the low half): one instruction each
// way per element, and one per pair when packing.
__device__ __forceinline__ float kiln_bf16lo_to_f32(kiln_u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float kiln_bf16hi_to_f32(kiln_u32 w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ kiln_u32 kiln_f32x2_to_bf16x2(float lo, float hi) {
  kiln_u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
