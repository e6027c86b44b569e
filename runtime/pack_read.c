/* libkilnrt: reads and checks a pack (format in pack.h) into the structures of internal.h.
 * Every offset, count and reference is bounds-checked: a truncated, bit-flipped or
 * hand-crafted pack gives KILN_ERR_PACK with a detail message, never a crash. */
#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "pack.h"

/* ---- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) ----------------------------- */

static uint32_t crc32c_table[256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc32c_table[i] = c;
  }
}

static uint32_t crc32c_soft(uint32_t crc, const unsigned char *p, size_t n) {
  pthread_once(&crc32c_once, crc32c_init);
  while (n--) crc = crc32c_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The SSE4.2 crc32 instruction computes the same CRC-32C 8 bytes at a time. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p,
                                                               size_t n) {
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  uint32_t c32 = (uint32_t)c;
  for (; n; p++, n--) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

static uint32_t crc32c(const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t crc = 0xFFFFFFFFu;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("sse4.2")) return ~crc32c_sse42(crc, p, n);
#endif
  return ~crc32c_soft(crc, p, n);
}

uint32_t kiln__pack_checksum(const void *pack, size_t size) {
  if (size < KILN_PACK_CHECKSUM_FROM) return 0;
  return crc32c((const unsigned char *)pack + KILN_PACK_CHECKSUM_FROM,
                size - KILN_PACK_CHECKSUM_FROM);
}

/* ---- arch strings -------------------------------------------------------------------- */

int kiln__parse_arch(const char *arch, int *major, int *minor, char *suffix, int *ptx) {
  const char *s;
  if (strncmp(arch, "sm_", 3) == 0) {
    s = arch + 3;
    *ptx = 0;
  } else if (strncmp(arch, "compute_", 8) == 0) {
    s = arch + 8;
    *ptx = 1;
  } else {
    return -1;
  }
  int ndigit = 0, v = 0;
  while (s[ndigit] >= '0' && s[ndigit] <= '9' && ndigit < 4) v = v * 10 + (s[ndigit++] - '0');
  if (ndigit < 2 || s[0] == '0') return -1;
  const char *rest = s + ndigit;
  if (rest[0] && (rest[1] || (rest[0] != 'a' && rest[0] != 'f'))) return -1;
  *major = v / 10;
  *minor = v % 10;
  *suffix = rest[0];
  return 0;
}

/* ---- arena: every parsed structure of a pack, freed at once -------------------------- */

struct kiln__arena {
  struct kiln__arena *next;
  size_t used, cap;
  alignas(max_align_t) unsigned char data[];
};

static void *arena_alloc(kiln_pack *p, size_t n) {
  n = (n + 15) & ~(size_t)15;
  struct kiln__arena *a = p->arena;
  if (!a || a->cap - a->used < n) {
    size_t cap = n > 16384 ? n : 16384;
    a = malloc(sizeof *a + cap);
    if (!a) return NULL;
    a->next = p->arena;
    a->used = 0;
    a->cap = cap;
    p->arena = a;
  }
  void *r = a->data + a->used;
  a->used += n;
  memset(r, 0, n);
  return r;
}

void kiln__pack_free_parsed(kiln_pack *p) {
  for (int i = 0; p->plans && i < p->nplans; i++) pthread_mutex_destroy(&p->plans[i].load_lock);
  p->plans = NULL;
  p->nplans = 0;
  while (p->arena) {
    struct kiln__arena *next = p->arena->next;
    free(p->arena);
    p->arena = next;
  }
}

/* ---- little-endian reads ------------------------------------------------------------- */

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

/* Metadata reader: a cursor whose reads past the end set `bad` and return zeros. */
typedef struct reader {
  kiln_pack *pack;
  const unsigned char *p, *end;
  int bad;
  const char *strtab;
  uint64_t strtab_size;
  const unsigned char *images;
  uint64_t images_size;
  char where[192]; /* "plan 1 (bias_gelu [H=4096]) tensor 3" for messages */
} reader;

static const unsigned char *take(reader *r, size_t n) {
  if (r->bad || (size_t)(r->end - r->p) < n) {
    r->bad = 1;
    return NULL;
  }
  const unsigned char *q = r->p;
  r->p += n;
  return q;
}

