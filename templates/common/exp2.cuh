// kiln: 2^x in one MUFU instruction (ex2.approx, about 2 ulp; results below 2^-126 flush to 0).
__device__ __forceinline__ float kiln_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
