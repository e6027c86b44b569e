// kiln: flags between CTAs in global memory (the GEMM's stream-K fixup). A warp hands data it
// stored to another CTA by __syncwarp() then kiln_flag_release by one lane (release at gpu
// scope: cumulative over the warp's stores); the reader spins in kiln_flag_wait (acquire) before
// it reads them. Flags start at 0 (an init kernel clears them: workspaces are not zeroed).
__device__ __forceinline__ void kiln_flag_release(kiln_u32 *flag) {
  asm volatile("st.release.gpu.global.u32 [%0], 1;" :: "l"(flag) : "memory");
}
__device__ __forceinline__ void kiln_flag_wait(const kiln_u32 *flag) {
  kiln_u32 v;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  } while (v == 0);
}