static unsigned rd_u8(reader *r) {
  const unsigned char *q = take(r, 1);
  return q ? q[0] : 0;
}
static uint32_t rd_u32(reader *r) {
  const unsigned char *q = take(r, 4);
  return q ? le32(q) : 0;
}
static uint64_t rd_u64(reader *r) {
  const unsigned char *q = take(r, 8);
  return q ? le64(q) : 0;
}
static int64_t rd_i64(reader *r) { return (int64_t)rd_u64(r); }
static double rd_f64(reader *r) {
  uint64_t u = rd_u64(r);
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

#define BAD(r, ...) bad_pack((r), __VA_ARGS__)

__attribute__((format(printf, 2, 3))) static kiln_status bad_pack(reader *r, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kiln__fail(r->pack->rt, KILN_ERR_PACK, "corrupt pack: %s%s%s", r->where,
                    r->where[0] ? ": " : "", msg);
}

static kiln_status truncated(reader *r) { return BAD(r, "metadata ends early (truncated record)"); }

/* A string reference; *out = NULL for KILN_PACK_NOSTR when allowed. */
static kiln_status rd_str(reader *r, const char **out, int optional, const char *what) {
  uint32_t off = rd_u32(r);
  if (r->bad) return truncated(r);
  if (off == KILN_PACK_NOSTR && optional) {
    *out = NULL;
    return KILN_OK;
  }
  if (off >= r->strtab_size)
    return BAD(r, "%s: string offset %u outside the string table (%llu bytes)", what, off,
               (unsigned long long)r->strtab_size);
  *out = r->strtab + off;
  return KILN_OK;
}

/* A count of records of at least min_size bytes each, at most limit. */
static kiln_status rd_count(reader *r, int *out, size_t min_size, uint32_t limit,
                            const char *what) {
  uint32_t n = rd_u32(r);
  if (r->bad) return truncated(r);
  if (n > limit) return BAD(r, "%u %s (at most %u)", n, what, limit);
  if ((uint64_t)n * min_size > (uint64_t)(r->end - r->p))
    return BAD(r, "%u %s do not fit in the remaining metadata", n, what);
  *out = (int)n;
  return KILN_OK;
}

static void *alloc_n(reader *r, size_t n, size_t size) {
  return arena_alloc(r->pack, n ? n * size : 1);
}

#define CHECK(x)                    \
  do {                              \
    kiln_status st_ = (x);          \
    if (st_ != KILN_OK) return st_; \
  } while (0)

static kiln_status nomem(reader *r) {
  return kiln__fail(r->pack->rt, KILN_ERR_NOMEM, "out of memory reading pack");
}

/* A literal (>= 0) or a dynamic dim reference -(d+1) with d < ndyn. */
static kiln_status rd_ref(reader *r, int64_t *out, int ndyn, const char *what) {
  int64_t v = rd_i64(r);
  if (r->bad) return truncated(r);
  if (v < 0 && -(v + 1) >= ndyn)
    return BAD(r, "%s refers to dynamic dim #%lld of %d", what, (long long)-(v + 1), ndyn);
  *out = v;
  return KILN_OK;
}

static kiln_status rd_product(reader *r, kiln__product *prod, int ndyn, const char *what) {
  unsigned n = rd_u8(r);
  if (r->bad) return truncated(r);
  if (n > KILN_PACK_MAX_FACTORS)
    return BAD(r, "%s has %u factors (at most %d)", what, n, KILN_PACK_MAX_FACTORS);
  prod->nfactor = (int)n;
  for (unsigned i = 0; i < n; i++) CHECK(rd_ref(r, &prod->factor[i], ndyn, what));
  return KILN_OK;
}

static kiln_status rd_tensor(reader *r, kiln_plan *plan, kiln__tensor *t) {
  t->uid = rd_i64(r);
  CHECK(rd_str(r, &t->name, 0, "tensor name"));
  unsigned dtype = rd_u8(r), role = rd_u8(r), ndim = rd_u8(r), zero = rd_u8(r);
  t->align = rd_u32(r);
  t->value = rd_f64(r);
  if (r->bad) return truncated(r);
  if (!kiln_dtype_name((kiln_dtype)dtype))
    return BAD(r, "tensor '%s': bad dtype %u", t->name, dtype);
  if (!kiln_role_name((kiln_role)role)) return BAD(r, "tensor '%s': bad role %u", t->name, role);
  if (ndim > KILN_MAX_DIMS)
    return BAD(r, "tensor '%s': %u dims (at most %d)", t->name, ndim, KILN_MAX_DIMS);
  if (zero) return BAD(r, "tensor '%s': reserved byte is %u", t->name, zero);
  if (t->align == 0 || (t->align & (t->align - 1)) || t->align > 4096)
    return BAD(r, "tensor '%s': alignment %u is not a power of two <= 4096", t->name, t->align);
  t->dtype = (kiln_dtype)dtype;
  t->role = (kiln_role)role;
  t->ndim = (int)ndim;
  for (int i = 0; i < t->ndim; i++) CHECK(rd_ref(r, &t->dim[i], plan->ndyn, "tensor dim"));
  for (int i = 0; i < t->ndim; i++) {
    CHECK(rd_str(r, &t->stride_text[i], 1, "stride text"));
    CHECK(rd_product(r, &t->stride[i], plan->ndyn, "tensor stride"));
  }
  return KILN_OK;
}

/* A grid axis or workspace rule: str text, i64 div, max, add, sm_mul, sm_div, product. */
static kiln_status rd_rule(reader *r, kiln_plan *plan, kiln__grid *g, int optional,
                           const char *what) {
  CHECK(rd_str(r, &g->text, optional, what));
  g->div = rd_i64(r);
  g->max = rd_i64(r);
  g->add = rd_i64(r);
  g->sm_mul = rd_i64(r);
  g->sm_div = rd_i64(r);
  if (r->bad) return truncated(r);
  if (g->div < 1 || g->max < 0 || g->add < 0 || g->sm_mul < 0 || g->sm_div < 1)
    return BAD(r, "%s has div %lld, max %lld, add %lld, sm_mul %lld, sm_div %lld", what,
               (long long)g->div, (long long)g->max, (long long)g->add, (long long)g->sm_mul,
               (long long)g->sm_div);
  return rd_product(r, &g->prod, plan->ndyn, what);
}

/* Is the product free of dynamic dims? */
static int product_is_literal(const kiln__product *p) {
  for (int i = 0; i < p->nfactor; i++)
    if (p->factor[i] < 0) return 0;
  return 1;
}

/* The tensor map after a KILN__PARAM_TMAP param of tensor t (layout in pack.h). */
static kiln_status rd_tmap(reader *r, const kiln__kernel *k, const kiln__tensor *t,
                           kiln__param *pa) {
  kiln__tmap *m = alloc_n(r, 1, sizeof *m);
  if (!m) return nomem(r);
  m->rank = (int)rd_u8(r);
  if (r->bad) return truncated(r);
  if (m->rank < 1 || m->rank > KILN_PACK_MAX_TMAP_RANK || m->rank > t->ndim)
    return BAD(r, "kernel '%s': tensor map of '%s' has rank %d (tensor rank %d)", k->symbol,
               t->name, m->rank, t->ndim);
  unsigned used = 0;
  for (int i = 0; i < m->rank; i++) {
    m->axis[i] = (int)rd_u8(r);
    m->box[i] = rd_u32(r);
    if (r->bad) return truncated(r);
    if (m->axis[i] >= t->ndim || (used >> m->axis[i] & 1u) || m->box[i] < 1 || m->box[i] > 256)
      return BAD(r, "kernel '%s': tensor map of '%s': dim %d is axis %d with box %u", k->symbol,
                 t->name, i, m->axis[i], m->box[i]);
    used |= 1u << m->axis[i];
  }
  m->swizzle = (int)rd_u8(r);
  if (r->bad) return truncated(r);
  size_t inner = (size_t)m->box[0] * kiln_dtype_size(t->dtype);
  if (m->swizzle > 3 || inner % 16 || (m->swizzle && inner > (16u << m->swizzle)))
    return BAD(r, "kernel '%s': tensor map of '%s': inner box of %zu bytes with swizzle mode %d",
               k->symbol, t->name, inner, m->swizzle);
  pa->tmap = m;
  return KILN_OK;
}

static kiln_status rd_kernel(reader *r, kiln_plan *plan, kiln__kernel *k) {
  CHECK(rd_str(r, &k->symbol, 0, "kernel symbol"));
  CHECK(rd_str(r, &k->engine, 0, "kernel engine"));
  CHECK(rd_str(r, &k->plan_id, 0, "kernel plan id"));
  for (int i = 0; i < 3; i++) k->block[i] = rd_u32(r);
  k->smem = rd_u32(r);
  for (int i = 0; i < 3; i++) k->cluster[i] = rd_u32(r);
  k->flags = rd_u32(r);
  if (r->bad) return truncated(r);
  if (k->flags & ~KILN_PACK_KERNEL_FLAGS)
    return BAD(r, "kernel '%s': unknown flags 0x%x", k->symbol, k->flags & ~KILN_PACK_KERNEL_FLAGS);
  uint64_t threads = (uint64_t)k->block[0] * k->block[1] * k->block[2];
  if (!k->block[0] || !k->block[1] || !k->block[2] || threads > 1024)
    return BAD(r, "kernel '%s': bad block [%u, %u, %u]", k->symbol, k->block[0], k->block[1],
               k->block[2]);
  if (!k->cluster[0] || !k->cluster[1] || !k->cluster[2] ||
      (uint64_t)k->cluster[0] * k->cluster[1] * k->cluster[2] > 64)
    return BAD(r, "kernel '%s': bad cluster [%u, %u, %u]", k->symbol, k->cluster[0], k->cluster[1],
               k->cluster[2]);
  for (int i = 0; i < 3; i++) {
    char what[320];
    snprintf(what, sizeof what, "kernel '%.200s': grid axis %d", k->symbol, i);
    CHECK(rd_rule(r, plan, &k->grid[i], 0, what));
  }
  /* A literal workspace size bounds the offsets of workspace params (its size on a device of
   * one SM: the smallest). */
  int64_t ws_size = -1;
  if (plan->workspace.text && product_is_literal(&plan->workspace.prod) &&
      kiln__workspace_rule_bytes(plan, NULL, 1, &ws_size) != 0)
    ws_size = -1;
  CHECK(rd_count(r, &k->nparams, 9, KILN_PACK_MAX_PARAMS, "kernel params"));
  if (!(k->params = alloc_n(r, (size_t)k->nparams, sizeof *k->params))) return nomem(r);
  int ntmaps = 0;
  for (int i = 0; i < k->nparams; i++) {
    kiln__param *pa = &k->params[i];
    pa->kind = (int)rd_u8(r);
    pa->arg = rd_i64(r);
    if (r->bad) return truncated(r);
    int ok;
    switch (pa->kind) {
    case KILN__PARAM_TENSOR:
    case KILN__PARAM_TMAP:
      ok = pa->arg >= 0 && pa->arg < plan->ntensors &&
           (plan->tensors[pa->arg].role == KILN_ROLE_INPUT ||
            plan->tensors[pa->arg].role == KILN_ROLE_OUTPUT ||
            plan->tensors[pa->arg].role == KILN_ROLE_SCRATCH);
      if (ok && pa->kind == KILN__PARAM_TMAP) {
        if (++ntmaps > KILN_PACK_MAX_TMAPS)
          return BAD(r, "kernel '%s': more than %d tensor-map params", k->symbol,
                     KILN_PACK_MAX_TMAPS);
        CHECK(rd_tmap(r, k, &plan->tensors[pa->arg], pa));
      }
      break;
    case KILN__PARAM_DIM: ok = pa->arg >= 0 && pa->arg < plan->ndyn; break;
    case KILN__PARAM_SCALAR:
      ok = pa->arg >= 0 && pa->arg < plan->ntensors &&
           plan->tensors[pa->arg].role == KILN_ROLE_SCALAR;
      break;
    case KILN__PARAM_I64:
    case KILN__PARAM_F32: ok = 1; break;
    case KILN__PARAM_SMS: ok = pa->arg == 0; break;
    case KILN__PARAM_WORKSPACE:
      ok = plan->workspace.text && pa->arg >= 0 && (ws_size < 0 || pa->arg < ws_size);
      break;
    default: ok = 0;
    }
    if (!ok)
      return BAD(r, "kernel '%s': parameter %d (kind %d, argument %lld) is invalid", k->symbol, i,
                 pa->kind, (long long)pa->arg);
  }
  CHECK(rd_count(r, &k->nimages, 20, KILN_PACK_MAX_IMAGES, "kernel images"));
  if (k->nimages == 0) return BAD(r, "kernel '%s' has no code image", k->symbol);
  if (!(k->images = alloc_n(r, (size_t)k->nimages, sizeof *k->images))) return nomem(r);
  for (int i = 0; i < k->nimages; i++) {
    kiln__image *im = &k->images[i];
    CHECK(rd_str(r, &im->arch, 0, "image arch"));
    im->offset = rd_u64(r);
    im->size = rd_u64(r);
    im->smem = rd_u32(r);
    for (int a = 0; a < 3; a++) im->cluster[a] = rd_u32(r);
    if (r->bad) return truncated(r);
    if (im->smem > k->smem)
      return BAD(r, "kernel '%s' %s: image smem %u above the kernel's %u", k->symbol, im->arch,
                 im->smem, k->smem);
    for (int a = 0; a < 3; a++)
      if (!im->cluster[a] || k->cluster[a] % im->cluster[a])
        return BAD(r, "kernel '%s' %s: image cluster [%u, %u, %u] does not divide the kernel's",
                   k->symbol, im->arch, im->cluster[0], im->cluster[1], im->cluster[2]);
    if (kiln__parse_arch(im->arch, &im->major, &im->minor, &im->suffix, &im->ptx) != 0)
      return BAD(r, "kernel '%s': bad arch '%s'", k->symbol, im->arch);
    for (int j = 0; j < i; j++)
      if (strcmp(k->images[j].arch, im->arch) == 0)
        return BAD(r, "kernel '%s': two images for %s", k->symbol, im->arch);
    if (im->size == 0 || im->offset > r->images_size || im->size > r->images_size - im->offset)
      return BAD(r, "kernel '%s' %s: image [%llu, +%llu) outside the image data (%llu bytes)",
                 k->symbol, im->arch, (unsigned long long)im->offset, (unsigned long long)im->size,
                 (unsigned long long)r->images_size);
    im->data = r->images + im->offset;
    if (im->ptx && im->data[im->size - 1] != '\0')
      return BAD(r, "kernel '%s' %s: PTX image is not NUL-terminated", k->symbol, im->arch);
  }
  return KILN_OK;
}

static kiln_status rd_plan(reader *r, int index, kiln_plan *plan) {
  snprintf(r->where, sizeof r->where, "plan %d", index);
  CHECK(rd_str(r, &plan->graph, 0, "graph name"));
  CHECK(rd_str(r, &plan->instance, 0, "instance key"));
  CHECK(rd_str(r, &plan->graph_json, 0, "graph JSON"));
  snprintf(r->where, sizeof r->where, "plan %d (%.64s%s%.64s%s)", index, plan->graph,
           plan->instance[0] ? " [" : "", plan->instance, plan->instance[0] ? "]" : "");
  CHECK(rd_count(r, &plan->nspec, 12, KILN_PACK_MAX_DYN, "specialized dims"));
  plan->spec_name = alloc_n(r, (size_t)plan->nspec, sizeof *plan->spec_name);
  plan->spec_value = alloc_n(r, (size_t)plan->nspec, sizeof *plan->spec_value);
  if (!plan->spec_name || !plan->spec_value) return nomem(r);
  for (int i = 0; i < plan->nspec; i++) {
    CHECK(rd_str(r, &plan->spec_name[i], 0, "specialized dim name"));
    plan->spec_value[i] = rd_i64(r);
  }
  CHECK(rd_count(r, &plan->ndyn, 4, KILN_PACK_MAX_DYN, "dynamic dims"));
  if (!(plan->dyn_name = alloc_n(r, (size_t)plan->ndyn, sizeof *plan->dyn_name))) return nomem(r);
  for (int i = 0; i < plan->ndyn; i++) {
    CHECK(rd_str(r, &plan->dyn_name[i], 0, "dynamic dim name"));
    for (int j = 0; j < i; j++)
      if (strcmp(plan->dyn_name[i], plan->dyn_name[j]) == 0)
        return BAD(r, "dynamic dim '%s' listed twice", plan->dyn_name[i]);
  }
  CHECK(rd_rule(r, plan, &plan->workspace, 1, "workspace rule"));
  if (!plan->workspace.text) {
    if (plan->workspace.div != 1 || plan->workspace.max != 0 || plan->workspace.add != 0 ||
        plan->workspace.sm_mul != 0 || plan->workspace.sm_div != 1 || plan->workspace.prod.nfactor)
      return BAD(r, "no workspace, but a workspace rule");
  } else {
    int64_t v;
    if (product_is_literal(&plan->workspace.prod) &&
        kiln__workspace_rule_bytes(plan, NULL, KILN_PACK_MAX_SMS, &v) != 0)
      return BAD(r, "workspace rule %s overflows", plan->workspace.text);
  }
  CHECK(rd_count(r, &plan->ntensors, 28, KILN_PACK_MAX_TENSORS, "tensors"));
  if (!(plan->tensors = alloc_n(r, (size_t)plan->ntensors, sizeof *plan->tensors))) return nomem(r);
  for (int i = 0; i < plan->ntensors; i++) {
    CHECK(rd_tensor(r, plan, &plan->tensors[i]));
    for (int j = 0; j < i; j++)
      if (plan->tensors[j].uid == plan->tensors[i].uid ||
          strcmp(plan->tensors[j].name, plan->tensors[i].name) == 0)
        return BAD(r, "tensors %d and %d share a uid or a name ('%s')", j, i,
                   plan->tensors[i].name);
    kiln__tensor *t = &plan->tensors[i];
    t->scratch = -1;
    if (t->role != KILN_ROLE_SCRATCH) continue;
    if (!plan->workspace.text)
      return BAD(r, "scratch tensor '%s', but the plan has no workspace", t->name);
    if (plan->nscratch == KILN_PACK_MAX_SCRATCH)
      return BAD(r, "more than %d scratch tensors", KILN_PACK_MAX_SCRATCH);
    t->scratch = plan->nscratch++;
  }
  CHECK(rd_count(r, &plan->nkernels, 60, KILN_PACK_MAX_KERNELS, "kernels"));
  if (!(plan->kernels = alloc_n(r, (size_t)plan->nkernels, sizeof *plan->kernels))) return nomem(r);
  for (int i = 0; i < plan->nkernels; i++) CHECK(rd_kernel(r, plan, &plan->kernels[i]));
  /* each scratch tensor's life: the first and the last kernel that take it */
  for (int i = 0; i < plan->ntensors; i++) plan->tensors[i].first_kernel = plan->tensors[i].last_kernel = -1;
  for (int k = 0; k < plan->nkernels; k++)
    for (int p = 0; p < plan->kernels[k].nparams; p++) {
      const kiln__param *pa = &plan->kernels[k].params[p];
      if (pa->kind != KILN__PARAM_TENSOR && pa->kind != KILN__PARAM_TMAP) continue;
      kiln__tensor *t = &plan->tensors[pa->arg];
      if (t->first_kernel < 0) t->first_kernel = k;
      t->last_kernel = k;
    }
  return KILN_OK;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* A section [off, off + size) of the file, after the header. */
static kiln_status section(reader *r, const unsigned char *h, int field, const char *what,
                           uint64_t *off, uint64_t *size) {
  *off = le64(h + field);
  *size = le64(h + field + 8);
  uint64_t total = r->pack->size;
  if (*off < KILN_PACK_HEADER_SIZE || *off > total || *size > total - *off)
    return BAD(r, "%s section [%llu, +%llu) lies outside the file (%llu bytes)", what,
               (unsigned long long)*off, (unsigned long long)*size, (unsigned long long)total);
  return KILN_OK;
}

kiln_status kiln__pack_parse(kiln_pack *p) {
  reader r = {.pack = p};
  const unsigned char *h = p->data;
  if (p->size < 8 || memcmp(h, KILN_PACK_MAGIC, 8) != 0)
    return kiln__fail(p->rt, KILN_ERR_PACK, "not a kiln pack (bad magic)");
  if (p->size < KILN_PACK_HEADER_SIZE)
    return BAD(&r, "file is %zu bytes, smaller than the %u-byte header (truncated)", p->size,
               KILN_PACK_HEADER_SIZE);
  p->version = le32(h + KILN_PACK_OFF_VERSION);
  if (p->version != KILN_PACK_VERSION)
    return kiln__fail(p->rt, KILN_ERR_PACK,
                      "pack format version %u; this runtime reads version %u (rebuild the "
                      "pack with a matching kiln)",
                      p->version, KILN_PACK_VERSION);
  uint64_t file_size = le64(h + KILN_PACK_OFF_FILE_SIZE);
  if (file_size != p->size)
    return BAD(&r, "header says %llu bytes but there are %zu (%s)", (unsigned long long)file_size,
               p->size, file_size > p->size ? "truncated" : "trailing bytes");
  if (le32(h + KILN_PACK_OFF_HEADER_SIZE) != KILN_PACK_HEADER_SIZE ||
      le32(h + KILN_PACK_OFF_ZERO) != 0 || le64(h + KILN_PACK_OFF_RESERVED) != 0)
    return BAD(&r, "bad header (header size or reserved fields)");
  p->checksum = le32(h + KILN_PACK_OFF_CHECKSUM);
  uint32_t sum = kiln__pack_checksum(p->data, p->size);
  if (sum != p->checksum)
    return BAD(&r, "checksum mismatch (stored CRC-32C %08x, computed %08x)", p->checksum, sum);

  uint32_t nplans = le32(h + KILN_PACK_OFF_NPLANS);
  uint32_t nimages = le32(h + KILN_PACK_OFF_NIMAGES);
  uint64_t meta_off, meta_size, str_off, str_size, data_off, data_size;
  CHECK(section(&r, h, KILN_PACK_OFF_META, "metadata", &meta_off, &meta_size));
  CHECK(section(&r, h, KILN_PACK_OFF_STRTAB, "string table", &str_off, &str_size));
  CHECK(section(&r, h, KILN_PACK_OFF_DATA, "image data", &data_off, &data_size));
  if (str_size == 0 || p->data[str_off + str_size - 1] != '\0')
    return BAD(&r, "string table does not end with NUL");
  r.strtab = (const char *)p->data + str_off;
  r.strtab_size = str_size;
  r.images = p->data + data_off;
  r.images_size = data_size;
  r.p = p->data + meta_off;
  r.end = r.p + meta_size;
  if (nplans > (uint64_t)meta_size / 24)
    return BAD(&r, "%u plans do not fit in %llu bytes of metadata", nplans,
               (unsigned long long)meta_size);

  if (!(p->plans = alloc_n(&r, nplans, sizeof *p->plans))) return nomem(&r);
  for (uint32_t i = 0; i < nplans; i++) {
    kiln_plan *plan = &p->plans[i];
    plan->pack = p;
    if (pthread_mutex_init(&plan->load_lock, NULL) != 0) return nomem(&r);
    atomic_init(&plan->slots, NULL);
    p->nplans = (int)i + 1;
    CHECK(rd_plan(&r, (int)i, plan));
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(p->plans[j].graph, plan->graph) == 0 &&
          strcmp(p->plans[j].instance, plan->instance) == 0)
        return BAD(&r, "same graph and instance as plan %u", j);
  }
  r.where[0] = '\0';
  if (r.p != r.end)
    return BAD(&r, "%zu bytes of metadata after the last plan", (size_t)(r.end - r.p));

  /* The header's image count is the number of distinct blobs the kernels refer to. */
  size_t total = 0;
  for (int i = 0; i < p->nplans; i++)
    for (int k = 0; k < p->plans[i].nkernels; k++) total += (size_t)p->plans[i].kernels[k].nimages;
  uint64_t *offs = malloc((total ? total : 1) * sizeof *offs);
  if (!offs) return nomem(&r);
  size_t n = 0, distinct = 0;
  for (int i = 0; i < p->nplans; i++)
    for (int k = 0; k < p->plans[i].nkernels; k++)
      for (int m = 0; m < p->plans[i].kernels[k].nimages; m++)
        offs[n++] = p->plans[i].kernels[k].images[m].offset;
  qsort(offs, n, sizeof *offs, cmp_u64);
  for (size_t i = 0; i < n; i++) distinct += i == 0 || offs[i] != offs[i - 1];
  free(offs);
  if (distinct != nimages)
    return BAD(&r, "header counts %u images, kernels refer to %zu", nimages, distinct);
  p->nimages = (int)nimages;
  return KILN_OK;
}

/* ---- opening and closing ------------------------------------------------------------- */

static kiln_status pack_register(kiln_rt *rt, kiln_pack *p, kiln_pack **out) {
  kiln_status st = kiln__pack_parse(p);
  if (st != KILN_OK) {
    kiln__pack_free_parsed(p);
    free(p->owned);
    free(p);
    return st;
  }
  pthread_mutex_lock(&rt->lock);
  p->next = rt->packs;
  if (rt->packs) rt->packs->prev = p;
  rt->packs = p;
  pthread_mutex_unlock(&rt->lock);
  *out = p;
  return KILN_OK;
}

kiln_status kiln_pack_open_memory(kiln_rt *rt, const void *data, size_t size, kiln_pack **out) {
  if (out) *out = NULL;
  if (!rt || !data || !out) return kiln__fail(rt, KILN_ERR_INVALID_ARG, "NULL argument");
  kiln_pack *p = calloc(1, sizeof *p);
  if (!p) return kiln__fail(rt, KILN_ERR_NOMEM, "out of memory");
  p->rt = rt;
  p->data = data;
  p->size = size;
  return pack_register(rt, p, out);
}

kiln_status kiln_pack_open(kiln_rt *rt, const char *path, kiln_pack **out) {
  if (out) *out = NULL;
  if (!rt || !path || !out) return kiln__fail(rt, KILN_ERR_INVALID_ARG, "NULL argument");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kiln__fail(rt, KILN_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return kiln__fail(rt, KILN_ERR_IO, "%s: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return kiln__fail(rt, KILN_ERR_IO, "%s: not a regular file", path);
  }
  if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX / 2) {
    close(fd);
    return kiln__fail(rt, KILN_ERR_IO, "%s: file too large", path);
  }
  size_t size = (size_t)sb.st_size;
  /* 64-byte aligned so that images at aligned offsets load without a copy. */
  unsigned char *buf = aligned_alloc(64, (size + 63) / 64 * 64 + 64);
  if (!buf) {
    close(fd);
    return kiln__fail(rt, KILN_ERR_NOMEM, "out of memory reading %s (%zu bytes)", path, size);
  }
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      close(fd);
      free(buf);
      return kiln__fail(rt, KILN_ERR_IO, "reading %s: %s", path,
                        n < 0 ? strerror(e) : "file shrank while being read");
    }
    got += (size_t)n;
  }
  close(fd);
  kiln_pack *p = calloc(1, sizeof *p);
  if (!p) {
    free(buf);
    return kiln__fail(rt, KILN_ERR_NOMEM, "out of memory");
  }
  p->rt = rt;
  p->owned = buf;
  p->data = buf;
  p->size = size;
  kiln_status st = pack_register(rt, p, out);
  if (st != KILN_OK) {
    /* prefix the path to the detail (the parser does not know it) */
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", kiln_rt_errmsg(rt));
    kiln__fail(rt, st, "%s: %s", path, detail);
  }
  return st;
}

kiln_status kiln_pack_close(kiln_pack *p) {
  if (!p) return KILN_OK;
  kiln_rt *rt = p->rt;
  pthread_mutex_lock(&rt->lock);
  if (p->prev)
    p->prev->next = p->next;
  else
    rt->packs = p->next;
  if (p->next) p->next->prev = p->prev;
  pthread_mutex_unlock(&rt->lock);
  for (int i = 0; i < p->nplans; i++) kiln__plan_unload(&p->plans[i]);
  kiln__pack_free_parsed(p);
  free(p->owned);
  free(p);
  return KILN_OK;
}

kiln_status kiln_pack_info_get(const kiln_pack *p, kiln_pack_info *info) {
  if (!p || !info) return kiln__fail(p ? p->rt : NULL, KILN_ERR_INVALID_ARG, "NULL argument");
  info->format_version = p->version;
  info->checksum = p->checksum;
  info->size = p->size;
  info->nplans = p->nplans;
  info->nimages = p->nimages;
  return KILN_OK;
}
