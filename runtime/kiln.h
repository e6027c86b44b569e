/* kiln runtime (libkilnrt): loads kiln packs and launches their kernels.
 *
 * This header is the whole public API (installed as <kiln/kiln.h>). Every call returns a
 * kiln_status; kiln_errstr() gives its fixed text and kiln_rt_errmsg() the detail of the
 * last failure. Nothing prints, nothing exits. The library needs libc and, only when a
 * kernel is launched, the CUDA driver (libcuda.so.1, dlopen'ed on first use).
 *
 * Typical use:
 *   kiln_rt *rt;  kiln_pack *pack;  kiln_plan *plan;  kiln_bind *b;
 *   kiln_rt_create(&rt);
 *   kiln_pack_open(rt, "model.kpack", &pack);
 *   kiln_plan_get(pack, "bias_gelu", "H=4096", &plan);
 *   kiln_bind_create(plan, &b);
 *   kiln_bind_tensor(b, "x", x_ptr, 2, (int64_t[]){T, 4096}, NULL, KILN_DTYPE_BF16);
 *   ...
 *   size_t ws;                                 only plans with a workspace need these two
 *   kiln_plan_workspace_size(plan, b, &ws);    (ws is 0 for the others)
 *   if (ws) kiln_bind_workspace(b, ws_ptr, ws);   ws_ptr: >= ws bytes, 256-byte aligned
 *   if (kiln_launch(plan, b, stream) != KILN_OK) fprintf(stderr, "%s\n", kiln_rt_errmsg(rt));
 *
 * Threads: every call may be made from any thread. A kiln_bind belongs to one thread at a
 * time; several threads may launch the same plan, each with its own kiln_bind.
 * Lifetimes: plans are owned by their pack (valid until kiln_pack_close); packs are
 * closed by kiln_rt_destroy if still open; strings returned by info calls live as long as
 * the pack. Close a pack only when no thread is using it.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kiln's version: the one place it is written (the compiler, cache keys, kilnrt.pc and
 * configure all read it from here). */
#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN__STR(x) #x
#define KILN__XSTR(x) KILN__STR(x)
#define KILN_VERSION KILN__XSTR(KILN_VERSION_MAJOR) "." KILN__XSTR(KILN_VERSION_MINOR) "." KILN__XSTR(KILN_VERSION_PATCH)

/* Most dims a tensor may have. */
#define KILN_MAX_DIMS 8

/* Same types as cuda.h's CUstream and CUdeviceptr (64-bit), so that cuda.h is optional. */
struct CUstream_st;
typedef unsigned long long kiln_devptr;

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERR_INVALID_ARG = 1, /* NULL handle, bad argument, tensor role that cannot be bound,
                               workspace smaller than kiln_plan_workspace_size */
  KILN_ERR_NOMEM = 2,       /* out of host memory */
  KILN_ERR_IO = 3,          /* pack file cannot be read */
  KILN_ERR_PACK = 4,        /* pack malformed, corrupt, or of another format version */
  KILN_ERR_NO_DRIVER = 5,   /* libcuda.so.1 missing, too old, or cuInit failed */
  KILN_ERR_NO_CUBIN = 6,    /* the pack has no image that runs on this device's SM */
  KILN_ERR_CUDA = 7,        /* a CUDA driver call failed (detail names call and error) */
  KILN_ERR_NOT_FOUND = 8,   /* no such plan, tensor, uid or dim */
  KILN_ERR_UNBOUND = 9,     /* a tensor, scalar, dynamic dim or workspace the plan needs is
                               not bound */
  KILN_ERR_SHAPE = 10,      /* rank or dims differ from the plan, dynamic dims inconsistent */
  KILN_ERR_DTYPE = 11,      /* dtype differs from the plan */
  KILN_ERR_STRIDE = 12,     /* strides differ from the plan */
  KILN_ERR_ALIGN = 13       /* base pointer less aligned than the plan needs (workspace: 256) */
} kiln_status;

/* dtypes of docs/INTERNALS.md; the values are part of the ABI (and of the pack format). */
typedef enum kiln_dtype {
  KILN_DTYPE_INVALID = 0,
  KILN_DTYPE_FP32 = 1,
  KILN_DTYPE_FP16 = 2,
  KILN_DTYPE_BF16 = 3,
  KILN_DTYPE_FP8_E4M3 = 4,
  KILN_DTYPE_FP8_E5M2 = 5,
  KILN_DTYPE_FP8_E8M0 = 6,
  KILN_DTYPE_INT32 = 7,
  KILN_DTYPE_INT64 = 8,
  KILN_DTYPE_BOOL = 9
} kiln_dtype;

