/* libkilnrt: binding the caller's tensors, scalars and dims to a plan, and checking them
 * against the plan before anything is launched. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { UNBOUND = 0, BOUND_TENSOR = 1, BOUND_SCALAR = 2 };

typedef struct bound {
  int state;
  kiln_dtype dtype;
  int ndim;
  int has_strides;
  int64_t dims[KILN_MAX_DIMS];
  int64_t strides[KILN_MAX_DIMS];
} bound;

struct kiln_bind {
  kiln_plan *plan;
  int clean;          /* passed kiln_bind_check and unchanged since */
  bound *t;           /* per tensor */
  kiln_devptr *ptrs;  /* per tensor: what kernels get */
  double *scalars;    /* per tensor */
  int64_t *dim_value; /* per dynamic dim: set by kiln_bind_dim */
  unsigned char *dim_set;
  int64_t *dyn;       /* per dynamic dim: resolved by the check */
  kiln_devptr ws_ptr; /* workspace: kiln_bind_workspace */
  size_t ws_bytes;
  int ws_set;
};

#define RT(plan) ((plan)->pack->rt)

int kiln__product_eval(const kiln__product *p, const int64_t *dyn, int64_t *out) {
  int64_t v = 1;
  for (int i = 0; i < p->nfactor; i++) {
    int64_t f = p->factor[i] >= 0 ? p->factor[i] : dyn[-(p->factor[i] + 1)];
    if (__builtin_mul_overflow(v, f, &v)) return -1;
  }
  *out = v;
  return 0;
}

int kiln__rule_eval(const kiln__grid *g, const int64_t *dyn, int64_t sms, int64_t *out) {
  int64_t v;
  if (kiln__product_eval(&g->prod, dyn, &v) != 0) return -1;
  v = v / g->div + (v % g->div != 0);
  if (g->max > 0 && v > g->max) v = g->max;
  if (g->sm_mul > 0) {
    int64_t cap;
    if (__builtin_mul_overflow(sms, g->sm_mul, &cap)) return -1;
    cap = cap / g->sm_div > 1 ? cap / g->sm_div : 1;
    if (v > cap) v = cap;
  }
  return __builtin_add_overflow(v, g->add, out) ? -1 : 0;
}

int kiln__workspace_rule_bytes(const kiln_plan *plan, const int64_t *dyn, int64_t sms,
                               int64_t *out) {
  const kiln__grid *g = &plan->workspace;
  int64_t v;
  *out = 0;
  if (!g->text) return 0;
  if (kiln__rule_eval(g, dyn, sms, &v) != 0) return -1;
  const int64_t a = KILN_PACK_WORKSPACE_ALIGN;
  if (v > INT64_MAX - (a - 1)) return -1;
  *out = (v + a - 1) / a * a;
  return 0;
}

/* Bytes a scratch tensor spans for resolved dims: 0 when an extent is 0, else one element past
 * the last one its strides reach. -1 on int64 overflow. */
static int scratch_bytes(const kiln__tensor *t, const int64_t *dyn, int64_t *out) {
  int64_t last = 0, stride;
  *out = 0;
  for (int j = 0; j < t->ndim; j++) {
    const int64_t d = t->dim[j] >= 0 ? t->dim[j] : dyn[-(t->dim[j] + 1)];
    if (d == 0) return 0;
    if (kiln__product_eval(&t->stride[j], dyn, &stride) != 0 ||
        __builtin_mul_overflow(d - 1, stride, &stride) || __builtin_add_overflow(last, stride, &last))
      return -1;
  }
  return __builtin_add_overflow(last, 1, &last) ||
                 __builtin_mul_overflow(last, (int64_t)kiln_dtype_size(t->dtype), out)
             ? -1
             : 0;
}

/* Whether two scratch tensors must not share bytes: some kernel takes both, or the later
 * one's first kernel starts early (pdl) while the earlier one's last kernel may still run. */
