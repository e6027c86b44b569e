/* libkilnrt internals: in-memory form of an opened pack, shared by rt.c (handles, errors),
 * pack_read.c (parsing), bind.c (binding, checks) and launch.c (modules, launch). */
#ifndef KILN_INTERNAL_H
#define KILN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kiln.h"
#include "pack.h"

typedef struct kiln__image {
  const char *arch;
  const unsigned char *data;
  uint64_t offset; /* in the image data section: equal offsets are the same blob */
  uint64_t size;
  int major, minor, ptx;
  char suffix;
  unsigned smem;       /* dynamic shared memory this image's kernel launches with */
  unsigned cluster[3]; /* and its cluster dims */
} kiln__image;

/* A product of factors: literals (>= 0) and dynamic dim refs -(d+1). */
typedef struct kiln__product {
  int nfactor;
  int64_t factor[KILN_PACK_MAX_FACTORS];
} kiln__product;

typedef struct kiln__grid {
  const char *text;
  kiln__product prod;
  int64_t div, max, add;
  int64_t sm_mul, sm_div; /* when sm_mul > 0: also at most max(1, SMS * sm_mul / sm_div) */
} kiln__grid;

/* A tensor map over a plan tensor: map dim i is tensor axis axis[i] (dim 0 innermost). */
typedef struct kiln__tmap {
  int rank, swizzle;
  int axis[KILN_PACK_MAX_TMAP_RANK];
  uint32_t box[KILN_PACK_MAX_TMAP_RANK];
} kiln__tmap;

typedef struct kiln__param {
  int kind; /* enum kiln__param_kind */
  int64_t arg;
  const kiln__tmap *tmap; /* KILN__PARAM_TMAP only */
} kiln__param;

typedef struct kiln__kernel {
  const char *symbol, *engine, *plan_id;
  unsigned block[3], cluster[3], smem, flags; /* flags: KILN_PACK_KERNEL_* */
  kiln__grid grid[3];
  int nparams;
  kiln__param *params;
  int nimages;
  kiln__image *images;
} kiln__kernel;

typedef struct kiln__tensor {
  int64_t uid;
  const char *name;
  kiln_dtype dtype;
  kiln_role role;
  int scratch; /* KILN_ROLE_SCRATCH: its place among the plan's scratch tensors, else -1 */
  int first_kernel, last_kernel; /* scratch: the kernels that write it first and read it
                                    last (-1 when none takes it) */
  int ndim;
  uint32_t align;
  double value;
  int64_t dim[KILN_MAX_DIMS]; /* ref: literal or -(d+1) */
  const char *stride_text[KILN_MAX_DIMS];
  kiln__product stride[KILN_MAX_DIMS];
} kiln__tensor;

/* Modules and functions of one plan in one CUDA context; immutable once published. */
typedef struct kiln__ctx_slot {
  struct kiln__ctx_slot *next;
  unsigned long long ctx_id; /* cuCtxGetId: unique for the life of the process */
  void *ctx;                 /* CUcontext */
  void **modules;            /* CUmodule per kernel; NULL where shared with an earlier one */
  void **functions;          /* CUfunction per kernel */
  unsigned *smem;            /* dynamic shared memory per kernel (of the chosen image) */
  unsigned (*cluster)[3];    /* cluster dims per kernel (of the chosen image) */
  unsigned *major;           /* SM major of the chosen image: tensor maps only from 9 on */
  int64_t sms;               /* SM count the rules use in this context (kiln__context_sms) */
} kiln__ctx_slot;

struct kiln_plan {
  kiln_pack *pack;
  const char *graph, *instance, *graph_json;
  int nspec;
  const char **spec_name;
  int64_t *spec_value;
  int ndyn;
  const char **dyn_name;
  kiln__grid workspace; /* bytes before rounding; text NULL when the plan needs none */
  int ntensors;
  kiln__tensor *tensors;
  int nscratch; /* tensors of role KILN_ROLE_SCRATCH (at most KILN_PACK_MAX_SCRATCH) */
  int nkernels;
  kiln__kernel *kernels;
  pthread_mutex_t load_lock;       /* serializes module loading */
  _Atomic(kiln__ctx_slot *) slots; /* read lock-free on the launch path */
};