typedef enum kiln_role {
  KILN_ROLE_INPUT = 0,    /* bound by the caller */
  KILN_ROLE_OUTPUT = 1,   /* bound by the caller, written */
  KILN_ROLE_VIRTUAL = 2,  /* never in memory; not bound */
  KILN_ROLE_CONSTANT = 3, /* compiled in; not bound */
  KILN_ROLE_SCALAR = 4,   /* runtime scalar: kiln_bind_scalar */
  KILN_ROLE_SCRATCH = 5   /* a virtual tensor one kernel writes and a later one reads: held in
                             the plan's workspace, not bound */
} kiln_role;

typedef struct kiln_rt kiln_rt;     /* runtime: driver, error detail, open packs */
typedef struct kiln_pack kiln_pack; /* one opened pack file */
typedef struct kiln_plan kiln_plan; /* one graph instance in a pack (owned by the pack) */
typedef struct kiln_bind kiln_bind; /* the caller's tensors, scalars and dims for a plan */

/* ---- status, dtypes ---------------------------------------------------------------- */

/* Fixed text for a status ("pack malformed, ..."); never NULL. */
const char *kiln_errstr(kiln_status status);
/* "fp32", "bf16", ...; NULL for an unknown value. */
const char *kiln_dtype_name(kiln_dtype dtype);
/* Parses a dtype name; KILN_DTYPE_INVALID when unknown. */
kiln_dtype kiln_dtype_from_name(const char *name);
/* Element size in bytes; 0 for an unknown value. */
size_t kiln_dtype_size(kiln_dtype dtype);
/* "input", "output", ...; NULL for an unknown value. */
const char *kiln_role_name(kiln_role role);

/* ---- runtime ------------------------------------------------------------------------ */

/* Creates a runtime. Needs no GPU: the driver is loaded on the first call that needs it. */
kiln_status kiln_rt_create(kiln_rt **out);
/* Closes every pack still open on rt (and their plans), then frees rt. NULL is fine. */
kiln_status kiln_rt_destroy(kiln_rt *rt);
/* Detail of the most recent failing call on rt (or its packs, plans, bindings) made by the
 * calling thread; "" when there is none. Valid until the thread's next failing call. */
const char *kiln_rt_errmsg(const kiln_rt *rt);
/* Loads the driver now; *version gets cuDriverGetVersion (e.g. 13000). KILN_ERR_NO_DRIVER
 * when libcuda.so.1 is absent, older than CUDA 12.0, or cuInit fails. */
kiln_status kiln_rt_driver_version(kiln_rt *rt, int *version);

/* ---- packs -------------------------------------------------------------------------- */

typedef struct kiln_pack_info {
  uint32_t format_version;
  uint32_t checksum; /* CRC-32C stored in (and verified against) the pack */
  uint64_t size;     /* bytes */
  int nplans;
  int nimages; /* distinct code images (cubins / PTX) */
} kiln_pack_info;

/* Reads, checks (magic, version, size, checksum, structure) and indexes a pack. Works
 * without a GPU. Errors: KILN_ERR_IO, KILN_ERR_PACK (detail says what is wrong). */
kiln_status kiln_pack_open(kiln_rt *rt, const char *path, kiln_pack **out);
/* Same, on bytes in memory that the caller keeps alive and unchanged until the pack is
 * closed (they are not copied; embedded packs from `kiln build --emit-c` use this). */
kiln_status kiln_pack_open_memory(kiln_rt *rt, const void *data, size_t size, kiln_pack **out);
/* Unloads the pack's modules from every live context that loaded them and frees it. */
kiln_status kiln_pack_close(kiln_pack *pack);
kiln_status kiln_pack_info_get(const kiln_pack *pack, kiln_pack_info *info);
/* The index-th plan (0 <= index < nplans), in pack order. */
kiln_status kiln_pack_plan_at(kiln_pack *pack, int index, kiln_plan **out);

/* ---- plans -------------------------------------------------------------------------- */

/* Finds the plan of graph `graph` and instance key `instance` ("H=4096,W=8"; the order of
 * the NAME=VALUE pairs does not matter). instance NULL or "" picks the graph's only
 * instance (or its instance without specialized dims). No driver call: modules are
 * loaded on the first launch in each context (or by kiln_plan_load). */
