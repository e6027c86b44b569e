/* libkilnrt: loads the CUDA driver with dlopen (no link-time CUDA dependency). */
#include "cuda_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "internal.h"

#if !defined(KILN_LIBCUDA)
#define KILN_LIBCUDA "libcuda.so.1"
#endif
/* The CUDA version whose cuda.h signatures kiln__cuda's members follow. */
#define KILN_CUDA_ABI 12000

kiln__cuda kiln__cu;
static atomic_int cuda_loaded;
static pthread_mutex_t cuda_load_lock = PTHREAD_MUTEX_INITIALIZER;

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*error_name_fn)(CUresult, const char **);

static const struct {
  const char *name;
  size_t offset;
} cuda_symbols[] = {
#define SYM(field) \
  { "cu" #field, offsetof(kiln__cuda, field) }
    SYM(DriverGetVersion),  SYM(GetErrorName),       SYM(GetErrorString), SYM(CtxGetCurrent),
    SYM(CtxGetDevice),      SYM(CtxGetId),           SYM(CtxPushCurrent), SYM(CtxPopCurrent),
    SYM(StreamGetCtx),      SYM(DeviceGetAttribute), SYM(ModuleLoadData), SYM(ModuleUnload),
    SYM(ModuleGetFunction), SYM(FuncSetAttribute),   SYM(LaunchKernel),   SYM(LaunchKernelEx),
    SYM(TensorMapEncodeTiled),
    SYM(DeviceGet),         SYM(DeviceGetCount),     SYM(DeviceGetName),  SYM(DevicePrimaryCtxRetain),
    SYM(DevicePrimaryCtxRelease), SYM(CtxSetCurrent), SYM(CtxSynchronize), SYM(MemAlloc),
    SYM(MemFree),           SYM(MemcpyHtoD),         SYM(MemcpyDtoH),     SYM(MemsetD8),
    SYM(EventCreate),       SYM(EventRecord),        SYM(EventSynchronize), SYM(EventElapsedTime),
    SYM(EventDestroy),      SYM(StreamCreate),       SYM(StreamDestroy),  SYM(StreamBeginCapture),
    SYM(StreamEndCapture),  SYM(GraphInstantiateWithFlags), SYM(GraphLaunch), SYM(GraphExecDestroy),
    SYM(GraphDestroy),
#undef SYM
};

static kiln_status cuda_load_locked(const kiln_rt *rt) {
  void *lib = dlopen(KILN_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    return kiln__fail(rt, KILN_ERR_NO_DRIVER, "cannot load %s (%s): no NVIDIA driver here?",
                      KILN_LIBCUDA, why ? why : "unknown reason");
  }
  get_proc_v2_fn get_v2 = (get_proc_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
  get_proc_v1_fn get_v1 = (get_proc_v1_fn)dlsym(lib, "cuGetProcAddress");
  init_fn init = (init_fn)dlsym(lib, "cuInit");
  error_name_fn error_name = (error_name_fn)dlsym(lib, "cuGetErrorName");
  if (!init || (!get_v2 && !get_v1)) {
    dlclose(lib);
    return kiln__fail(rt, KILN_ERR_NO_DRIVER,
                      "%s lacks cuInit/cuGetProcAddress: driver older than CUDA 12.0",
                      KILN_LIBCUDA);
  }
  CUresult r = init(0);
  if (r != CUDA_SUCCESS) {
    const char *name = NULL;
    if (!error_name || error_name(r, &name) != CUDA_SUCCESS || !name) name = "unknown error";
    dlclose(lib);
    return kiln__fail(rt, KILN_ERR_NO_DRIVER, "cuInit failed: %s (%d)", name, (int)r);
  }
  kiln__cuda cu = {0};
  for (size_t i = 0; i < sizeof cuda_symbols / sizeof cuda_symbols[0]; i++) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
    r = get_v2
            ? get_v2(cuda_symbols[i].name, &fn, KILN_CUDA_ABI, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                     &found)
            : get_v1(cuda_symbols[i].name, &fn, KILN_CUDA_ABI, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    if (r != CUDA_SUCCESS || !fn || found != CU_GET_PROC_ADDRESS_SUCCESS) {
      dlclose(lib);
      return kiln__fail(rt, KILN_ERR_NO_DRIVER,
                        "driver has no %s for CUDA 12.0 (error %d): kiln needs a CUDA 12.0+ "
                        "driver",
                        cuda_symbols[i].name, (int)r);
    }
    *(void **)((char *)&cu + cuda_symbols[i].offset) = fn;
  }
  if ((r = cu.DriverGetVersion(&cu.version)) != CUDA_SUCCESS) cu.version = 0;
  void *fn = NULL;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
  r = get_v2 ? get_v2("cuCtxGetDevResource", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found)
             : get_v1("cuCtxGetDevResource", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
  if (r == CUDA_SUCCESS && found == CU_GET_PROC_ADDRESS_SUCCESS) *(void **)&cu.CtxGetDevResource = fn;
  kiln__cu = cu; /* lib stays loaded for the life of the process */
  atomic_store_explicit(&cuda_loaded, 1, memory_order_release);
  return KILN_OK;
}

kiln_status kiln__cuda_load(const kiln_rt *rt) {
  if (atomic_load_explicit(&cuda_loaded, memory_order_acquire)) return KILN_OK;
  pthread_mutex_lock(&cuda_load_lock);
  kiln_status st =
      atomic_load_explicit(&cuda_loaded, memory_order_relaxed) ? KILN_OK : cuda_load_locked(rt);
  pthread_mutex_unlock(&cuda_load_lock);
  return st;
}

void kiln__cuda_describe(CUresult r, char *buf, size_t size) {
  const char *name = NULL, *text = NULL;
  if (atomic_load_explicit(&cuda_loaded, memory_order_acquire)) {
    if (kiln__cu.GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (kiln__cu.GetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  }
  snprintf(buf, size, "%s (%d): %s", name ? name : "CUDA error", (int)r,
           text ? text : "no description");
}
