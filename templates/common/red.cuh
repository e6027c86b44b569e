// kiln: fp32 sums in global memory shared by CTAs. kiln_red_add2 adds (v0, v1) at p (8-byte
// aligned) without reading back (red: one vector reduction on sm_90, two atomics before);
// kiln_add2_cg is the ordered form's read-add-write through L2 (the CTA owns p while it runs).
__device__ __forceinline__ void kiln_red_add2(float *p, float v0, float v1) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(p), "f"(v0), "f"(v1) : "memory");
#else
  atomicAdd(p, v0);
  atomicAdd(p + 1, v1);
#endif
}
__device__ __forceinline__ void kiln_add2_cg(float *p, float v0, float v1) {
  float a, b;
  asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];" : "=f"(a), "=f"(b) : "l"(p) : "memory");
  asm volatile("st.global.cg.v2.f32 [%0], {%1, %2};" :: "l"(p), "f"(a + v0), "f"(b + v1) : "memory");
}
// Turns between CTAs (deterministic sums): a CTA waits until the counter at p holds its turn
// (acquire), adds, fences its threads' stores, and passes the next turn (release).
__device__ __forceinline__ void kiln_turn_wait(const kiln_u32 *p, int turn) {
  kiln_u32 v;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  } while (v != (kiln_u32)turn);
}
__device__ __forceinline__ void kiln_turn_pass(kiln_u32 *p, int turn) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(p), "r"((kiln_u32)turn) : "memory");
}