kiln_status kiln_plan_get(kiln_pack *pack, const char *graph, const char *instance,
                          kiln_plan **out);
/* Loads the plan's modules into the calling thread's current context now, picking for
 * each kernel the image for the device's SM: sm_XYa, then sm_XY (or sm_XYf), then the
 * highest sm_XZ/sm_XZf with Z < Y, then the highest PTX compute_NN <= the device; else
 * KILN_ERR_NO_CUBIN naming the archs the pack has. Call before CUDA graph capture. */
kiln_status kiln_plan_load(kiln_plan *plan);

typedef struct kiln_plan_info {
  const char *graph;
  const char *instance;   /* "" when the graph has no specialized dims */
  const char *graph_json; /* graph JSON text of the instance */
  int ntensors;
  int nkernels;
  int ndims;        /* dynamic dims (runtime arguments) */
  int nspecialized; /* dims fixed by the instance key */
  /* Workspace rule in bytes before rounding up to 256, e.g. "ceil(T*4096/2)", and the scratch
   * tensors it holds after that ("... + scratch y [T, 1024] bf16"); NULL when the plan needs no
   * workspace. */
  const char *workspace;
} kiln_plan_info;

typedef struct kiln_tensor_info {
  int64_t uid;
  const char *name;
  kiln_dtype dtype;
  kiln_role role;
  int ndim;
  int64_t dims[KILN_MAX_DIMS];             /* extent, or -1 when dynamic */
  const char *dim_names[KILN_MAX_DIMS];    /* dynamic dim name, NULL when fixed */
  int64_t strides[KILN_MAX_DIMS];          /* elements, or -1 when it uses dynamic dims */
  const char *stride_exprs[KILN_MAX_DIMS]; /* "T*64" when symbolic, NULL when fixed */
  uint32_t align;                          /* base pointer alignment needed, bytes */
  double value;                            /* constant tensors: the value */
} kiln_tensor_info;

typedef struct kiln_kernel_info {
  const char *symbol;
  const char *engine;
  const char *plan_id;
  unsigned block[3];
  unsigned cluster[3];
  unsigned smem;       /* dynamic shared memory, bytes */
  const char *grid[3]; /* grid rule per axis, e.g. "ceil(T*4096/2048)" */
  int nparams;
  int nimages; /* one per arch */
  int pdl;     /* SM 9.0+ images: bit 0, may start while the plan's previous kernel runs; bit 1,
                  waits before touching memory, so may start while any kernel before it runs */
} kiln_kernel_info;

kiln_status kiln_plan_info_get(const kiln_plan *plan, kiln_plan_info *info);
/* index in [0, ntensors), plan order. */
kiln_status kiln_plan_tensor(const kiln_plan *plan, int index, kiln_tensor_info *info);
/* Index of a tensor by name or uid; KILN_ERR_NOT_FOUND when absent. */
kiln_status kiln_plan_tensor_index(const kiln_plan *plan, const char *name, int *index);
kiln_status kiln_plan_tensor_index_uid(const kiln_plan *plan, int64_t uid, int *index);
/* Name of the index-th dynamic dim. */
kiln_status kiln_plan_dim(const kiln_plan *plan, int index, const char **name);
/* Name and value of the index-th specialized dim. */
kiln_status kiln_plan_specialized(const kiln_plan *plan, int index, const char **name,
                                  int64_t *value);
kiln_status kiln_plan_kernel(const kiln_plan *plan, int index, kiln_kernel_info *info);
/* The image-th code image of a kernel: arch ("sm_90a", "compute_90"), bytes, size. */
kiln_status kiln_plan_kernel_image(const kiln_plan *plan, int kernel, int image, const char **arch,
                                   const void **data, size_t *size);

/* ---- binding and launch --------------------------------------------------------------- */

kiln_status kiln_bind_create(kiln_plan *plan, kiln_bind **out);
kiln_status kiln_bind_destroy(kiln_bind *b);
/* Forgets every tensor, scalar, dim and workspace bound so far. */
kiln_status kiln_bind_reset(kiln_bind *b);
/* Binds an input or output tensor: device pointer, rank, extents, strides in elements
 * (NULL = contiguous row-major), dtype. Only the arguments are checked here; everything
 * else is checked by kiln_bind_check / kiln_launch. */
kiln_status kiln_bind_tensor(kiln_bind *b, const char *name, kiln_devptr ptr, int ndim,
                             const int64_t *dims, const int64_t *strides, kiln_dtype dtype);
