// kiln: shared-memory mbarriers (sm_90): init, arrive, and a spin on the completion of the
// phase with a given parity (a fresh barrier counts its phase "before 0", parity 1, as done).
__device__ __forceinline__ void kiln_mbar_init(kiln_u32 bar, kiln_u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void kiln_mbar_arrive(kiln_u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void kiln_mbar_wait(kiln_u32 bar, kiln_u32 parity) {
  kiln_u32 done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
