/* GPU test of libkilnrt's launch path. Compiles nothing. Usage: test_launch PACK [GRAPH]
 * [--foreign=PACK2]: PACK a pack of a pointwise add spec built by `kiln build` (tests/gpu/run
 * passes it), GRAPH a graph name (default: the first plan), PACK2 a pack of the same spec with
 * no image for this device. For the plan: a launch that writes y = a + b (checked on the host
 * when the plan has two inputs and one output of fp32/fp16/bf16); typed errors for a wrong
 * shape, dtype or rank, misaligned or NULL pointers, other strides and an unbound input, with
 * no CUDA fault and no write; the workspace (allocated when the plan needs one; unbound,
 * misaligned or too small are typed errors); the positional launch; empty tensors; a CUDA-graph
 * capture; launches from several threads; a thread without a current context; PACK2's plan
 * refused with KILN_ERR_NO_CUBIN; the host overhead against a bare cuLaunchKernel.
 * Prints `1..0 # SKIP no CUDA device` without a driver or device. */
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h" /* the plan's parameter layout, for the bare-launch baseline */
#include "kiln.h"
#include "tap.h"

/* ---- the driver, resolved like the runtime does it ------------------------------------ */

static struct {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)(void);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*StreamEndCapture)(CUstream, CUgraph *);
  CUresult (*GraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*GraphDestroy)(CUgraph);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void **, void **);
  CUresult (*GetErrorName)(CUresult, const char **);
} cu;

static const char *load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return "no CUDA device (no libcuda.so.1)";
  typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                             CUdriverProcAddressQueryResult *);
  gpa_fn gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
  if (!gpa) return "no CUDA device (driver older than 12.5)";
  static const char *names[] = {"cuInit",
                                "cuDeviceGetCount",
                                "cuDeviceGet",
                                "cuDeviceGetAttribute",
                                "cuDevicePrimaryCtxRetain",
                                "cuDevicePrimaryCtxRelease",
                                "cuCtxSetCurrent",
                                "cuCtxSynchronize",
                                "cuMemAlloc",
                                "cuMemFree",
                                "cuMemcpyHtoD",
                                "cuMemcpyDtoH",
                                "cuMemsetD8",
                                "cuStreamCreate",
                                "cuStreamDestroy",
                                "cuStreamSynchronize",
                                "cuStreamBeginCapture",
                                "cuStreamEndCapture",
                                "cuGraphInstantiateWithFlags",
                                "cuGraphLaunch",
                                "cuGraphExecDestroy",
                                "cuGraphDestroy",
                                "cuModuleLoadData",
                                "cuModuleGetFunction",
                                "cuModuleUnload",
                                "cuLaunchKernel",
                                "cuGetErrorName"};
  typedef CUresult (*init_fn)(unsigned);
  init_fn init = (init_fn)dlsym(lib, "cuInit");
  if (!init || init(0) != CUDA_SUCCESS) return "no CUDA device (cuInit failed)";
  void **slots = (void **)&cu;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    CUdriverProcAddressQueryResult q;
    if (gpa(names[i], &slots[i], 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q) != CUDA_SUCCESS ||
        !slots[i])
      return "no CUDA device (driver lacks an entry point)";
  }
  int n = 0;
  if (cu.Init(0) != CUDA_SUCCESS || cu.DeviceGetCount(&n) != CUDA_SUCCESS || n == 0)
    return "no CUDA device";
  return NULL;
}

/* The runtime's detail for a failed status, for test descriptions. */
#define WHY(st) ((st) != KILN_OK ? kiln_rt_errmsg(rt) : "ok")

static const char *cuname(CUresult r) {
  const char *s = NULL;
  cu.GetErrorName(r, &s);
  return s ? s : "?";
}

