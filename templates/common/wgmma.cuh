// kiln: warpgroup MMA plumbing (sm_90a). Shared-memory matrix descriptors for the 128-byte
// swizzle (PTX ISA "Matrix Descriptor Format"): start address, leading and stride byte
// offsets, all >> 4 in 14-bit fields; base offset 0 because every tile starts on a 1024-byte
// boundary; mode 1 in bits 62-63. K-major tiles: rows of 128 bytes, 8-row groups SBO apart
// (LBO unused, 1). MN-major tiles: 8 k-rows of 128 bytes SBO apart, 64-element MN blocks
// LBO apart.
__device__ __forceinline__ kiln_u64 kiln_wgmma_desc(kiln_u32 addr, kiln_u32 lbo, kiln_u32 sbo) {
  return (kiln_u64)((addr & 0x3FFFF) >> 4) | ((kiln_u64)((lbo & 0x3FFFF) >> 4) << 16) |
         ((kiln_u64)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void kiln_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void kiln_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void kiln_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// Orders this thread's finished generic-proxy writes to shared memory (cp.async, st.shared)
// before later async-proxy reads of it (wgmma operands) that a barrier hands over.
__device__ __forceinline__ void kiln_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
template <int R> __device__ __forceinline__ void kiln_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R));
}
template <int R> __device__ __forceinline__ void kiln_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R));
}
// Keeps the compiler from moving reads or writes of registers an asynchronous wgmma writes
// (its accumulators) or reads (an A operand in registers) across the wait that completes it.
template <int N> __device__ __forceinline__ void kiln_reg_fence(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void kiln_reg_fence(kiln_u32 (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}