kiln_status kiln_bind_tensor_uid(kiln_bind *b, int64_t uid, kiln_devptr ptr, int ndim,
                                 const int64_t *dims, const int64_t *strides, kiln_dtype dtype);
/* Value of a runtime scalar tensor (passed to kernels as fp32). */
kiln_status kiln_bind_scalar(kiln_bind *b, const char *name, double value);
/* Value of a dynamic dim; dims left unbound are inferred from the bound tensors. */
kiln_status kiln_bind_dim(kiln_bind *b, const char *name, int64_t value);

/* Workspace: scratch device memory some plans need (kiln_plan_info.workspace != NULL),
 * provided by the caller for each launch; kernels do not assume it is zeroed, and launches
 * of the plan that may overlap (other streams, threads) need separate workspaces. It holds
 * the kernels' own partial results and the plan's scratch tensors (KILN_ROLE_SCRATCH: a
 * virtual tensor one kernel writes and a later one reads), each at a 256-byte boundary.
 * kiln_plan_workspace_size gives the bytes the plan needs for the dynamic dims of b: those
 * bound with kiln_bind_dim or implied by the tensors bound so far (only the dims the rule
 * and the scratch tensors use must be known, else KILN_ERR_UNBOUND; disagreeing ones give KILN_ERR_SHAPE). The
 * size is a multiple of 256, and 0 when the plan needs no workspace (b may then be NULL, as
 * it may when the rule uses no dynamic dim). Persistent kernels size their grids, and the
 * workspace, by the SM count of the context they run in (a green context's own SMs, else
 * the device's; KILN_SM_COUNT overrides it): the size is for the current context, or, with
 * none current, enough for any device. A launch checks the bound size for its own context. */
kiln_status kiln_plan_workspace_size(kiln_plan *plan, kiln_bind *b, size_t *bytes);
/* Binds the workspace: ptr must be 256-byte aligned and hold bytes >= the size above
 * (checked by kiln_bind_check / kiln_launch: KILN_ERR_ALIGN, KILN_ERR_INVALID_ARG). A plan
 * that needs none ignores it. kiln_bind_workspace(b, 0, 0) unbinds it. */
kiln_status kiln_bind_workspace(kiln_bind *b, kiln_devptr ptr, size_t bytes);

/* Checks the binding against the plan without touching the GPU: every input/output and
 * scalar bound (KILN_ERR_UNBOUND), dtypes (KILN_ERR_DTYPE), ranks, dims and the dynamic
 * dims they imply (KILN_ERR_SHAPE), strides of dims with extent > 1 (KILN_ERR_STRIDE),
 * base pointer alignment (KILN_ERR_ALIGN), grid limits (KILN_ERR_SHAPE), and, when the plan
 * needs a workspace of nonzero size for these dims: one bound (KILN_ERR_UNBOUND), 256-byte
 * aligned (KILN_ERR_ALIGN), large enough (KILN_ERR_INVALID_ARG). A binding that passed is
 * not checked again by kiln_launch until it changes. */
kiln_status kiln_bind_check(kiln_plan *plan, kiln_bind *b);
/* Checks (as above), then enqueues every kernel of the plan in order on stream (NULL: the
 * legacy default stream) of the current context (or, if none is current, the stream's).
 * Nothing is launched when a check fails. After the first launch in a context it
 * allocates nothing and makes no driver call but cuCtxGetId and cuLaunchKernel[Ex], so
 * it can be captured into a CUDA graph. */
kiln_status kiln_launch(kiln_plan *plan, kiln_bind *b, struct CUstream_st *stream);
/* Positional launch without a kiln_bind (used by `kiln build --emit-c` wrappers):
 * ptrs[i] for the i-th tensor in plan order (ignored unless input/output: scratch tensors
 * live in the workspace), scalars[i] for
 * scalar tensors (may be NULL if there are none), dims[d] for the d-th dynamic dim (may be
 * NULL if there are none), workspace: the workspace base (0 when the plan needs none; it
 * must hold kiln_plan_workspace_size bytes for these dims). Shapes and the workspace size
 * cannot be checked; alignment and null pointers are (a workspace of nonzero size that is
 * 0: KILN_ERR_UNBOUND). */
kiln_status kiln_launch_args(kiln_plan *plan, struct CUstream_st *stream, const kiln_devptr *ptrs,
                             const double *scalars, const int64_t *dims, kiln_devptr workspace);

#ifdef __cplusplus
}
#endif

#endif
