/* libkilnrt: per-context modules of a plan and the launch path. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dl.h"
#include "internal.h"

#define RT(plan) ((plan)->pack->rt)
#define PORTABLE_CLUSTER 8

/* The SM count of ctx on dev: KILN_SM_COUNT when set, else the context's (a green context
 * has part of the device's), else the device's, clamped to 1..max. */
static kiln_status device_sms(const kiln_rt *rt, CUcontext ctx, CUdevice dev, int64_t *sms) {
  const char *env = getenv("KILN_SM_COUNT");
  if (env && *env) {
    char *end;
    long long v = strtoll(env, &end, 10);
    if (*end || v < 1 || v > KILN_PACK_MAX_SMS)
      return kiln__fail(rt, KILN_ERR_INVALID_ARG, "KILN_SM_COUNT='%s' is not an SM count in 1..%d",
                        env, KILN_PACK_MAX_SMS);
    *sms = v;
    return KILN_OK;
  }
  int n;
  CUdevResource res;
  memset(&res, 0, sizeof res);
  if (kiln__cu.CtxGetDevResource &&
      kiln__cu.CtxGetDevResource(ctx, &res, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS &&
      res.sm.smCount > 0) {
    *sms = res.sm.smCount > KILN_PACK_MAX_SMS ? KILN_PACK_MAX_SMS : res.sm.smCount;
    return KILN_OK;
  }
  CUresult r = kiln__cu.DeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  if (r != CUDA_SUCCESS) {
    char desc[256];
    kiln__cuda_describe(r, desc, sizeof desc);
    return kiln__fail(rt, KILN_ERR_CUDA, "cuDeviceGetAttribute(SM count): %s", desc);
  }
  *sms = n < 1 ? 1 : n > KILN_PACK_MAX_SMS ? KILN_PACK_MAX_SMS : n;
  return KILN_OK;
}

kiln_status kiln__context_sms(const kiln_rt *rt, int64_t *sms, int *have_ctx) {
  CUcontext ctx = NULL;
  CUdevice dev;
  *sms = KILN_PACK_MAX_SMS;
  *have_ctx = 0;
  /* no driver (a CPU-only machine) is no context: NULL rt records nothing */
  if (kiln__cuda_load(NULL) != KILN_OK || kiln__cu.CtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx ||
      kiln__cu.CtxGetDevice(&dev) != CUDA_SUCCESS)
    return KILN_OK;
  *have_ctx = 1;
  return device_sms(rt, ctx, dev, sms);
}

kiln_status kiln__plan_grids(kiln_plan *plan, const int64_t *dyn, int64_t sms,
                             unsigned (*grids)[3]) {
  static const int64_t limit[3] = {INT32_MAX, 65535, 65535};
  for (int k = 0; k < plan->nkernels; k++) {
    const kiln__kernel *kn = &plan->kernels[k];
    for (int a = 0; a < 3; a++) {
      const kiln__grid *g = &kn->grid[a];
      int64_t v;
      if (kiln__rule_eval(g, dyn, sms, &v) != 0)
        return kiln__fail(RT(plan), KILN_ERR_SHAPE, "kernel '%s': grid %c = %s overflows",
                          kn->symbol, "xyz"[a], g -> text);
      if (v > limit[a])
        return kiln__fail(RT(plan), KILN_ERR_SHAPE,
                          "kernel '%s': grid %c = %s = %" PRId64 " exceeds the limit %" PRId64,
                          kn->symbol, "xyz"[a], g -> text, v, limit[a]);
      if (v % kn->cluster[a])
        return kiln__fail(RT(plan), KILN_ERR_SHAPE,
                          "kernel '%s': grid %c = %" PRId64
                          " is not a multiple of its cluster "
                          "size %u",
                          kn->symbol, "xyz"[a], v, kn -> cluster[a]);
      grids[k][a] = (unsigned)v;
    }
  }
  return KILN_OK;
}

static kiln_status cuda_fail(kiln_plan *plan, CUresult r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kiln_status cuda_fail(kiln_plan *plan, CUresult r, const char *fmt, ...) {
  char what[512], desc[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  kiln__cuda_describe(r, desc, sizeof desc);
  return kiln__fail(RT(plan), KILN_ERR_CUDA, "%s: %s", what, desc);
}

static kiln__ctx_slot *find_slot(kiln_plan *plan, unsigned long long ctx_id) {
  for (kiln__ctx_slot *s = atomic_load_explicit(&plan->slots, memory_order_acquire); s; s = s->next)
    if (s->ctx_id == ctx_id) return s;
  return NULL;
}

static void unload_modules(kiln__ctx_slot *s, int n) {
  for (int k = 0; k < n; k++)
    if (s->modules[k]) kiln__cu.ModuleUnload((CUmodule)s->modules[k]);
}

static kiln_status no_cubin(kiln_plan *plan, const kiln__kernel *k, int major, int minor) {
  char archs[256];
  size_t len = 0;
  archs[0] = '\0';
  for (int i = 0; i < k->nimages && len < sizeof archs; i++)
    len +=
        (size_t)snprintf(archs + len, sizeof archs - len, "%s%s", i ? ", " : "", k->images[i].arch);
  return kiln__fail(RT(plan), KILN_ERR_NO_CUBIN,
                    "plan %s%s%s%s: kernel '%s' has no image that runs on this device (sm_%d%d); "
                    "the pack has: %s",
                    plan->graph, plan->instance[0] ? " [" : "", plan->instance,
                    plan->instance[0] ? "]" : "", k->symbol, major, minor, archs);
}

/* Loads one module per distinct image for the current context (load_lock held). */
static kiln_status load_slot_locked(kiln_plan *plan, unsigned long long ctx_id,
                                    kiln__ctx_slot **out) {
  CUcontext ctx;
  CUdevice dev;
  int major, minor;
  CUresult r;
  if ((r = kiln__cu.CtxGetCurrent(&ctx)) != CUDA_SUCCESS)
    return cuda_fail(plan, r, "cuCtxGetCurrent");
  if ((r = kiln__cu.CtxGetDevice(&dev)) != CUDA_SUCCESS)
    return cuda_fail(plan, r, "cuCtxGetDevice");
  if ((r = kiln__cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                       dev)) != CUDA_SUCCESS ||
      (r = kiln__cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                       dev)) != CUDA_SUCCESS)
    return cuda_fail(plan, r, "cuDeviceGetAttribute(compute capability)");
  int64_t sms;
  kiln_status st = device_sms(RT(plan), ctx, dev, &sms);
  if (st != KILN_OK) return st;
  int chosen[KILN_PACK_MAX_KERNELS];
  for (int k = 0; k < plan->nkernels; k++)
    if ((chosen[k] = kiln__select_image(&plan->kernels[k], major, minor)) < 0)
      return no_cubin(plan, &plan->kernels[k], major, minor);

  size_t nk = (size_t)plan->nkernels;
  kiln__ctx_slot *s =
      calloc(1, sizeof *s + 2 * (nk ? nk : 1) * sizeof(void *) + (nk ? nk : 1) * 5 * sizeof(unsigned));
  if (!s) return kiln__fail(RT(plan), KILN_ERR_NOMEM, "out of memory");
  s->ctx_id = ctx_id;
  s->ctx = ctx;
  s->modules = (void **)(s + 1);
  s->functions = s->modules + nk;
  s->smem = (unsigned *)(s->functions + nk);
  s->cluster = (unsigned(*)[3])(s->smem + nk);
  s->major = s->smem + 4 * nk;
  s->sms = sms;
  int k = 0;
  for (; k < plan->nkernels && st == KILN_OK; k++) {
    const kiln__kernel *kn = &plan->kernels[k];
    const kiln__image *im = &kn->images[chosen[k]];
    CUmodule mod = NULL;
    for (int j = 0; j < k && !mod; j++) /* identical blobs share a module */
      if (plan->kernels[j].images[chosen[j]].offset == im->offset)
        mod = s->modules[j] ? (CUmodule)s->modules[j] : NULL;
    if (!mod) {
      const void *image = im->data;
      void *copy = NULL;
      if ((uintptr_t)image % KILN_PACK_IMAGE_ALIGN) { /* packs in unaligned caller memory */
        copy =
            aligned_alloc(KILN_PACK_IMAGE_ALIGN, (im->size + KILN_PACK_IMAGE_ALIGN - 1) /
                                                     KILN_PACK_IMAGE_ALIGN * KILN_PACK_IMAGE_ALIGN);
        if (!copy) {
          st = kiln__fail(RT(plan), KILN_ERR_NOMEM, "out of memory");
          break;
        }
        memcpy(copy, image, im->size);
        image = copy;
      }
      r = kiln__cu.ModuleLoadData(&mod, image);
      free(copy);
      if (r != CUDA_SUCCESS) {
        st = cuda_fail(plan, r, "cuModuleLoadData(kernel '%s', %s, %" PRIu64 " bytes)", kn->symbol,
                       im->arch, im->size);
        break;
      }
      s->modules[k] = mod;
    }
    CUfunction fn;
    if ((r = kiln__cu.ModuleGetFunction(&fn, mod, kn->symbol)) != CUDA_SUCCESS) {
      st = cuda_fail(plan, r, "cuModuleGetFunction('%s' in the %s image)", kn->symbol, im->arch);
      break;
    }
    /* Opt in whenever there is dynamic smem: static + dynamic above 48 KB needs it even
     * when the dynamic part alone is below, and the attribute is cheap (set once per load). */
    s->smem[k] = im->smem;
    memcpy(s->cluster[k], im->cluster, sizeof s->cluster[k]);
    s->major[k] = (unsigned)im->major;
    if (im->smem > 0 &&
        (r = kiln__cu.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       (int)im->smem)) != CUDA_SUCCESS) {
      st = cuda_fail(plan, r, "kernel '%s': cuFuncSetAttribute(dynamic smem %u bytes, %s image)",
                     kn->symbol, im->smem, im->arch);
      break;
    }
    if (im->cluster[0] * im->cluster[1] * im->cluster[2] > PORTABLE_CLUSTER &&
        (r = kiln__cu.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                       1)) != CUDA_SUCCESS) {
      st = cuda_fail(plan, r, "kernel '%s': cuFuncSetAttribute(non-portable cluster)", kn->symbol);
      break;
    }
    s->functions[k] = fn;
  }
  if (st != KILN_OK) {
    unload_modules(s, k + 1);
    free(s);
    return st;
  }
  s->next = atomic_load_explicit(&plan->slots, memory_order_relaxed);
  atomic_store_explicit(&plan->slots, s, memory_order_release);
  *out = s;
  return KILN_OK;
}