static int scratch_conflict(const kiln_plan *plan, const kiln__tensor *x, const kiln__tensor *y) {
  if (x->first_kernel < 0 || y->first_kernel < 0) return 0;
  if (x->first_kernel > y->first_kernel) {
    const kiln__tensor *t = x;
    x = y;
    y = t;
  }
  return y->first_kernel <= x->last_kernel + 1 &&
         (y->first_kernel <= x->last_kernel ||
          (plan->kernels[y->first_kernel].flags & KILN_PACK_KERNEL_PDL));
}

int kiln__workspace_eval(const kiln_plan *plan, const int64_t *dyn, int64_t sms,
                         int64_t *scratch_off, int64_t *out) {
  int64_t base, end, off[KILN_PACK_MAX_SCRATCH], size[KILN_PACK_MAX_SCRATCH];
  const kiln__tensor *placed[KILN_PACK_MAX_SCRATCH];
  if (kiln__workspace_rule_bytes(plan, dyn, sms, &base) != 0) return -1;
  const int64_t a = KILN_PACK_WORKSPACE_ALIGN;
  int n = 0;
  end = base;
  /* first fit in plan order: the lowest offset (the base or the end of a placed tensor) that
   * overlaps no placed tensor it conflicts with; the same layout for the same dims */
  for (int i = 0; i < plan->ntensors; i++) {
    const kiln__tensor *t = &plan->tensors[i];
    int64_t bytes, at = -1;
    if (t->scratch < 0) continue;
    if (scratch_bytes(t, dyn, &bytes) != 0 || bytes > INT64_MAX - (a - 1)) return -1;
    bytes = (bytes + a - 1) / a * a;
    for (int c = -1; c < n; c++) {
      const int64_t cand = c < 0 ? base : off[c] + size[c];
      if (at >= 0 && cand >= at) continue;
      int fits = 1;
      for (int j = 0; j < n && fits; j++)
        fits = !scratch_conflict(plan, t, placed[j]) || cand + bytes <= off[j] ||
               off[j] + size[j] <= cand;
      if (fits) at = cand;
    }
    int64_t past;
    if (__builtin_add_overflow(at, bytes, &past)) return -1;
    placed[n] = t, off[n] = at, size[n] = bytes, n++;
    if (scratch_off) scratch_off[t->scratch] = at;
    if (past > end) end = past;
  }
  *out = end;
  return 0;
}

kiln_status kiln_bind_create(kiln_plan *plan, kiln_bind **out) {
  if (out) *out = NULL;
  if (!plan || !out)
    return kiln__fail(plan ? RT(plan) : NULL, KILN_ERR_INVALID_ARG, "NULL argument");
  size_t nt = (size_t)plan->ntensors, nd = (size_t)plan->ndyn;
  size_t size = sizeof(kiln_bind) + nt * (sizeof(bound) + sizeof(kiln_devptr) + sizeof(double)) +
                nd * (3 * sizeof(int64_t) + 1);
  kiln_bind *b = calloc(1, size);
  if (!b) return kiln__fail(RT(plan), KILN_ERR_NOMEM, "out of memory");
  b->plan = plan;
  b->t = (bound *)(b + 1);
  b->ptrs = (kiln_devptr *)(b->t + nt);
  b->scalars = (double *)(b->ptrs + nt);
  b->dim_value = (int64_t *)(b->scalars + nt);
  b->dyn = b->dim_value + nd;
  b->dim_set = (unsigned char *)(b->dyn + nd);
  *out = b;
  return KILN_OK;
}

kiln_status kiln_bind_destroy(kiln_bind *b) {
  free(b);
  return KILN_OK;
}

kiln_status kiln_bind_reset(kiln_bind *b) {
  if (!b) return KILN_ERR_INVALID_ARG;
  kiln_plan *plan = b->plan;
  memset(b->t, 0, (size_t)plan->ntensors * sizeof *b->t);
  memset(b->ptrs, 0, (size_t)plan->ntensors * sizeof *b->ptrs);
  memset(b->scalars, 0, (size_t)plan->ntensors * sizeof *b->scalars);
  memset(b->dim_set, 0, (size_t)plan->ndyn);
  b->ws_ptr = 0;
  b->ws_bytes = 0;
  b->ws_set = 0;
  b->clean = 0;
  return KILN_OK;
}

