// kiln: the bulk tensor copy engine (TMA, sm_90). A tensor map (CUtensorMap, 128 opaque
// bytes the runtime encodes per launch) arrives by value as a __grid_constant__ parameter;
// one thread copies a box of the tensor into shared memory (128-byte swizzle, zeros past the
// tensor's edges) and the copy completes on an mbarrier as a transaction of its bytes.
struct __align__(64) kiln_tmap {
  kiln_u64 opaque[16];
};
__device__ __forceinline__ void kiln_tma_prefetch(const kiln_tmap *map) {
  asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<kiln_u64>(map)) : "memory");
}
// Fetches `bytes` (a multiple of 16) from a 16-byte aligned global address into L2, ahead of
// their use: a hint, nothing waits for it.
__device__ __forceinline__ void kiln_prefetch_l2_bulk(const void *p, kiln_u32 bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(reinterpret_cast<kiln_u64>(p)), "r"(bytes) : "memory");
}
// Arrives on the barrier and adds `bytes` to the transactions its current phase waits for.
__device__ __forceinline__ void kiln_mbar_expect_tx(kiln_u32 bar, kiln_u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void kiln_tma_load_2d(kiln_u32 dst, const kiln_tmap *map, int c0, int c1, kiln_u32 bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"(reinterpret_cast<kiln_u64>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
__device__ __forceinline__ void kiln_tma_load_3d(kiln_u32 dst, const kiln_tmap *map, int c0, int c1, int c2, kiln_u32 bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               :: "r"(dst), "l"(reinterpret_cast<kiln_u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
__device__ __forceinline__ void kiln_tma_load_4d(kiln_u32 dst, const kiln_tmap *map, int c0, int c1, int c2, int c3,
                                                 kiln_u32 bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
               :: "r"(dst), "l"(reinterpret_cast<kiln_u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar) : "memory");
}
// L2 eviction policies for the copies below (`.L2::cache_hint`): operands read again by later
// tiles stay (evict_last), operands streamed once per wave leave first (evict_first).
__device__ __forceinline__ kiln_u64 kiln_l2_evict_last() {
  kiln_u64 p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ kiln_u64 kiln_l2_evict_first() {
  kiln_u64 p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void kiln_tma_load_2d_hint(kiln_u32 dst, const kiln_tmap *map, int c0, int c1, kiln_u32 bar,
                                                      kiln_u64 policy) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
               " [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(dst), "l"(reinterpret_cast<kiln_u64>(map)), "r"(c0), "r"(c1), "r"(bar), "l"(policy) : "memory");
}
__device__ __forceinline__ void kiln_tma_load_3d_hint(kiln_u32 dst, const kiln_tmap *map, int c0, int c1, int c2,
                                                      kiln_u32 bar, kiln_u64 policy) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
               " [%0], [%1, {%2, %3, %4}], [%5], %6;"
               :: "r"(dst), "l"(reinterpret_cast<kiln_u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(policy)
               : "memory");
}
// The same copy into the shared memory of every CTA of the cluster in `mask` (same offsets),
// completing on each one's barrier at `bar`.
__device__ __forceinline__ void kiln_tma_load_2d_mc(kiln_u32 dst, const kiln_tmap *map, int c0, int c1, kiln_u32 bar,
                                                    kiln_u16 mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(dst), "l"(reinterpret_cast<kiln_u64>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
__device__ __forceinline__ void kiln_tma_load_3d_mc(kiln_u32 dst, const kiln_tmap *map, int c0, int c1, int c2,
                                                    kiln_u32 bar, kiln_u16 mask) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3, %4}], [%5], %6;"
               :: "r"(dst), "l"(reinterpret_cast<kiln_u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask) : "memory");
}
// Tensor stores: a box of shared memory (128-byte swizzle, written before a
// kiln_fence_proxy_async) to the tensor; elements past its edges are not written. The issuing
// thread groups its stores (commit) and waits until at most N groups still read shared
// memory (wait_read: the buffer may be reused) or are still in flight at all (wait).
__device__ __forceinline__ void kiln_tma_store_2d(const kiln_tmap *map, kiln_u32 src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               :: "l"(reinterpret_cast<kiln_u64>(map)), "r"(src), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void kiln_tma_store_3d(const kiln_tmap *map, kiln_u32 src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
               :: "l"(reinterpret_cast<kiln_u64>(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ void kiln_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void kiln_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void kiln_bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}
