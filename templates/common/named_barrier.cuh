// kiln: named CTA barriers 1..15 (0 is __syncthreads). A barrier completes when `threads`
// threads (a multiple of 32, the same count from every user) have arrived: bar.sync arrives and
// waits, bar.arrive only arrives (a producer's signal that costs it no wait).
__device__ __forceinline__ void kiln_bar_sync(kiln_u32 id, kiln_u32 threads) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void kiln_bar_arrive(kiln_u32 id, kiln_u32 threads) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
// The whole CTA's barrier 0 reached from different code (a warp-specialized kernel's copying and
// computing warps): barrier.sync without .aligned, which __syncthreads() is not.
__device__ __forceinline__ void kiln_cta_sync(kiln_u32 threads) {
  asm volatile("barrier.sync 0, %0;" :: "r"(threads) : "memory");
}
