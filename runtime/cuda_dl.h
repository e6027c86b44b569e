/* libkilnrt: the CUDA driver, dlopen'ed on first use and resolved through cuGetProcAddress
 * (so every entry point is the variant that matches cuda.h's signature for CUDA 12.0). */
#ifndef KILN_CUDA_DL_H
#define KILN_CUDA_DL_H

#include <cuda.h>

#include "kiln.h"
#include "pack.h"

/* The driver entry points libkilnrt uses. Valid once kiln__cuda_load returned KILN_OK. */
typedef struct kiln__cuda {
  CUresult (*DriverGetVersion)(int *);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*CtxGetId)(CUcontext, unsigned long long *);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*StreamGetCtx)(CUstream, CUcontext *);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void **, void **);
  CUresult (*LaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
  CUresult (*TensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                   const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                   const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  /* Device, memory and timing calls used by the kiln tool (kiln run, GPU tests), not by
   * the launch path. */
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)(void);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*StreamEndCapture)(CUstream, CUgraph *);
  CUresult (*GraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*GraphDestroy)(CUgraph);
  /* Optional (NULL before CUDA 12.4 drivers), resolved for this cuda.h's CUdevResource: a
   * context's SMs, fewer than the device's in a green context. */
  CUresult (*CtxGetDevResource)(CUcontext, CUdevResource *, CUdevResourceType);
  int version; /* cuDriverGetVersion */
} kiln__cuda;

KILN__INTERNAL extern kiln__cuda kiln__cu;

/* Loads libcuda.so.1 once per process (later calls are one atomic load); on failure
 * records the reason on rt and returns KILN_ERR_NO_DRIVER. */
KILN__INTERNAL kiln_status kiln__cuda_load(const kiln_rt *rt);

/* "CUDA_ERROR_INVALID_VALUE: invalid argument" for a detail message. */
KILN__INTERNAL void kiln__cuda_describe(CUresult r, char *buf, size_t size);

#endif
