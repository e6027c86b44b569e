// kiln: per-tensor amax across CTAs. Values are the bits of non-negative floats, whose
// unsigned order is the float order (a NaN with its sign cleared sorts above +inf, so it
// propagates); max is order-free, so atomicMax gives a deterministic result.
__device__ __forceinline__ kiln_u32 kiln_warp_max_u32(kiln_u32 v) {
  kiln_u32 r;
  asm("redux.sync.max.u32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
  return r;
}
__device__ __forceinline__ void kiln_amax_publish(float *p, kiln_u32 bits) {
  if (bits > *(volatile kiln_u32 *)p) atomicMax((unsigned int *)p, bits);
}