static kiln_status bind_at(kiln_bind *b, int index, kiln_devptr ptr, int ndim, const int64_t *dims,
                           const int64_t *strides, kiln_dtype dtype) {
  kiln_plan *plan = b->plan;
  const kiln__tensor *t = &plan->tensors[index];
  if (t->role != KILN_ROLE_INPUT && t->role != KILN_ROLE_OUTPUT)
    return kiln__fail(
        RT(plan), KILN_ERR_INVALID_ARG, "tensor '%s' is a %s tensor: %s", t->name,
        kiln_role_name(t->role),
        t->role == KILN_ROLE_SCALAR ? "bind it with kiln_bind_scalar" : "it is not bound");
  if (ndim < 0 || ndim > KILN_MAX_DIMS)
    return kiln__fail(RT(plan), KILN_ERR_SHAPE, "tensor '%s': rank %d (at most %d)", t->name, ndim,
                      KILN_MAX_DIMS);
  if (ndim > 0 && !dims)
    return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "tensor '%s': dims is NULL", t->name);
  for (int i = 0; i < ndim; i++)
    if (dims[i] < 0)
      return kiln__fail(RT(plan), KILN_ERR_SHAPE, "tensor '%s': dim %d is negative (%" PRId64 ")",
                        t->name, i, dims[i]);
  bound *bt = &b->t[index];
  bt->state = BOUND_TENSOR;
  bt->dtype = dtype;
  bt->ndim = ndim;
  bt->has_strides = strides != NULL;
  for (int i = 0; i < ndim; i++) {
    bt->dims[i] = dims[i];
    bt->strides[i] = strides ? strides[i] : 0;
  }
  b->ptrs[index] = ptr;
  b->clean = 0;
  return KILN_OK;
}

kiln_status kiln_bind_tensor(kiln_bind *b, const char *name, kiln_devptr ptr, int ndim,
                             const int64_t *dims, const int64_t *strides, kiln_dtype dtype) {
  if (!b || !name) return kiln__fail(b ? RT(b->plan) : NULL, KILN_ERR_INVALID_ARG, "NULL argument");
  int index;
  kiln_status st = kiln_plan_tensor_index(b->plan, name, &index);
  return st != KILN_OK ? st : bind_at(b, index, ptr, ndim, dims, strides, dtype);
}

kiln_status kiln_bind_tensor_uid(kiln_bind *b, int64_t uid, kiln_devptr ptr, int ndim,
                                 const int64_t *dims, const int64_t *strides, kiln_dtype dtype) {
  if (!b) return KILN_ERR_INVALID_ARG;
  int index;
  kiln_status st = kiln_plan_tensor_index_uid(b->plan, uid, &index);
  return st != KILN_OK ? st : bind_at(b, index, ptr, ndim, dims, strides, dtype);
}

kiln_status kiln_bind_scalar(kiln_bind *b, const char *name, double value) {
  if (!b || !name) return kiln__fail(b ? RT(b->plan) : NULL, KILN_ERR_INVALID_ARG, "NULL argument");
  int index;
  kiln_status st = kiln_plan_tensor_index(b->plan, name, &index);
  if (st != KILN_OK) return st;
  const kiln__tensor *t = &b->plan->tensors[index];
  if (t->role != KILN_ROLE_SCALAR)
    return kiln__fail(RT(b->plan), KILN_ERR_INVALID_ARG,
                      "tensor '%s' is a %s tensor, not a runtime scalar", name,
                      kiln_role_name(t->role));
  b->t[index].state = BOUND_SCALAR;
  b->scalars[index] = value;
  b->clean = 0;
  return KILN_OK;
}