struct kiln_pack {
  kiln_rt *rt;
  kiln_pack *prev, *next; /* rt's list of open packs */
  unsigned char *owned;   /* file bytes we read (NULL for open_memory) */
  const unsigned char *data;
  size_t size;
  uint32_t version, checksum;
  int nimages;
  int nplans;
  kiln_plan *plans;
  struct kiln__arena *arena; /* every parsed structure */
};

struct kiln_rt {
  uint64_t id; /* keys the calling thread's error detail */
  pthread_mutex_t lock;
  kiln_pack *packs;
};

/* Records a detail message for rt in the calling thread; returns status. */
KILN__INTERNAL kiln_status kiln__fail(const kiln_rt *rt, kiln_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parses and checks pack bytes into p (rt, data, size set by the caller). */
KILN__INTERNAL kiln_status kiln__pack_parse(kiln_pack *p);
KILN__INTERNAL void kiln__pack_free_parsed(kiln_pack *p);

/* Index of the image of k that runs best on an SM major.minor, or -1 (see kiln.h). */
KILN__INTERNAL int kiln__select_image(const kiln__kernel *k, int major, int minor);

/* Evaluates a product with resolved dynamic dims; -1 on int64 overflow. */
KILN__INTERNAL int kiln__product_eval(const kiln__product *p, const int64_t *dyn, int64_t *out);
/* A grid axis or workspace rule: min(ceil(product / div), max when > 0, the SM cap when
 * sm_mul > 0) + add, for a device of sms SMs (1..KILN_PACK_MAX_SMS); -1 on int64 overflow. */
KILN__INTERNAL int kiln__rule_eval(const kiln__grid *g, const int64_t *dyn, int64_t sms,
                                   int64_t *out);
/* The kernels' part of the workspace for resolved dims (dyn may be NULL when the rule has no
 * dynamic factor) on a device of sms SMs: the rule's value rounded up to
 * KILN_PACK_WORKSPACE_ALIGN; 0 when the plan needs none. -1 on int64 overflow. */
KILN__INTERNAL int kiln__workspace_rule_bytes(const kiln_plan *plan, const int64_t *dyn,
                                              int64_t sms, int64_t *out);
/* The whole workspace: the kernels' part, then the scratch tensors, each at a multiple of
 * KILN_PACK_WORKSPACE_ALIGN, two sharing bytes only when no kernel can touch both (offsets
 * into scratch_off when not NULL, plan->nscratch entries); total bytes into *out. dyn may be NULL only when no rule or scratch tensor uses a dynamic
 * dim. -1 on int64 overflow. */
KILN__INTERNAL int kiln__workspace_eval(const kiln_plan *plan, const int64_t *dyn, int64_t sms,
                                        int64_t *scratch_off, int64_t *out);
/* Grid of every kernel for resolved dims on a device of sms SMs; checks driver limits and
 * cluster divisibility. */
KILN__INTERNAL kiln_status kiln__plan_grids(kiln_plan *plan, const int64_t *dyn, int64_t sms,
                                            unsigned (*grids)[3]);
/* The SM count rules use for the calling thread's current context: KILN_SM_COUNT when set
 * (MPS shares, tests), else the context's SMs (a green context's part of the device), else
 * the device's, clamped to KILN_PACK_MAX_SMS. *sms is
 * KILN_PACK_MAX_SMS (enough for any device) and *have_ctx 0 when no context is current. */
KILN__INTERNAL kiln_status kiln__context_sms(const kiln_rt *rt, int64_t *sms, int *have_ctx);

/* Workspace checks of both launch paths, for a device of sms SMs: bound, aligned, and bytes
 * (SIZE_MAX when unknown) enough. */
KILN__INTERNAL kiln_status kiln__check_workspace(kiln_plan *plan, const int64_t *dyn, int64_t sms,
                                                 int bound, kiln_devptr ptr, size_t bytes);
/* Launch core: values per tensor / dynamic dim, the workspace (checked here, for the SM count
 * of the context the launch runs in). */
KILN__INTERNAL kiln_status kiln__launch(kiln_plan *plan, struct CUstream_st *stream,
                                        const kiln_devptr *ptrs, const double *scalars,
                                        const int64_t *dyn, int ws_bound, kiln_devptr workspace,
                                        size_t ws_bytes);
/* Unloads the plan's modules from the contexts that are still alive. */
KILN__INTERNAL void kiln__plan_unload(kiln_plan *plan);

#endif
