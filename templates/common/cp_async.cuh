// kiln: shared-memory addresses and cp.async (sm_80+): 16-byte global -> shared copies that
// zero-fill what lies outside the tensor (src_bytes 0), committed and awaited in groups.
__device__ __forceinline__ kiln_u32 kiln_smem_u32(const void *p) {
  kiln_u32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ void kiln_cp_async16(kiln_u32 dst, const void *src, kiln_u32 src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void kiln_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void kiln_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
// A pointer the compiler must treat as computed here (keeps derived addresses out of loops).
__device__ __forceinline__ const kiln_u8 *kiln_opaque(const kiln_u8 *p) {
  asm volatile("" : "+l"(p));
  return p;
}
__device__ __forceinline__ void kiln_st_shared_v4(kiln_u32 dst, kiln_u32 a, kiln_u32 b, kiln_u32 c, kiln_u32 d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void kiln_st_shared_b32(kiln_u32 dst, kiln_u32 a) {
  asm volatile("st.shared.b32 [%0], %1;" :: "r"(dst), "r"(a) : "memory");
}
__device__ __forceinline__ void kiln_st_shared_v2(kiln_u32 dst, kiln_u32 a, kiln_u32 b) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};" :: "r"(dst), "r"(a), "r"(b) : "memory");
}
// 4 bytes (an fp32 row statistic; zero-filled where src_bytes is 0): .ca, the only form of that size
__device__ __forceinline__ void kiln_cp_async4(kiln_u32 dst, const void *src, kiln_u32 src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
