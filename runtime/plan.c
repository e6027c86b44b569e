/* libkilnrt: finding plans in a pack and describing them (no driver needed). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define RT(plan) ((plan) ? (plan)->pack->rt : NULL)

kiln_status kiln_pack_plan_at(kiln_pack *p, int index, kiln_plan **out) {
  if (out) *out = NULL;
  if (!p || !out) return kiln__fail(p ? p->rt : NULL, KILN_ERR_INVALID_ARG, "NULL argument");
  if (index < 0 || index >= p->nplans)
    return kiln__fail(p->rt, KILN_ERR_NOT_FOUND, "plan index %d outside [0, %d)", index, p->nplans);
  *out = &p->plans[index];
  return KILN_OK;
}

/* Does the query "H=4096, W=8" name exactly the plan's specialized dims, in any order? */
static int instance_matches(const kiln_plan *pl, const char *q) {
  if (strcmp(pl->instance, q) == 0) return 1;
  uint64_t seen = 0;
  int n = 0;
  const char *s = q;
  while (*s) {
    while (*s == ' ') s++;
    const char *name = s;
    while (*s && *s != '=' && *s != ',' && *s != ' ') s++;
    size_t len = (size_t)(s - name);
    while (*s == ' ') s++;
    if (*s != '=' || len == 0) return 0;
    char *end;
    long long v = strtoll(s + 1, &end, 10);
    if (end == s + 1) return 0;
    s = end;
    while (*s == ' ') s++;
    if (*s == ',')
      s++;
    else if (*s)
      return 0;
    int hit = 0;
    for (int i = 0; i < pl->nspec; i++)
      if (strlen(pl->spec_name[i]) == len && memcmp(pl->spec_name[i], name, len) == 0 &&
          pl->spec_value[i] == v && !(seen >> i & 1)) {
        seen |= (uint64_t)1 << i;
        hit = 1;
        break;
      }
    if (!hit) return 0;
    n++;
  }
  return n > 0 && n == pl->nspec;
}

/* Appends "a, b [H=1], ..." of the plans selected by graph (NULL: all) to buf. */
static void list_plans(const kiln_pack *p, const char *graph, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < p->nplans && len + 1 < size; i++) {
    const kiln_plan *pl = &p->plans[i];
    if (graph && strcmp(pl->graph, graph) != 0) continue;
    int n = snprintf(buf + len, size - len, "%s%s%s%s%s", len ? ", " : "", pl->graph,
                     pl->instance[0] ? " [" : "", pl->instance, pl->instance[0] ? "]" : "");
    if (n < 0) break;
    len += (size_t)n;
  }
  if (len >= size && size > 4) strcpy(buf + size - 4, "...");
}

kiln_status kiln_plan_get(kiln_pack *p, const char *graph, const char *instance, kiln_plan **out) {
  if (out) *out = NULL;
  if (!p || !graph || !out)
    return kiln__fail(p ? p->rt : NULL, KILN_ERR_INVALID_ARG, "NULL argument");
  if (!instance) instance = "";
  kiln_plan *found = NULL, *only = NULL;
  int count = 0;
  for (int i = 0; i < p->nplans; i++) {
    kiln_plan *pl = &p->plans[i];
    if (strcmp(pl->graph, graph) != 0) continue;
    count++;
    only = pl;
    if (instance_matches(pl, instance)) {
      found = pl;
      break;
    }
  }
  if (!found && !instance[0] && count == 1) found = only;
  if (found) {
    *out = found;
    return KILN_OK;
  }
  char list[768];
  if (count == 0) {
    list_plans(p, NULL, list, sizeof list);
    return kiln__fail(p->rt, KILN_ERR_NOT_FOUND, "no graph '%s' in the pack (it has: %s)", graph,
                      p->nplans ? list : "no plans");
  }
  list_plans(p, graph, list, sizeof list);
  if (!instance[0])
    return kiln__fail(p->rt, KILN_ERR_NOT_FOUND, "graph '%s' has %d instances: name one (%s)",
                      graph, count, list);
  return kiln__fail(p->rt, KILN_ERR_NOT_FOUND, "graph '%s' has no instance '%s' (it has: %s)",
                    graph, instance, list);
}

kiln_status kiln_plan_info_get(const kiln_plan *plan, kiln_plan_info *info) {
  if (!plan || !info) return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "NULL argument");
  info->graph = plan->graph;
  info->instance = plan->instance;
  info->graph_json = plan->graph_json;
  info->ntensors = plan->ntensors;
  info->nkernels = plan->nkernels;
  info->ndims = plan->ndyn;
  info->nspecialized = plan->nspec;
  info->workspace = plan->workspace.text;
  return KILN_OK;
}

kiln_status kiln_plan_tensor(const kiln_plan *plan, int index, kiln_tensor_info *info) {
  if (!plan || !info) return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "NULL argument");
  if (index < 0 || index >= plan->ntensors)
    return kiln__fail(RT(plan), KILN_ERR_NOT_FOUND, "tensor index %d outside [0, %d)", index,
                      plan->ntensors);
  const kiln__tensor *t = &plan->tensors[index];
  memset(info, 0, sizeof *info);
  info->uid = t->uid;
  info->name = t->name;
  info->dtype = t->dtype;
  info->role = t->role;
  info->ndim = t->ndim;
  info->align = t->align;
  info->value = t->value;
  for (int i = 0; i < t->ndim; i++) {
    info->dims[i] = t->dim[i] >= 0 ? t->dim[i] : -1;
    info->dim_names[i] = t->dim[i] >= 0 ? NULL : plan->dyn_name[-(t->dim[i] + 1)];
    const kiln__product *s = &t->stride[i];
    int symbolic = 0;
    for (int f = 0; f < s->nfactor; f++) symbolic |= s->factor[f] < 0;
    int64_t v = -1;
    if (!symbolic && kiln__product_eval(s, NULL, &v) != 0) v = -1;
    info->strides[i] = symbolic ? -1 : v;
    info->stride_exprs[i] = symbolic ? t->stride_text[i] : NULL;
  }
  return KILN_OK;
}