#define CU(call)                                                                           \
  do {                                                                                     \
    CUresult r_ = (call);                                                                  \
    if (r_ != CUDA_SUCCESS) {                                                              \
      printf("Bail out! %s failed: %s at %s:%d\n", #call, cuname(r_), __FILE__, __LINE__); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* ---- host-side numbers ------------------------------------------------------------------ */

static float bf16_to_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
static float h_to_f(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0    ? ldexpf((float)m, -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : ldexpf((float)(m | 1024), e - 25);
  return s ? -v : v;
}
static uint16_t f_to_h(float f) { /* values here are small and normal: round to nearest */
  uint16_t s = f < 0 ? 0x8000 : 0;
  f = fabsf(f);
  if (f < 6.1e-5f) return s;
  int e;
  float m = frexpf(f, &e); /* f = m * 2^e, m in [0.5, 1) */
  int mant = (int)lrintf((m * 2 - 1) * 1024);
  if (mant == 1024) mant = 0, e++;
  return (uint16_t)(s | (e + 14) << 10 | mant);
}
static float load_elem(const unsigned char *p, kiln_dtype t, int64_t i) {
  uint16_t h;
  float f;
  switch (t) {
  case KILN_DTYPE_FP32: memcpy(&f, p + 4 * i, 4); return f;
  case KILN_DTYPE_BF16: memcpy(&h, p + 2 * i, 2); return bf16_to_f(h);
  case KILN_DTYPE_FP16: memcpy(&h, p + 2 * i, 2); return h_to_f(h);
  default: return NAN;
  }
}
static void store_elem(unsigned char *p, kiln_dtype t, int64_t i, float v) {
  uint16_t h;
  if (t == KILN_DTYPE_FP32)
    memcpy(p + 4 * i, &v, 4);
  else if (t == KILN_DTYPE_BF16)
    h = f_to_bf16(v), memcpy(p + 2 * i, &h, 2);
  else if (t == KILN_DTYPE_FP16)
    h = f_to_h(v), memcpy(p + 2 * i, &h, 2);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* ---- the plan's tensors --------------------------------------------------------------- */

typedef struct tensor {
  kiln_tensor_info info;
  int64_t dims[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
  int64_t span; /* elements the strided tensor covers */
  size_t bytes;
  CUdeviceptr dev;
  unsigned char *host;
} tensor;

static kiln_plan *plan;
static kiln_rt *rt;
static CUcontext ctx;
static int ntensors, ndyn, in0 = -1, in1 = -1, out0 = -1;
static tensor T[64];
static int64_t dyn[KILN_PACK_MAX_DYN];
static const char *dyn_name[KILN_PACK_MAX_DYN];

static int64_t dyn_value(const char *name, size_t len) {
  for (int d = 0; d < ndyn; d++)
    if (strlen(dyn_name[d]) == len && strncmp(dyn_name[d], name, len) == 0) return dyn[d];
  return -1;
}

/* "T*64" with the chosen dynamic dims. */
static int64_t eval_product(const char *s) {
  int64_t v = 1;
  while (*s) {
    while (*s == ' ' || *s == '*') s++;
    const char *tok = s;
    while (*s && *s != '*' && *s != ' ') s++;
    if (s == tok) break;
    v *= (*tok >= '0' && *tok <= '9') ? strtoll(tok, NULL, 10) : dyn_value(tok, (size_t)(s - tok));
  }
  return v;
}

static void setup_tensors(int64_t dynamic_value) {
  for (int d = 0; d < ndyn; d++) dyn[d] = dynamic_value;
  for (int i = 0; i < ntensors; i++) {
    tensor *t = &T[i];
    int64_t span = 1;
    for (int j = 0; j < t->info.ndim; j++) {
      t->dims[j] = t->info.dim_names[j]
                       ? dyn_value(t->info.dim_names[j], strlen(t->info.dim_names[j]))
                       : t->info.dims[j];
      t->strides[j] =
          t->info.stride_exprs[j] ? eval_product(t->info.stride_exprs[j]) : t->info.strides[j];
      if (t->dims[j] == 0) span = 0;
    }
    for (int j = 0; j < t->info.ndim && span; j++) span += (t->dims[j] - 1) * t->strides[j];
    t->span = span;
    t->bytes = (size_t)span * kiln_dtype_size(t->info.dtype);
  }
}

static void alloc_tensors(void) {
  for (int i = 0; i < ntensors; i++) {
    tensor *t = &T[i];
    if (t->info.role != KILN_ROLE_INPUT && t->info.role != KILN_ROLE_OUTPUT) continue;
    CU(cu.MemAlloc(&t->dev, t->bytes + 256));
    t->host = calloc(1, t->bytes + 256);
    if (t->info.role == KILN_ROLE_INPUT) {
      unsigned seed = 1234u + (unsigned)i;
      for (int64_t k = 0; k < t->span; k++) {
        seed = seed * 1664525u + 1013904223u;
        float v = (float)((seed >> 9) % 2001) / 1000.0f - 1.0f;
        if (t->info.dtype == KILN_DTYPE_FP32 || t->info.dtype == KILN_DTYPE_FP16 ||
            t->info.dtype == KILN_DTYPE_BF16)
          store_elem(t->host, t->info.dtype, k, v);
        else
          t->host[k * (int64_t)kiln_dtype_size(t->info.dtype)] = (unsigned char)(seed >> 24) & 1;
      }
      CU(cu.MemcpyHtoD(t->dev, t->host, t->bytes));
    }
  }
}

/* Fills outputs with 0xFF (NaN for floats); synchronous, as the test streams do not
 * synchronize with the legacy stream. */
static void poison_output(void) {
  for (int i = 0; i < ntensors; i++)
    if (T[i].info.role == KILN_ROLE_OUTPUT) CU(cu.MemsetD8(T[i].dev, 0xFF, T[i].bytes));
  CU(cu.CtxSynchronize());
}

static CUdeviceptr ws_dev; /* the plan's workspace, when it needs one */
static size_t ws_bytes;

/* Binds every tensor and scalar but tensor `skip` (-1: none). */
static void bind_except(kiln_bind *b, CUdeviceptr out_override, CUdeviceptr ws, int skip) {
  kiln_bind_reset(b);
  if (ws) kiln_bind_workspace(b, ws, ws_bytes);
  for (int i = 0; i < ntensors; i++) {
    tensor *t = &T[i];
    if (t->info.role == KILN_ROLE_SCALAR) kiln_bind_scalar(b, t->info.name, 1.0);
    if (t->info.role != KILN_ROLE_INPUT && t->info.role != KILN_ROLE_OUTPUT) continue;
    if (i == skip) continue;
    CUdeviceptr p = t->info.role == KILN_ROLE_OUTPUT && out_override ? out_override : t->dev;
    kiln_bind_tensor(b, t->info.name, p, t->info.ndim, t->dims, t->strides, t->info.dtype);
  }
}

static void bind_all(kiln_bind *b, CUdeviceptr out_override, CUdeviceptr ws) {
  bind_except(b, out_override, ws, -1);
}

/* Offset of output multi-index idx in an input with numpy broadcasting. */
static int64_t bcast_offset(const tensor *in, const tensor *out, const int64_t *idx) {
  int64_t off = 0, shift = out->info.ndim - in->info.ndim;
  for (int j = 0; j < in->info.ndim; j++)
    if (in->dims[j] != 1) off += idx[j + shift] * in->strides[j];
  return off;
}

static int numeric; /* the plan is a checkable y = a + b */

/* Copies the output back; counts elements differing from a + b (or still poisoned). */
static int64_t check_output(CUdeviceptr out_dev, int64_t *checked) {
  tensor *o = &T[out0], *a = &T[in0], *b = &T[in1];
  CU(cu.MemcpyDtoH(o->host, out_dev, o->bytes));
  double tol = o->info.dtype == KILN_DTYPE_FP32   ? 1e-6
               : o->info.dtype == KILN_DTYPE_FP16 ? 2e-3
                                                  : 1e-2;
  int64_t bad = 0, n = 0, idx[KILN_MAX_DIMS] = {0};
  int64_t total = 1;
  for (int j = 0; j < o->info.ndim; j++) total *= o->dims[j];
  for (int64_t e = 0; e < total; e++) {
    int64_t rem = e, off = 0;
    for (int j = o->info.ndim - 1; j >= 0; j--) {
      idx[j] = rem % o->dims[j];
      rem /= o->dims[j];
      off += idx[j] * o->strides[j];
    }
    float want = load_elem(a->host, a->info.dtype, bcast_offset(a, o, idx)) +
                 load_elem(b->host, b->info.dtype, bcast_offset(b, o, idx));
    float got = load_elem(o->host, o->info.dtype, off);
    if (!(fabs((double)got - want) <= tol * (1 + fabs(want)))) {
      if (bad < 3) DIAG("element %lld: got %g, want %g", (long long)e, got, want);
      bad++;
    }
    n++;
  }
  *checked = n;
  return bad;
}

static int output_untouched(CUdeviceptr out_dev) {
  tensor *o = &T[out0];
  CU(cu.MemcpyDtoH(o->host, out_dev, o->bytes));
  for (size_t k = 0; k < o->bytes; k++)
    if (o->host[k] != 0xFF) return 0;
  return 1;
}

/* ---- threads ---------------------------------------------------------------------------- */

typedef struct worker {
  int id, with_context, launches;
  CUdeviceptr out, ws;
  CUstream stream;
  kiln_status st;
  char msg[256];
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  if (w->with_context) cu.CtxSetCurrent(ctx);
  kiln_bind *b;
  w->st = kiln_bind_create(plan, &b);
  if (w->st == KILN_OK) {
    bind_all(b, w->out, w->ws);
    for (int i = 0; i < w->launches && w->st == KILN_OK; i++)
      w->st = kiln_launch(plan, b, w->stream);
    kiln_bind_destroy(b);
  }
  if (w->st != KILN_OK) snprintf(w->msg, sizeof w->msg, "%s", kiln_rt_errmsg(rt));
  return NULL;
}

/* ---- bare cuLaunchKernel baseline (single-kernel plans) --------------------------------- */

static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return v[n / 2];
}

static void overhead(kiln_bind *b, CUstream s, int major, int minor) {
  if (plan->nkernels != 1 ||
      plan->kernels[0].cluster[0] * plan->kernels[0].cluster[1] * plan->kernels[0].cluster[2] !=
          1) {
    printf("ok %d - # SKIP overhead baseline needs a single non-cluster kernel\n", ++tap_n);
    return;
  }
  const kiln__kernel *k = &plan->kernels[0];
  int pick = kiln__select_image(k, major, minor);
  int64_t sms;
  int have_ctx;
  if (kiln__context_sms(rt, &sms, &have_ctx) != KILN_OK) {
    printf("not ok %d - SM count: %s\n", ++tap_n, kiln_rt_errmsg(rt));
    return;
  }
  CUmodule mod;
  CUfunction fn;
  CU(cu.ModuleLoadData(&mod, k->images[pick].data));
  CU(cu.ModuleGetFunction(&fn, mod, k->symbol));
  uint64_t values[KILN_PACK_MAX_PARAMS];
  void *args[KILN_PACK_MAX_PARAMS];
  for (int p = 0; p < k->nparams; p++) {
    int64_t a = k->params[p].arg;
    float f = 1.0f;
    values[p] = 0;
    if (k->params[p].kind == KILN__PARAM_TENSOR)
      values[p] = T[a].dev;
    else if (k->params[p].kind == KILN__PARAM_DIM)
      values[p] = (uint64_t)dyn[a];
    else if (k->params[p].kind == KILN__PARAM_I64)
      values[p] = (uint64_t)a;
    else if (k->params[p].kind == KILN__PARAM_WORKSPACE)
      values[p] = ws_dev + (uint64_t)a;
    else if (k->params[p].kind == KILN__PARAM_SMS)
      values[p] = (uint64_t)sms;
    else
      memcpy(&values[p], &f, 4);
    args[p] = &values[p];
  }
  unsigned grid[KILN_PACK_MAX_KERNELS][3];
  kiln__plan_grids(plan, dyn, sms, grid);
  bind_all(b, 0, ws_dev);
  enum { REPS = 21, N = 200 };
  double bare[REPS], ours[REPS];
  for (int r = 0; r < REPS; r++) {
    CU(cu.StreamSynchronize(s));
    double t0 = now_us();
    for (int i = 0; i < N; i++)
      cu.LaunchKernel(fn, grid[0][0], grid[0][1], grid[0][2], k->block[0], k->block[1], k->block[2],
                      k->smem, s, args, NULL);
    bare[r] = (now_us() - t0) / N;
    CU(cu.StreamSynchronize(s));
    t0 = now_us();
    for (int i = 0; i < N; i++) kiln_launch(plan, b, s);
    ours[r] = (now_us() - t0) / N;
  }
  CU(cu.StreamSynchronize(s));
  cu.ModuleUnload(mod);
  double mb = median(bare, REPS), mk = median(ours, REPS);
  DIAG("host time per launch: bare cuLaunchKernel %.2f us, kiln_launch %.2f us (ratio %.3f)", mb,
       mk, mk / mb);
  OK(mk <= 1.2 * mb + 0.05, "kiln_launch host overhead within 1.2x of a bare cuLaunchKernel%s",
     mk <= 1.2 * mb + 0.05 ? "" : " # TODO timing on a shared machine");
}

/* ---- the SM count persistent grids follow ------------------------------------------------ */

typedef CUresult (*dev_resource_fn)(CUdevice, CUdevResource *, CUdevResourceType);
typedef CUresult (*split_fn)(CUdevResource *, unsigned *, const CUdevResource *, CUdevResource *,
                             unsigned, unsigned);
typedef CUresult (*desc_fn)(CUdevResourceDesc *, CUdevResource *, unsigned);
typedef CUresult (*green_create_fn)(CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned);
typedef CUresult (*green_ctx_fn)(CUcontext *, CUgreenCtx);
typedef CUresult (*green_destroy_fn)(CUgreenCtx);

static void *driver_fn(const char *name) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                             CUdriverProcAddressQueryResult *);
  gpa_fn gpa = lib ? (gpa_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
  void *fn = NULL;
  CUdriverProcAddressQueryResult q;
  if (!gpa || gpa(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS ||
      q != CU_GET_PROC_ADDRESS_SUCCESS)
    fn = NULL;
  return fn;
}

/* The primary context's count is the device's; KILN_SM_COUNT overrides it (and a bad value
 * is refused); a green context of part of the SMs gets its own count. */
static void sm_counts(CUdevice dev) {
  int n = 0;
  int64_t sms = 0;
  int have_ctx = 0;
  CU(cu.DeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  unsetenv("KILN_SM_COUNT");
  OK(kiln__context_sms(rt, &sms, &have_ctx) == KILN_OK && have_ctx && sms == n,
     "SM count of the primary context: the device's %d (%lld)", n, (long long)sms);
  setenv("KILN_SM_COUNT", "108", 1);
  OK(kiln__context_sms(rt, &sms, &have_ctx) == KILN_OK && sms == 108,
     "KILN_SM_COUNT=108 overrides it (%lld)", (long long)sms);
  setenv("KILN_SM_COUNT", "300", 1);
  OK(kiln__context_sms(rt, &sms, &have_ctx) == KILN_ERR_INVALID_ARG &&
         strstr(kiln_rt_errmsg(rt), "KILN_SM_COUNT='300'"),
     "KILN_SM_COUNT=300 is refused (%s)", kiln_rt_errmsg(rt));
  unsetenv("KILN_SM_COUNT");
  dev_resource_fn get = (dev_resource_fn)driver_fn("cuDeviceGetDevResource");
  split_fn split = (split_fn)driver_fn("cuDevSmResourceSplitByCount");
  desc_fn gen = (desc_fn)driver_fn("cuDevResourceGenerateDesc");
  green_create_fn create = (green_create_fn)driver_fn("cuGreenCtxCreate");
  green_ctx_fn from = (green_ctx_fn)driver_fn("cuCtxFromGreenCtx");
  green_destroy_fn destroy = (green_destroy_fn)driver_fn("cuGreenCtxDestroy");
  if (!get || !split || !gen || !create || !from || !destroy) {
    printf("ok %d - # SKIP the driver has no green contexts\n", ++tap_n);
    return;
  }
  CUdevResource all, part, rest;
  CUdevResourceDesc desc;
  CUgreenCtx green;
  CUcontext gctx;
  unsigned groups = 1;
  memset(&all, 0, sizeof all);
  memset(&part, 0, sizeof part);
  memset(&rest, 0, sizeof rest);
  CUresult r = get(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
  if (r == CUDA_SUCCESS) r = split(&part, &groups, &all, &rest, 0, 16);
  if (r == CUDA_SUCCESS) r = gen(&desc, &part, 1);
  if (r == CUDA_SUCCESS) r = create(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
  if (r != CUDA_SUCCESS) {
    printf("ok %d - # SKIP no green context of 16 SMs here (%s)\n", ++tap_n, cuname(r));
    return;
  }
  CU(from(&gctx, green));
  CU(cu.CtxSetCurrent(gctx));
  kiln_status st_sms = kiln__context_sms(rt, &sms, &have_ctx);
  CU(cu.CtxSetCurrent(ctx));
  OK(st_sms == KILN_OK && sms == (int64_t)part.sm.smCount && sms < n,
     "a green context of %u SMs: grids for its %lld", part.sm.smCount, (long long)sms);
  destroy(green);
}

/* Bindings of an input a caller gets wrong: each launch is refused with its typed error. */
static void bad_input_bindings(kiln_bind *b, CUstream s) {
  const int i = in0 >= 0 && in0 < 1000 ? in0 : out0;
  const tensor *t = &T[i];
  const char *name = t->info.name;
  kiln_status st;
  bind_except(b, 0, ws_dev, i);
  st = kiln_launch(plan, b, s);
  OK(st == KILN_ERR_UNBOUND, "tensor '%s' unbound -> KILN_ERR_UNBOUND (%s)", name,
     kiln_rt_errmsg(rt));
  kiln_bind_tensor(b, name, 0, t->info.ndim, t->dims, t->strides, t->info.dtype);
  st = kiln_launch(plan, b, s);
  OK(st == KILN_ERR_INVALID_ARG, "NULL pointer -> KILN_ERR_INVALID_ARG (%s)", kiln_rt_errmsg(rt));
  int64_t dims[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
  memcpy(dims, t->dims, sizeof dims);
  memcpy(strides, t->strides, sizeof strides);
  if (t->info.ndim < KILN_MAX_DIMS) {
    dims[t->info.ndim] = 1, strides[t->info.ndim] = 1;
    kiln_bind_tensor(b, name, t->dev, t->info.ndim + 1, dims, strides, t->info.dtype);
    st = kiln_launch(plan, b, s);
    OK(st == KILN_ERR_SHAPE, "rank %d for rank %d -> KILN_ERR_SHAPE (%s)", t->info.ndim + 1,
       t->info.ndim, kiln_rt_errmsg(rt));
  }
  const int inner = t->info.ndim - 1;
  if (inner >= 0 && t->dims[inner] > 1) {
    memcpy(strides, t->strides, sizeof strides);
    strides[inner] = 2 * t->strides[inner];
    kiln_bind_tensor(b, name, t->dev, t->info.ndim, t->dims, strides, t->info.dtype);
    st = kiln_launch(plan, b, s);
    OK(st == KILN_ERR_STRIDE, "innermost stride doubled -> KILN_ERR_STRIDE (%s)",
       kiln_rt_errmsg(rt));
  }
  bind_all(b, 0, ws_dev);
}

/* A pack with no image for this device: opens, and loading or launching its plan is refused
 * with KILN_ERR_NO_CUBIN naming the archs it has. */
static void foreign_pack(const char *path, CUstream s) {
  kiln_pack *p;
  kiln_plan *fp;
  kiln_status st = kiln_pack_open(rt, path, &p);
  OK(st == KILN_OK, "pack for another SM opens (%s)", WHY(st));
  if (st != KILN_OK) return;
  OK(kiln_pack_plan_at(p, 0, &fp) == KILN_OK, "its plan found");
  st = kiln_plan_load(fp);
  OK(st == KILN_ERR_NO_CUBIN && strstr(kiln_rt_errmsg(rt), "sm_"),
     "loading it -> KILN_ERR_NO_CUBIN (%s)", kiln_rt_errmsg(rt));
  kiln_bind *b;
  kiln_bind_create(fp, &b);
  for (int i = 0; i < ntensors; i++)
    if (T[i].info.role == KILN_ROLE_INPUT || T[i].info.role == KILN_ROLE_OUTPUT)
      kiln_bind_tensor(b, T[i].info.name, T[i].dev, T[i].info.ndim, T[i].dims, T[i].strides,
                       T[i].info.dtype);
  if (ws_dev) kiln_bind_workspace(b, ws_dev, ws_bytes);
  st = kiln_launch(fp, b, s);
  OK(st == KILN_ERR_NO_CUBIN, "launching it -> KILN_ERR_NO_CUBIN (%s)", kiln_rt_errmsg(rt));
  kiln_bind_destroy(b);
  OK(kiln_pack_close(p) == KILN_OK && cu.CtxSynchronize() == CUDA_SUCCESS,
     "no CUDA fault, pack closed");
}

int main(int argc, char **argv) {
  const char *why = load_driver();
  if (why) return TAP_SKIP_ALL(why);
  if (argc < 2) return TAP_SKIP_ALL("no pack given (tests/gpu/run passes one)");
  const char *graph = NULL, *foreign = NULL; /* [GRAPH] [--foreign=PACK] */
  for (int i = 2; i < argc; i++)
    if (strncmp(argv[i], "--foreign=", 10) == 0)
      foreign = argv[i] + 10;
    else
      graph = argv[i];
  CUdevice dev;
  int major, minor;
  CU(cu.DeviceGet(&dev, 0));
  CU(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  CU(cu.DevicePrimaryCtxRetain(&ctx, dev));
  CU(cu.CtxSetCurrent(ctx));

  kiln_pack *pack;
  kiln_status st;
  OK(kiln_rt_create(&rt) == KILN_OK, "runtime created");
  int version = 0;
  OK(kiln_rt_driver_version(rt, &version) == KILN_OK && version >= 12000,
     "driver loaded (CUDA %d), device sm_%d%d", version, major, minor);
  st = kiln_pack_open(rt, argv[1], &pack);
  OK(st == KILN_OK, "pack %s opens (%s)", argv[1], WHY(st));
  if (st != KILN_OK) return TAP_PLAN(tap_n), 1;
  if (graph)
    st = kiln_plan_get(pack, graph, NULL, &plan);
  else
    st = kiln_pack_plan_at(pack, 0, &plan);
  OK(st == KILN_OK, "plan found (%s)", WHY(st));
  if (st != KILN_OK) return TAP_PLAN(tap_n), 1;
  kiln_plan_info info;
  kiln_plan_info_get(plan, &info);
  DIAG("plan %s [%s]: %d tensors, %d kernels, %d dynamic dims", info.graph, info.instance,
       info.ntensors, info.nkernels, info.ndims);
  ntensors = info.ntensors < 64 ? info.ntensors : 64;
  ndyn = info.ndims;
  for (int d = 0; d < ndyn; d++) kiln_plan_dim(plan, d, &dyn_name[d]);
  for (int i = 0; i < ntensors; i++) {
    kiln_plan_tensor(plan, i, &T[i].info);
    if (T[i].info.role == KILN_ROLE_INPUT) {
      if (in0 < 0)
        in0 = i;
      else if (in1 < 0)
        in1 = i;
      else
        in1 = 1000;
    }
    if (T[i].info.role == KILN_ROLE_OUTPUT) out0 = out0 < 0 ? i : 1000;
  }
  numeric = in0 >= 0 && in1 >= 0 && in1 < 1000 && out0 >= 0 && out0 < 1000;
  for (int i = 0; numeric && i < ntensors; i++)
    if ((T[i].info.role == KILN_ROLE_INPUT || T[i].info.role == KILN_ROLE_OUTPUT) &&
        T[i].info.dtype != KILN_DTYPE_FP32 && T[i].info.dtype != KILN_DTYPE_FP16 &&
        T[i].info.dtype != KILN_DTYPE_BF16)
      numeric = 0;
  if (!numeric) DIAG("not a two-input one-output float plan: results are not checked");
  if (out0 < 0 || out0 == 1000) out0 = -1;

  setup_tensors(1027); /* odd: exercises the tail of vectorized kernels */
  alloc_tensors();
  CUstream s;
  CU(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  st = kiln_plan_load(plan);
  OK(st == KILN_OK, "modules load for sm_%d%d (%s)", major, minor, WHY(st));

  kiln_bind *b;
  kiln_bind_create(plan, &b);
  bind_all(b, 0, 0);
  st = kiln_plan_workspace_size(plan, b, &ws_bytes);
  OK(st == KILN_OK && (ws_bytes % 256) == 0, "workspace size: %zu bytes (%s)", ws_bytes, WHY(st));
  if (ws_bytes) {
    CU(cu.MemAlloc(&ws_dev, ws_bytes + 256));
    st = kiln_launch(plan, b, s);
    OK(st == KILN_ERR_UNBOUND, "no workspace bound -> KILN_ERR_UNBOUND (%s)", kiln_rt_errmsg(rt));
    kiln_bind_workspace(b, ws_dev + 128, ws_bytes);
    st = kiln_launch(plan, b, s);
    OK(st == KILN_ERR_ALIGN, "misaligned workspace -> KILN_ERR_ALIGN (%s)", kiln_rt_errmsg(rt));
    kiln_bind_workspace(b, ws_dev, ws_bytes - 256);
    st = kiln_launch(plan, b, s);
    OK(st == KILN_ERR_INVALID_ARG, "too small a workspace -> KILN_ERR_INVALID_ARG (%s)",
       kiln_rt_errmsg(rt));
  }
  bind_all(b, 0, ws_dev);
  if (out0 >= 0) poison_output();
  st = kiln_launch(plan, b, s);
  OK(st == KILN_OK, "launch (%s)", WHY(st));
  CUresult r = cu.StreamSynchronize(s);
  OK(r == CUDA_SUCCESS, "kernels ran without a CUDA error (%s)", cuname(r));
  int64_t n = 0;
  if (numeric) OK(check_output(T[out0].dev, &n) == 0, "y = a + b on %lld elements", (long long)n);

  if (out0 >= 0) {
    tensor *o = &T[out0];
    poison_output();
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, o->dims, sizeof dims);
    if (o->info.ndim > 0) dims[0] += 1;
    kiln_bind_tensor(b, o->info.name, o->dev, o->info.ndim, dims, NULL, o->info.dtype);
    st = kiln_launch(plan, b, s);
    OK(st == KILN_ERR_SHAPE, "wrong shape -> KILN_ERR_SHAPE (%s)", kiln_rt_errmsg(rt));
    kiln_dtype other = o->info.dtype == KILN_DTYPE_FP32 ? KILN_DTYPE_FP16 : KILN_DTYPE_FP32;
    kiln_bind_tensor(b, o->info.name, o->dev, o->info.ndim, o->dims, o->strides, other);
    st = kiln_launch(plan, b, s);
    OK(st == KILN_ERR_DTYPE, "wrong dtype -> KILN_ERR_DTYPE (%s)", kiln_rt_errmsg(rt));
    if (o->info.align > 1) {
      kiln_bind_tensor(b, o->info.name, o->dev + o->info.align / 2, o->info.ndim, o->dims,
                       o->strides, o->info.dtype);
      st = kiln_launch(plan, b, s);
      OK(st == KILN_ERR_ALIGN, "misaligned pointer -> KILN_ERR_ALIGN (%s)", kiln_rt_errmsg(rt));
    }
    bad_input_bindings(b, s);
    r = cu.CtxSynchronize();
    OK(r == CUDA_SUCCESS && output_untouched(o->dev),
       "rejected launches caused no CUDA fault and wrote nothing (%s)", cuname(r));

    /* positional launch: pointers in plan order, dims in plan order */
    kiln_devptr ptrs[64] = {0};
    double scalars[64];
    for (int i = 0; i < ntensors; i++) ptrs[i] = T[i].dev, scalars[i] = 1.0;
    poison_output();
    st = kiln_launch_args(plan, s, ptrs, scalars, dyn, ws_dev);
    OK(st == KILN_OK && cu.StreamSynchronize(s) == CUDA_SUCCESS, "kiln_launch_args (%s)", WHY(st));
    if (numeric) OK(check_output(o->dev, &n) == 0, "positional launch computes y = a + b");
    ptrs[out0] = o->dev + 1;
    OK(kiln_launch_args(plan, s, ptrs, scalars, dyn, ws_dev) == KILN_ERR_ALIGN ||
           o->info.align == 1,
       "positional launch rejects a misaligned pointer");

    /* CUDA graph capture of a launch */
    bind_all(b, 0, ws_dev);
    CUgraph graph;
    CUgraphExec exec;
    CU(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    st = kiln_launch(plan, b, s);
    r = cu.StreamEndCapture(s, &graph);
    OK(st == KILN_OK && r == CUDA_SUCCESS, "launch captured into a CUDA graph (%s, %s)", WHY(st),
       cuname(r));
    if (st == KILN_OK && r == CUDA_SUCCESS) {
      CU(cu.GraphInstantiateWithFlags(&exec, graph, 0));
      poison_output();
      CU(cu.GraphLaunch(exec, s));
      r = cu.StreamSynchronize(s);
      OK(r == CUDA_SUCCESS, "graph replay ran (%s)", cuname(r));
      if (numeric) OK(check_output(o->dev, &n) == 0, "graph replay computes y = a + b");
      cu.GraphExecDestroy(exec);
      cu.GraphDestroy(graph);
    }

    /* several threads, each with its own binding, output and stream */
    enum { NW = 4 };
    worker w[NW];
    pthread_t th[NW];
    for (int i = 0; i < NW; i++) {
      memset(&w[i], 0, sizeof w[i]);
      w[i].id = i;
      w[i].with_context = 1;
      w[i].launches = 50;
      CU(cu.MemAlloc(&w[i].out, o->bytes + 256));
      if (ws_bytes) CU(cu.MemAlloc(&w[i].ws, ws_bytes));
      CU(cu.StreamCreate(&w[i].stream, CU_STREAM_NON_BLOCKING));
      pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    int all = 1;
    for (int i = 0; i < NW; i++) {
      pthread_join(th[i], NULL);
      CU(cu.StreamSynchronize(w[i].stream));
      if (w[i].st != KILN_OK) DIAG("thread %d: %s", i, w[i].msg), all = 0;
      if (numeric && check_output(w[i].out, &n) != 0) all = 0;
    }
    OK(all, "%d threads x 50 launches with separate bindings", NW);
    /* a thread with no current context launches in its stream's context */
    worker nc = {.id = 9,
                 .with_context = 0,
                 .launches = 1,
                 .out = w[0].out,
                 .ws = w[0].ws,
                 .stream = w[0].stream};
    CU(cu.MemsetD8(nc.out, 0xFF, o->bytes));
    CU(cu.CtxSynchronize());
    pthread_create(&th[0], NULL, worker_main, &nc);
    pthread_join(th[0], NULL);
    OK(nc.st == KILN_OK && cu.StreamSynchronize(nc.stream) == CUDA_SUCCESS &&
           (!numeric || check_output(nc.out, &n) == 0),
       "a thread without a current context launches on its stream (%s)", nc.msg);
    for (int i = 0; i < NW; i++) {
      cu.MemFree(w[i].out);
      if (w[i].ws) cu.MemFree(w[i].ws);
      cu.StreamDestroy(w[i].stream);
    }
  }

  /* empty tensors: nothing is launched, nothing fails */
  if (ndyn > 0) {
    setup_tensors(0);
    bind_all(b, 0, ws_dev);
    st = kiln_launch(plan, b, s);
    OK(st == KILN_OK && cu.StreamSynchronize(s) == CUDA_SUCCESS,
       "dynamic dims of 0 launch nothing (%s)", WHY(st));
    setup_tensors(1027);
  }

  if (foreign) foreign_pack(foreign, s);
  overhead(b, s, major, minor);
  sm_counts(dev);

  kiln_bind_destroy(b);
  CU(cu.StreamSynchronize(s));
  for (int i = 0; i < ntensors; i++)
    if (T[i].dev) cu.MemFree(T[i].dev), free(T[i].host);
  if (ws_dev) cu.MemFree(ws_dev);
  cu.StreamDestroy(s);
  OK(kiln_pack_close(pack) == KILN_OK && cu.CtxSynchronize() == CUDA_SUCCESS,
     "pack closed, modules unloaded");
  kiln_rt_destroy(rt);
  cu.DevicePrimaryCtxRelease(dev);
  TAP_PLAN(tap_n);
  return TAP_DONE();
}