static kiln_status get_slot(kiln_plan *plan, unsigned long long ctx_id, kiln__ctx_slot **out) {
  if ((*out = find_slot(plan, ctx_id))) return KILN_OK;
  pthread_mutex_lock(&plan->load_lock);
  kiln_status st = (*out = find_slot(plan, ctx_id)) ? KILN_OK : load_slot_locked(plan, ctx_id, out);
  pthread_mutex_unlock(&plan->load_lock);
  return st;
}

kiln_status kiln_plan_load(kiln_plan *plan) {
  if (!plan) return KILN_ERR_INVALID_ARG;
  kiln_status st = kiln__cuda_load(RT(plan));
  if (st != KILN_OK) return st;
  unsigned long long id;
  CUresult r = kiln__cu.CtxGetId(NULL, &id);
  if (r != CUDA_SUCCESS) return cuda_fail(plan, r, "no current CUDA context (cuCtxGetId)");
  kiln__ctx_slot *s;
  return get_slot(plan, id, &s);
}

static CUtensorMapDataType tmap_dtype(kiln_dtype d) {
  switch (d) {
  case KILN_DTYPE_FP32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  case KILN_DTYPE_FP16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  case KILN_DTYPE_BF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  case KILN_DTYPE_INT32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
  case KILN_DTYPE_INT64: return CU_TENSOR_MAP_DATA_TYPE_INT64;
  default: return CU_TENSOR_MAP_DATA_TYPE_UINT8; /* fp8 and bool: bytes */
  }
}

