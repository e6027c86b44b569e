// kiln: thread-block clusters (sm_90): this CTA's rank, arrivals on a peer CTA's mbarrier
// (same shared-memory offset), and the cluster-wide barrier.
__device__ __forceinline__ kiln_u32 kiln_cluster_rank() {
  kiln_u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// CTA-scope release: the arrival only hands back a stage the wgmma reads have finished with; a
// cluster-scope release compiles to a fence that waits for this thread's epilogue stores too
__device__ __forceinline__ void kiln_mbar_arrive_peer(kiln_u32 bar, kiln_u32 peer) {
  asm volatile("{ .reg .b32 ra; mapa.shared::cluster.u32 ra, %0, %1; mbarrier.arrive.shared::cluster.b64 _, [ra]; }"
               :: "r"(bar), "r"(peer) : "memory");
}
// Makes this CTA's mbarrier initializations visible to the cluster (before the first sync).
__device__ __forceinline__ void kiln_fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// Every thread of every CTA of the cluster; threads may arrive from divergent code.
__device__ __forceinline__ void kiln_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