kiln_status kiln_bind_dim(kiln_bind *b, const char *name, int64_t value) {
  if (!b || !name) return kiln__fail(b ? RT(b->plan) : NULL, KILN_ERR_INVALID_ARG, "NULL argument");
  kiln_plan *plan = b->plan;
  if (value < 0)
    return kiln__fail(RT(plan), KILN_ERR_SHAPE, "dim %s = %" PRId64 " is negative", name, value);
  for (int d = 0; d < plan->ndyn; d++)
    if (strcmp(plan->dyn_name[d], name) == 0) {
      b->dim_value[d] = value;
      b->dim_set[d] = 1;
      b->clean = 0;
      return KILN_OK;
    }
  for (int i = 0; i < plan->nspec; i++)
    if (strcmp(plan->spec_name[i], name) == 0) {
      if (plan->spec_value[i] == value) return KILN_OK;
      return kiln__fail(RT(plan), KILN_ERR_SHAPE,
                        "dim %s is specialized to %" PRId64 " in plan %s [%s], not %" PRId64, name,
                        plan->spec_value[i], plan->graph, plan->instance, value);
    }
  return kiln__fail(RT(plan), KILN_ERR_NOT_FOUND, "plan %s has no dim '%s'", plan->graph, name);
}

kiln_status kiln_bind_workspace(kiln_bind *b, kiln_devptr ptr, size_t bytes) {
  if (!b) return KILN_ERR_INVALID_ARG;
  if (!ptr && bytes)
    return kiln__fail(RT(b->plan), KILN_ERR_INVALID_ARG,
                      "workspace: NULL pointer with %zu bytes (use 0, 0 to unbind)", bytes);
  b->ws_ptr = ptr;
  b->ws_bytes = bytes;
  b->ws_set = ptr != 0;
  b->clean = 0;
  return KILN_OK;
}

/* "[T, 4096]" for messages. */
static void plan_dims_text(const kiln_plan *plan, const kiln__tensor *t, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < t->ndim && len < n; i++) {
    if (t->dim[i] >= 0)
      len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, i ? ", " : "", t->dim[i]);
    else
      len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "",
                              plan->dyn_name[-(t->dim[i] + 1)]);
  }
  if (len < n) snprintf(buf + len, n - len, "]");
}

static void dims_text(const int64_t *dims, int ndim, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && len < n; i++)
    len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, i ? ", " : "", dims[i]);
  if (len < n) snprintf(buf + len, n - len, "]");
}

/* Pointer checks shared by both launch paths: null with elements, alignment. */
static kiln_status check_pointer(kiln_plan *plan, const kiln__tensor *t, kiln_devptr ptr,
                                 int64_t numel) {
  if (numel > 0 && ptr == 0)
    return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "tensor '%s': NULL pointer", t->name);
  if (ptr % t->align)
    return kiln__fail(RT(plan), KILN_ERR_ALIGN,
                      "tensor '%s': pointer 0x%llx is not %u-byte aligned (the plan's kernels "
                      "need it)",
                      t->name, ptr, t->align);
  return KILN_OK;
}

/* Pass 1 of the check: dtypes, ranks, fixed dims of the bound tensors, and the dynamic dims
 * they imply (into dyn, known). strict: every input/output and scalar must be bound, and
 * every dynamic dim known; else unbound tensors are skipped and unknown dims left to the
 * caller. */
