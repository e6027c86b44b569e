/* kiln start-up benchmark: kiln's own part of process start to first launch, from a pack.
 * Times (context creation excluded and reported beside it): open the pack, look up every
 * plan, load its modules, bind and launch each plan once, synchronize.
 * Usage: build/bench/startup PACK   (a pack whose plans take one tensor x and write y,
 * e.g. tests/specs/bench/ten.lua built with kiln build -o). */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kiln.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define CHECK_CU(call)                                              \
  do {                                                              \
    CUresult r_ = (call);                                           \
    if (r_ != CUDA_SUCCESS) {                                       \
      fprintf(stderr, "startup: %s failed (%d)\n", #call, (int)r_); \
      return 1;                                                     \
    }                                                               \
  } while (0)
#define CHECK_KILN(call)                                                                   \
  do {                                                                                     \
    kiln_status s_ = (call);                                                               \
    if (s_ != KILN_OK) {                                                                   \
      fprintf(stderr, "startup: %s: %s: %s\n", #call, kiln_errstr(s_), kiln_rt_errmsg(rt)); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

int main(int argc, char **argv) {
  double t_main = now_ms();
  if (argc != 2) {
    fprintf(stderr, "usage: startup PACK\n");
    return 2;
  }
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("1..0 # SKIP no CUDA driver\n");
    return 0;
  }
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(lib, "cuInit");
  CUresult (*dev_get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(lib, "cuDeviceGet");
  CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))dlsym(lib, "cuDevicePrimaryCtxRetain");
  CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))dlsym(lib, "cuCtxSetCurrent");
  CUresult (*mem_alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(lib, "cuMemAlloc_v2");
  CUresult (*sync)(void) = (CUresult(*)(void))dlsym(lib, "cuCtxSynchronize");
  if (!init || !dev_get || !retain || !set_current || !mem_alloc || !sync) {
    fprintf(stderr, "startup: driver lacks an entry point\n");
    return 1;
  }
  double t_ctx0 = now_ms();
  CUdevice dev;
  CUcontext ctx;
  CHECK_CU(init(0));
  CHECK_CU(dev_get(&dev, 0));
  CHECK_CU(retain(&ctx, dev));
  CHECK_CU(set_current(ctx));
  CUdeviceptr x, y;
  CHECK_CU(mem_alloc(&x, 64 << 20));
  CHECK_CU(mem_alloc(&y, 64 << 20));
  double t_ctx1 = now_ms();

  kiln_rt *rt = NULL;
  kiln_pack *pack;
  if (kiln_rt_create(&rt) != KILN_OK) return 1;
  CHECK_KILN(kiln_pack_open(rt, argv[1], &pack));
  kiln_pack_info info;
  CHECK_KILN(kiln_pack_info_get(pack, &info));
  int kernels = 0;
  for (int p = 0; p < info.nplans; p++) {
    kiln_plan *plan;
    kiln_bind *b;
    kiln_plan_info pi;
    kiln_tensor_info ti;
    CHECK_KILN(kiln_pack_plan_at(pack, p, &plan));
    CHECK_KILN(kiln_plan_info_get(plan, &pi));
    kernels += pi.nkernels;
    CHECK_KILN(kiln_bind_create(plan, &b));
    for (int t = 0; t < pi.ntensors; t++) {
      CHECK_KILN(kiln_plan_tensor(plan, t, &ti));
      if (ti.role != KILN_ROLE_INPUT && ti.role != KILN_ROLE_OUTPUT) continue;
      int64_t dims[KILN_MAX_DIMS];
      for (int d = 0; d < ti.ndim; d++) dims[d] = ti.dims[d] >= 0 ? ti.dims[d] : 64;
      CHECK_KILN(kiln_bind_tensor(b, ti.name, ti.role == KILN_ROLE_INPUT ? x : y, ti.ndim, dims, NULL, ti.dtype));
    }
    CHECK_KILN(kiln_launch(plan, b, NULL));
    kiln_bind_destroy(b);
  }
  CHECK_CU(sync());
  double t_done = now_ms();
  double own = (t_done - t_main) - (t_ctx1 - t_ctx0);
  printf("startup: %d plans, %d kernels: first launches done %.3f ms after main; context creation %.1f ms "
         "excluded; kiln's own part %.3f ms\n", info.nplans, kernels, t_done - t_main, t_ctx1 - t_ctx0, own);
  kiln_rt_destroy(rt);
  return 0;
}
