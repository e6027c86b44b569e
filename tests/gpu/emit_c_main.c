/* A plain C program that runs a kiln kernel through `kiln build --emit-c` output and
 * libkilnrt, the way an application ships it (tests/gpu/emit_c.t builds and runs it).
 * Checks y = a + b for the embedded add_fp32 pack. */
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "add.h"

#define T 777
#define H 1024

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*dev_get_fn)(CUdevice *, int);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t);
typedef CUresult (*sync_fn)(void);

int main(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("no CUDA driver\n");
    return 77;
  }
  init_fn init = (init_fn)dlsym(lib, "cuInit");
  dev_get_fn dev_get = (dev_get_fn)dlsym(lib, "cuDeviceGet");
  retain_fn retain = (retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
  set_fn set = (set_fn)dlsym(lib, "cuCtxSetCurrent");
  alloc_fn alloc = (alloc_fn)dlsym(lib, "cuMemAlloc_v2");
  htod_fn htod = (htod_fn)dlsym(lib, "cuMemcpyHtoD_v2");
  dtoh_fn dtoh = (dtoh_fn)dlsym(lib, "cuMemcpyDtoH_v2");
  sync_fn sync = (sync_fn)dlsym(lib, "cuCtxSynchronize");
  CUdevice dev;
  CUcontext ctx;
  if (!init || init(0) || dev_get(&dev, 0) || retain(&ctx, dev) || set(ctx)) {
    printf("no CUDA device\n");
    return 77;
  }
  size_t n = (size_t)T * H, bytes = n * sizeof(float);
  float *a = malloc(bytes), *b = malloc(bytes), *y = malloc(bytes);
  for (size_t i = 0; i < n; i++) a[i] = (float)rand() / RAND_MAX - 0.5f, b[i] = (float)(i % 97) * 0.25f, y[i] = NAN;
  CUdeviceptr da, db, dy;
  if (alloc(&da, bytes) || alloc(&db, bytes) || alloc(&dy, bytes) || htod(da, a, bytes) || htod(db, b, bytes) ||
      htod(dy, y, bytes)) {
    printf("device memory failed\n");
    return 1;
  }
  kiln_rt *rt;
  kiln_pack *pack;
  kiln_status st;
  if ((st = kiln_rt_create(&rt)) != KILN_OK || (st = add_load(rt, &pack)) != KILN_OK ||
      (st = add_fp32_H_1024_launch(pack, NULL, da, db, dy, T)) != KILN_OK) {
    printf("kiln: %s: %s\n", kiln_errstr(st), kiln_rt_errmsg(rt));
    return 1;
  }
  if (sync() || dtoh(y, dy, bytes)) {
    printf("kernel failed\n");
    return 1;
  }
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += !(y[i] == a[i] + b[i]);
  printf("%zu of %zu elements wrong\n", bad, n);
  kiln_pack_close(pack);
  kiln_rt_destroy(rt);
  return bad ? 1 : 0;
}