/* Encodes the tensor map of a KILN__PARAM_TMAP param for the bound pointer and resolved dims.
 * Zero-filled out of bounds: tiles past the tensor's edges read zeros. */
static kiln_status encode_tmap(kiln_plan *plan, const kiln__kernel *kn, const kiln__param *pa,
                               kiln_devptr ptr, const int64_t *dyn, CUtensorMap *map) {
  const kiln__tensor *t = &plan->tensors[pa->arg];
  const kiln__tmap *m = pa->tmap;
  const uint64_t esz = kiln_dtype_size(t->dtype);
  /* strides[i]: dim i's stride in bytes; the encoder takes dims 1..rank-1 (strides + 1) */
  cuuint64_t dims[KILN_PACK_MAX_TMAP_RANK], strides[KILN_PACK_MAX_TMAP_RANK];
  cuuint32_t box[KILN_PACK_MAX_TMAP_RANK], ones[KILN_PACK_MAX_TMAP_RANK];
  for (int i = 0; i < m->rank; i++) {
    const int a = m->axis[i];
    const int64_t ref = t->dim[a], d = ref >= 0 ? ref : dyn[-(ref + 1)];
    int64_t stride;
    if (kiln__product_eval(&t->stride[a], dyn, &stride) != 0 || d < 1 || d > (1ll << 32) ||
        (i == 0 && stride != 1) || (i > 0 && (stride < 0 || (uint64_t)stride * esz % 16 ||
                                              (uint64_t)stride * esz >= (1ull << 40))))
      return kiln__fail(RT(plan), i > 0 && stride > 0 ? KILN_ERR_ALIGN : KILN_ERR_SHAPE,
                        "kernel '%s': tensor '%s' axis %d (extent %lld, stride %lld elements) "
                        "cannot be a tensor-map dim %d (extent 1..2^32; the innermost contiguous, "
                        "the others 16-byte multiples)",
                        kn->symbol, t->name, a, (long long)d, (long long)stride, i);
    dims[i] = (cuuint64_t)d;
    strides[i] = (cuuint64_t)stride * esz;
    box[i] = m->box[i];
    ones[i] = 1;
  }
  if (ptr % 16)
    return kiln__fail(RT(plan), KILN_ERR_ALIGN,
                      "kernel '%s': tensor '%s' at 0x%llx is not 16-byte aligned (tensor map)",
                      kn->symbol, t->name, (unsigned long long)ptr);
  CUresult r = kiln__cu.TensorMapEncodeTiled(
      map, tmap_dtype(t->dtype), (cuuint32_t)m->rank, (void *)(uintptr_t)ptr, dims, strides + 1, box,
      ones, CU_TENSOR_MAP_INTERLEAVE_NONE, (CUtensorMapSwizzle)m->swizzle,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return cuda_fail(plan, r, "kernel '%s': cuTensorMapEncodeTiled(tensor '%s')", kn->symbol,
                     t->name);
  return KILN_OK;
}

static kiln_status launch_kernels(kiln_plan *plan, const kiln__ctx_slot *s, CUstream stream,
                                  const kiln_devptr *ptrs, const double *scalars,
                                  const int64_t *dyn, kiln_devptr workspace) {
  unsigned grids[KILN_PACK_MAX_KERNELS][3];
  kiln_status st = kiln__plan_grids(plan, dyn, s->sms, grids);
  if (st != KILN_OK) return st;
  int64_t scratch_off[KILN_PACK_MAX_SCRATCH], ws_total;
  if (plan->nscratch && kiln__workspace_eval(plan, dyn, s->sms, scratch_off, &ws_total) != 0)
    return kiln__fail(RT(plan), KILN_ERR_SHAPE, "workspace size %s overflows", plan->workspace.text);
  uint64_t values[KILN_PACK_MAX_PARAMS];
  void *args[KILN_PACK_MAX_PARAMS];
  CUtensorMap maps[KILN_PACK_MAX_TMAPS]; /* 64-byte aligned by its type */
  for (int k = 0; k < plan->nkernels; k++) {
    const kiln__kernel *kn = &plan->kernels[k];
    const unsigned *g = grids[k];
    if (!g[0] || !g[1] || !g[2]) continue; /* empty tensors: nothing to do */
    int nmaps = 0;
    for (int p = 0; p < kn->nparams; p++) {
      int64_t arg = kn->params[p].arg;
      float f;
      double d;
      values[p] = 0;
      /* a tensor's pointer; a scratch tensor lives in the workspace */
      const int kind = kn->params[p].kind;
      const int is_tensor = kind == KILN__PARAM_TENSOR || kind == KILN__PARAM_TMAP;
      const int scratch = is_tensor ? plan->tensors[arg].scratch : -1;
      const kiln_devptr ptr = !is_tensor     ? 0
                              : scratch >= 0 ? workspace + (uint64_t)scratch_off[scratch]
                                             : ptrs[arg];
      switch (kind) {
      case KILN__PARAM_TENSOR: values[p] = ptr; break;
      case KILN__PARAM_DIM: values[p] = (uint64_t)dyn[arg]; break;
      case KILN__PARAM_I64: values[p] = (uint64_t)arg; break;
      case KILN__PARAM_WORKSPACE: values[p] = workspace + (uint64_t)arg; break;
      case KILN__PARAM_SMS: values[p] = (uint64_t)s->sms; break;
      case KILN__PARAM_TMAP: /* code for SMs before 9.0 takes the map but never reads it */
        memset(&maps[nmaps], 0, sizeof maps[nmaps]);
        st = s->major[k] < 9 ? KILN_OK
                             : encode_tmap(plan, kn, &kn->params[p], ptr, dyn, &maps[nmaps]);
        if (st != KILN_OK) return st;
        args[p] = &maps[nmaps++];
        continue;
      case KILN__PARAM_SCALAR:
        f = (float)scalars[arg];
        memcpy(&values[p], &f, sizeof f);
        break;
      case KILN__PARAM_F32:
        memcpy(&d, &arg, sizeof d);
        f = (float)d;
        memcpy(&values[p], &f, sizeof f);
        break;
      }
      args[p] = &values[p];
    }
    CUfunction fn = (CUfunction)s->functions[k];
    CUresult r;
    const unsigned *cl = s->cluster[k];
    /* programmatic dependent launch: on SM 9.0+ a flagged kernel may start while the previous
     * one runs (it waits in-kernel before reading that kernel's output); one flagged "entry"
     * waits before touching memory, so it may follow any kernel, also as the plan's first */
    const int pdl = ((k > 0 && (kn->flags & KILN_PACK_KERNEL_PDL)) || (kn->flags & KILN_PACK_KERNEL_PDL_ENTRY)) &&
                    s->major[k] >= 9;
    if (cl[0] * cl[1] * cl[2] == 1 && !pdl) {
      r = kiln__cu.LaunchKernel(fn, g[0], g[1], g[2], kn->block[0], kn->block[1], kn->block[2],
                                s->smem[k], stream, args, NULL);
    } else {
      CUlaunchAttribute attr[2];
      unsigned nattr = 0;
      memset(attr, 0, sizeof attr);
      if (cl[0] * cl[1] * cl[2] > 1) {
        attr[nattr].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr[nattr].value.clusterDim.x = cl[0];
        attr[nattr].value.clusterDim.y = cl[1];
        attr[nattr].value.clusterDim.z = cl[2];
        nattr++;
      }
      if (pdl) {
        attr[nattr].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr[nattr].value.programmaticStreamSerializationAllowed = 1;
        nattr++;
      }
      CUlaunchConfig cfg;
      memset(&cfg, 0, sizeof cfg);
      cfg.gridDimX = g[0];
      cfg.gridDimY = g[1];
      cfg.gridDimZ = g[2];
      cfg.blockDimX = kn->block[0];
      cfg.blockDimY = kn->block[1];
      cfg.blockDimZ = kn->block[2];
      cfg.sharedMemBytes = s->smem[k];
      cfg.hStream = stream;
      cfg.attrs = attr;
      cfg.numAttrs = nattr;
      r = kiln__cu.LaunchKernelEx(&cfg, fn, args, NULL);
    }
    if (r != CUDA_SUCCESS)
      return cuda_fail(plan, r,
                       "launching kernel %d of %d ('%s', grid [%u, %u, %u], block "
                       "[%u, %u, %u], smem %u)%s",
                       k + 1, plan->nkernels, kn->symbol, g[0], g[1], g[2], kn->block[0],
                       kn->block[1], kn->block[2], s->smem[k],
                       k ? " after the earlier kernels were enqueued" : "");
  }
  return KILN_OK;
}

kiln_status kiln__launch(kiln_plan *plan, struct CUstream_st *stream, const kiln_devptr *ptrs,
                         const double *scalars, const int64_t *dyn, int ws_bound,
                         kiln_devptr workspace, size_t ws_bytes) {
  kiln_status st = kiln__cuda_load(RT(plan));
  if (st != KILN_OK) return st;
  unsigned long long id = 0;
  CUcontext pushed = NULL, current = NULL;
  /* Ask for the current context first: cuCtxGetId(NULL) without one is an API error
   * (compute-sanitizer reports it), cuCtxGetCurrent answers NULL. */
  CUresult r = kiln__cu.CtxGetCurrent(&current);
  if (r == CUDA_SUCCESS && current) r = kiln__cu.CtxGetId(current, &id);
  else if (r == CUDA_SUCCESS) r = CUDA_ERROR_INVALID_CONTEXT;
  if (r != CUDA_SUCCESS) {
    /* No current context in this thread: run in the stream's. */
    if (!stream)
      return cuda_fail(plan, r,
                       "no current CUDA context and no stream to take one from "
                       "(make a context current first)");
    if ((r = kiln__cu.StreamGetCtx(stream, &pushed)) != CUDA_SUCCESS)
      return cuda_fail(plan, r, "no current CUDA context; cuStreamGetCtx");
    if ((r = kiln__cu.CtxPushCurrent(pushed)) != CUDA_SUCCESS)
      return cuda_fail(plan, r, "cuCtxPushCurrent(the stream's context)");
    if ((r = kiln__cu.CtxGetId(pushed, &id)) != CUDA_SUCCESS)
      st = cuda_fail(plan, r, "cuCtxGetId(the stream's context)");
  }
  kiln__ctx_slot *s = NULL;
  if (st == KILN_OK) st = get_slot(plan, id, &s);
  if (st == KILN_OK) st = kiln__check_workspace(plan, dyn, s->sms, ws_bound, workspace, ws_bytes);
  if (st == KILN_OK) st = launch_kernels(plan, s, stream, ptrs, scalars, dyn, workspace);
  if (pushed) {
    CUcontext popped;
    kiln__cu.CtxPopCurrent(&popped);
  }
  return st;
}

void kiln__plan_unload(kiln_plan *plan) {
  kiln__ctx_slot *s = atomic_exchange(&plan->slots, NULL);
  while (s) {
    kiln__ctx_slot *next = s->next;
    unsigned long long id;
    /* Modules die with their context; unload only from contexts that still live. */
    if (kiln__cu.CtxGetId((CUcontext)s->ctx, &id) == CUDA_SUCCESS && id == s->ctx_id &&
        kiln__cu.CtxPushCurrent((CUcontext)s->ctx) == CUDA_SUCCESS) {
      unload_modules(s, plan->nkernels);
      CUcontext popped;
      kiln__cu.CtxPopCurrent(&popped);
    }
    free(s);
    s = next;
  }
}