static kiln_status resolve_dims(kiln_plan *plan, const kiln_bind *b, int strict, int64_t *dyn,
                                int *known) {
  int src_tensor[KILN_PACK_MAX_DYN], src_dim[KILN_PACK_MAX_DYN];
  for (int d = 0; d < plan->ndyn; d++) {
    known[d] = b->dim_set[d];
    dyn[d] = b->dim_value[d];
    src_tensor[d] = -1;
    src_dim[d] = 0;
  }
  char want[160], have[160];
  for (int i = 0; i < plan->ntensors; i++) {
    const kiln__tensor *t = &plan->tensors[i];
    const bound *bt = &b->t[i];
    if (t->role == KILN_ROLE_VIRTUAL || t->role == KILN_ROLE_CONSTANT ||
        t->role == KILN_ROLE_SCRATCH)
      continue;
    if (bt->state == UNBOUND) {
      if (!strict) continue;
      return kiln__fail(RT(plan), KILN_ERR_UNBOUND, "%s tensor '%s' (uid %" PRId64 ") is not bound",
                        kiln_role_name(t->role), t->name, t->uid);
    }
    if (t->role == KILN_ROLE_SCALAR) continue;
    if (bt->dtype != t->dtype) {
      const char *name = kiln_dtype_name(bt->dtype);
      return kiln__fail(RT(plan), KILN_ERR_DTYPE, "tensor '%s': bound as %s, the plan wants %s",
                        t->name, name ? name : "an unknown dtype", kiln_dtype_name(t->dtype));
    }
    plan_dims_text(plan, t, want, sizeof want);
    dims_text(bt->dims, bt->ndim, have, sizeof have);
    if (bt->ndim != t->ndim)
      return kiln__fail(RT(plan), KILN_ERR_SHAPE,
                        "tensor '%s': bound with rank %d %s, the plan "
                        "wants rank %d %s",
                        t->name, bt->ndim, have, t->ndim, want);
    for (int j = 0; j < t->ndim; j++) {
      if (t->dim[j] >= 0) {
        if (bt->dims[j] != t->dim[j])
          return kiln__fail(RT(plan), KILN_ERR_SHAPE,
                            "tensor '%s': dim %d is %" PRId64 ", the plan wants %" PRId64
                            " (bound %s, plan %s)",
                            t->name, j, bt->dims[j], t->dim[j], have, want);
        continue;
      }
      int d = (int)-(t->dim[j] + 1);
      if (!known[d]) {
        known[d] = 1;
        dyn[d] = bt->dims[j];
        src_tensor[d] = i;
        src_dim[d] = j;
      } else if (dyn[d] != bt->dims[j]) {
        char from[160];
        if (src_tensor[d] < 0)
          snprintf(from, sizeof from, "kiln_bind_dim");
        else
          snprintf(from, sizeof from, "tensor '%s' dim %d", plan->tensors[src_tensor[d]].name,
                   src_dim[d]);
        return kiln__fail(RT(plan), KILN_ERR_SHAPE,
                          "dynamic dim %s is %" PRId64 " from %s but %" PRId64
                          " from tensor '%s' dim %d",
                          plan->dyn_name[d], dyn[d], from, bt->dims[j], t->name, j);
      }
    }
  }
  for (int d = 0; strict && d < plan->ndyn; d++)
    if (!known[d])
      return kiln__fail(RT(plan), KILN_ERR_UNBOUND,
                        "dynamic dim %s is not bound and no bound tensor has it: kiln_bind_dim",
                        plan->dyn_name[d]);
  return KILN_OK;
}

static kiln_status workspace_overflow(kiln_plan *plan) {
  return kiln__fail(RT(plan), KILN_ERR_SHAPE, "workspace size %s overflows", plan->workspace.text);
}

/* Does the rule depend on the device's SM count? */
static int rule_uses_sms(const kiln__grid *g) { return g->sm_mul > 0; }

kiln_status kiln_plan_workspace_size(kiln_plan *plan, kiln_bind *b, size_t *bytes) {
  if (bytes) *bytes = 0;
  if (!plan || !bytes)
    return kiln__fail(plan ? RT(plan) : NULL, KILN_ERR_INVALID_ARG, "NULL argument");
  if (!plan->workspace.text) return KILN_OK;
  const kiln__product *p = &plan->workspace.prod;
  int64_t dyn[KILN_PACK_MAX_DYN], v;
  int known[KILN_PACK_MAX_DYN];
  if (b) {
    if (b->plan != plan)
      return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "the binding belongs to another plan");
    kiln_status st = resolve_dims(plan, b, 0, dyn, known);
    if (st != KILN_OK) return st;
  }
  /* every dynamic dim of the rule and of the scratch tensors' dims and strides */
  int used[KILN_PACK_MAX_DYN] = {0};
  for (int i = 0; i < p->nfactor; i++)
    if (p->factor[i] < 0) used[-(p->factor[i] + 1)] = 1;
  for (int i = 0; i < plan->ntensors; i++) {
    const kiln__tensor *t = &plan->tensors[i];
    if (t->scratch < 0) continue;
    for (int j = 0; j < t->ndim; j++) {
      if (t->dim[j] < 0) used[-(t->dim[j] + 1)] = 1;
      for (int f = 0; f < t->stride[j].nfactor; f++)
        if (t->stride[j].factor[f] < 0) used[-(t->stride[j].factor[f] + 1)] = 1;
    }
  }
  for (int d = 0; d < plan->ndyn; d++) {
    if (!used[d]) continue;
    if (!b)
      return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG,
                        "workspace size %s depends on dim %s: pass a binding", plan->workspace.text,
                        plan->dyn_name[d]);
    if (!known[d])
      return kiln__fail(RT(plan), KILN_ERR_UNBOUND,
                        "dynamic dim %s (the workspace size %s needs it) is not bound and no "
                        "bound tensor has it: kiln_bind_dim",
                        plan->dyn_name[d], plan->workspace.text);
  }
  int64_t sms = KILN_PACK_MAX_SMS;
  int have_ctx;
  if (rule_uses_sms(&plan->workspace)) {
    kiln_status st = kiln__context_sms(RT(plan), &sms, &have_ctx);
    if (st != KILN_OK) return st;
  }
  if (kiln__workspace_eval(plan, b ? dyn : NULL, sms, NULL, &v) != 0 || (uint64_t)v > SIZE_MAX)
    return workspace_overflow(plan);
  *bytes = (size_t)v;
  return KILN_OK;
}

