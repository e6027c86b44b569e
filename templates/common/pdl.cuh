// kiln: programmatic dependent launch (SM 9.0+, no-ops before): a kernel lets the plan's next
// kernel start before it ends, and that kernel waits here until this one's writes are visible.
__device__ __forceinline__ void kiln_pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void kiln_pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// The start of a kernel launched `pdl_entry` (docs/INTERNALS.md): it waits until whatever ran
// before on the stream is complete, then lets the next kernel launch as its CTAs finish.
__device__ __forceinline__ void kiln_pdl_entry() {
  kiln_pdl_wait();
  kiln_pdl_launch_dependents();
}