kiln_status kiln_plan_tensor_index(const kiln_plan *plan, const char *name, int *index) {
  if (!plan || !name || !index) return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "NULL argument");
  for (int i = 0; i < plan->ntensors; i++)
    if (strcmp(plan->tensors[i].name, name) == 0) {
      *index = i;
      return KILN_OK;
    }
  return kiln__fail(RT(plan), KILN_ERR_NOT_FOUND, "plan %s has no tensor '%s'", plan->graph, name);
}

kiln_status kiln_plan_tensor_index_uid(const kiln_plan *plan, int64_t uid, int *index) {
  if (!plan || !index) return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "NULL argument");
  for (int i = 0; i < plan->ntensors; i++)
    if (plan->tensors[i].uid == uid) {
      *index = i;
      return KILN_OK;
    }
  return kiln__fail(RT(plan), KILN_ERR_NOT_FOUND, "plan %s has no tensor with uid %lld",
                    plan->graph, (long long)uid);
}

kiln_status kiln_plan_dim(const kiln_plan *plan, int index, const char **name) {
  if (!plan || !name) return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "NULL argument");
  if (index < 0 || index >= plan->ndyn)
    return kiln__fail(RT(plan), KILN_ERR_NOT_FOUND, "dynamic dim index %d outside [0, %d)", index,
                      plan->ndyn);
  *name = plan->dyn_name[index];
  return KILN_OK;
}

kiln_status kiln_plan_specialized(const kiln_plan *plan, int index, const char **name,
                                  int64_t *value) {
  if (!plan || !name || !value) return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "NULL argument");
  if (index < 0 || index >= plan->nspec)
    return kiln__fail(RT(plan), KILN_ERR_NOT_FOUND, "specialized dim index %d outside [0, %d)",
                      index, plan->nspec);
  *name = plan->spec_name[index];
  *value = plan->spec_value[index];
  return KILN_OK;
}

kiln_status kiln_plan_kernel(const kiln_plan *plan, int index, kiln_kernel_info *info) {
  if (!plan || !info) return kiln__fail(RT(plan), KILN_ERR_INVALID_ARG, "NULL argument");
  if (index < 0 || index >= plan->nkernels)
    return kiln__fail(RT(plan), KILN_ERR_NOT_FOUND, "kernel index %d outside [0, %d)", index,
                      plan->nkernels);
  const kiln__kernel *k = &plan->kernels[index];
  memset(info, 0, sizeof *info);
  info->symbol = k->symbol;
  info->engine = k->engine;
  info->plan_id = k->plan_id;
  for (int i = 0; i < 3; i++) {
    info->block[i] = k->block[i];
    info->cluster[i] = k->cluster[i];
    info->grid[i] = k->grid[i].text;
  }
  info->smem = k->smem;
  info->nparams = k->nparams;
  info->nimages = k->nimages;
  info->pdl = ((k->flags & KILN_PACK_KERNEL_PDL) ? 1 : 0) | ((k->flags & KILN_PACK_KERNEL_PDL_ENTRY) ? 2 : 0);
  return KILN_OK;
}

kiln_status kiln_plan_kernel_image(const kiln_plan *plan, int kernel, int image, const char **arch,
                                   const void **data, size_t *size) {
  if (!plan) return kiln__fail(NULL, KILN_ERR_INVALID_ARG, "NULL plan");
  if (kernel < 0 || kernel >= plan->nkernels || image < 0 || image >= plan->kernels[kernel].nimages)
    return kiln__fail(RT(plan), KILN_ERR_NOT_FOUND, "no image %d of kernel %d", image, kernel);
  const kiln__image *im = &plan->kernels[kernel].images[image];
  if (arch) *arch = im->arch;
  if (data) *data = im->data;
  if (size) *size = (size_t)im->size;
  return KILN_OK;
}

/* Ranks (lower is better): sm_XYa 0, sm_XY / sm_XYf 1, same-major lower-minor cubin
 * (not "a") 10 + distance, PTX 100 + distance (compute_XYa only on XY exactly). An "a"
 * cubin comes first because it is the exact-arch build with a superset of features. */
int kiln__select_image(const kiln__kernel *k, int major, int minor) {
  int best = -1, best_rank = INT_MAX, dev = major * 10 + minor;
  for (int i = 0; i < k->nimages; i++) {
    const kiln__image *im = &k->images[i];
    int v = im->major * 10 + im->minor, rank = -1;
    if (!im->ptx) {
      if (im->major == major && im->minor == minor)
        rank = im->suffix == 'a' ? 0 : 1;
      else if (im->major == major && im->minor < minor && im->suffix != 'a')
        rank = 10 + (minor - im->minor);
    } else if (im->suffix == 'a') {
      if (v == dev) rank = 99;
    } else if (im->suffix == 'f') {
      if (im->major == major && im->minor <= minor) rank = 100 + (minor - im->minor);
    } else if (v <= dev) {
      rank = 100 + (dev - v);
    }
    if (rank >= 0 && rank < best_rank) {
      best = i;
      best_rank = rank;
    }
  }
  return best;
}