/* Does any rule of the plan depend on the device's SM count? */
static int plan_uses_sms(const kiln_plan *plan) {
  if (rule_uses_sms(&plan->workspace)) return 1;
  for (int k = 0; k < plan->nkernels; k++)
    for (int a = 0; a < 3; a++)
      if (rule_uses_sms(&plan->kernels[k].grid[a])) return 1;
  return 0;
}

kiln_status kiln__check_workspace(kiln_plan *plan, const int64_t *dyn, int64_t sms, int bound,
                                  kiln_devptr ptr, size_t bytes) {
  int64_t need;
  if (!plan->workspace.text) return KILN_OK;
  if (kiln__workspace_eval(plan, dyn, sms, NULL, &need) != 0) return workspace_overflow(plan);
  if (need == 0) return KILN_OK;
  if (!bound)
    return kiln__fail(RT(plan), KILN_ERR_UNBOUND,
                      "plan %s needs a workspace of %" PRId64
                      " bytes (%s): kiln_plan_workspace_size, kiln_bind_workspace",
                      plan->graph, need, plan->workspace.text);
  if (ptr % KILN_PACK_WORKSPACE_ALIGN)
    return kiln__fail(RT(plan), KILN_ERR_ALIGN, "workspace: pointer 0x%llx is not %u-byte aligned",
                      ptr, KILN_PACK_WORKSPACE_ALIGN);
  if (bytes < (uint64_t)need)
    return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG,
                      "workspace: %zu bytes bound, the plan needs %" PRId64 " (%s)", bytes, need,
                      plan->workspace.text);
  return KILN_OK;
}

kiln_status kiln_bind_check(kiln_plan *plan, kiln_bind *b) {
  if (!plan || !b) return kiln__fail(plan ? RT(plan) : NULL, KILN_ERR_INVALID_ARG, "NULL argument");
  if (b->plan != plan)
    return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "the binding belongs to another plan");
  if (b->clean) return KILN_OK;
  int known[KILN_PACK_MAX_DYN];
  kiln_status st = resolve_dims(plan, b, 1, b->dyn, known);
  if (st != KILN_OK) return st;
  /* Pass 2: strides (of dims with extent > 1), pointers. */
  for (int i = 0; i < plan->ntensors; i++) {
    const kiln__tensor *t = &plan->tensors[i];
    const bound *bt = &b->t[i];
    if (t->role != KILN_ROLE_INPUT && t->role != KILN_ROLE_OUTPUT) continue;
    int64_t numel = 1, contiguous = 1;
    for (int j = t->ndim - 1; j >= 0; j--) {
      int64_t stride = bt->has_strides ? bt->strides[j] : contiguous;
      if (__builtin_mul_overflow(contiguous, bt->dims[j], &contiguous) ||
          __builtin_mul_overflow(numel, bt->dims[j], &numel))
        return kiln__fail(RT(plan), KILN_ERR_SHAPE, "tensor '%s': element count overflows",
                          t->name);
      if (bt->dims[j] <= 1) continue;
      int64_t plan_stride;
      if (kiln__product_eval(&t->stride[j], b->dyn, &plan_stride) != 0)
        return kiln__fail(RT(plan), KILN_ERR_SHAPE, "tensor '%s': stride of dim %d overflows",
                          t->name, j);
      if (stride != plan_stride)
        return kiln__fail(RT(plan), KILN_ERR_STRIDE,
                          "tensor '%s': stride of dim %d is %" PRId64 ", the plan wants %" PRId64
                          "%s%s%s",
                          t->name, j, stride, plan_stride, t->stride_text[j] ? " (" : "",
                          t->stride_text[j] ? t->stride_text[j] : "", t->stride_text[j] ? ")" : "");
    }
    st = check_pointer(plan, t, b->ptrs[i], numel);
    if (st != KILN_OK) return st;
  }
  /* Without a current context the launch's device is unknown: the smallest workspace any
   * device needs here, the largest grids; the launch checks again for its context. */
  int64_t sms = KILN_PACK_MAX_SMS;
  int have_ctx = 0;
  if (plan_uses_sms(plan) && (st = kiln__context_sms(RT(plan), &sms, &have_ctx)) != KILN_OK)
    return st;
  st = kiln__check_workspace(plan, b->dyn, have_ctx ? sms : 1, b->ws_set, b->ws_ptr, b->ws_bytes);
  if (st != KILN_OK) return st;
  unsigned grids[KILN_PACK_MAX_KERNELS][3];
  st = kiln__plan_grids(plan, b->dyn, sms, grids);
  if (st != KILN_OK) return st;
  b->clean = 1;
  return KILN_OK;
}

kiln_status kiln_launch(kiln_plan *plan, kiln_bind *b, struct CUstream_st *stream) {
  if (!b || b->plan != plan || !b->clean) {
    kiln_status st = kiln_bind_check(plan, b);
    if (st != KILN_OK) return st;
  }
  return kiln__launch(plan, stream, b->ptrs, b->scalars, b->dyn, b->ws_set, b->ws_set ? b->ws_ptr : 0,
                      b->ws_bytes);
}

kiln_status kiln_launch_args(kiln_plan *plan, struct CUstream_st *stream, const kiln_devptr *ptrs,
                             const double *scalars, const int64_t *dims, kiln_devptr workspace) {
  if (!plan) return KILN_ERR_INVALID_ARG;
  if ((plan->ndyn && !dims) || (plan->ntensors && !ptrs))
    return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "NULL ptrs or dims");
  for (int d = 0; d < plan->ndyn; d++)
    if (dims[d] < 0)
      return kiln__fail(RT(plan), KILN_ERR_SHAPE, "dynamic dim %s = %" PRId64 " is negative",
                        plan->dyn_name[d], dims[d]);
  for (int i = 0; i < plan->ntensors; i++) {
    const kiln__tensor *t = &plan->tensors[i];
    if (t->role == KILN_ROLE_SCALAR && !scalars)
      return kiln__fail(RT(plan), KILN_ERR_UNBOUND, "scalar '%s' needs a value", t->name);
    if (t->role != KILN_ROLE_INPUT && t->role != KILN_ROLE_OUTPUT) continue;
    int64_t numel = 1;
    for (int j = 0; j < t->ndim; j++) {
      int64_t e = t->dim[j] >= 0 ? t->dim[j] : dims[-(t->dim[j] + 1)];
      if (__builtin_mul_overflow(numel, e, &numel))
        return kiln__fail(RT(plan), KILN_ERR_SHAPE, "tensor '%s': element count overflows",
                          t->name);
    }
    kiln_status st = check_pointer(plan, t, ptrs[i], numel);
    if (st != KILN_OK) return st;
  }
  /* the smallest workspace any device needs first (no driver needed); the launch checks
   * again for its context's SM count */
  kiln_status st = kiln__check_workspace(plan, dims, 1, workspace != 0, workspace, SIZE_MAX);
  if (st != KILN_OK) return st;
  return kiln__launch(plan, stream, ptrs, scalars, dims, workspace != 0, workspace, SIZE_MAX);
}
