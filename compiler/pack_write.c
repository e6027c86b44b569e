/* kiln compiler: pack writer. Parses plan manifests (jansson), resolves names to indices,
 * and lays out the pack of runtime/pack.h: header, metadata, string table, images. The
 * output is byte-for-byte deterministic for the same plans added in the same order. */
#include "pack_write.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln.h"
#include "pack.h"

/* ---- growable byte buffers ----------------------------------------------------------- */

typedef struct buf {
  unsigned char *p;
  size_t len, cap;
  int oom;
} buf;

static void put(buf *b, const void *data, size_t n) {
  if (b->oom) return;
  if (b->cap - b->len < n) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n) cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, data, n);
  b->len += n;
}

static void put_u8(buf *b, unsigned v) {
  unsigned char c = (unsigned char)v;
  put(b, &c, 1);
}

static void put_u32(buf *b, uint32_t v) {
  unsigned char c[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  put(b, c, 4);
}

static void put_u64(buf *b, uint64_t v) {
  put_u32(b, (uint32_t)v);
  put_u32(b, (uint32_t)(v >> 32));
}

static void put_i64(buf *b, int64_t v) { put_u64(b, (uint64_t)v); }

static void put_f64(buf *b, double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  put_u64(b, u);
}

static void wr_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void wr_u64(unsigned char *p, uint64_t v) {
  wr_u32(p, (uint32_t)v);
  wr_u32(p + 4, (uint32_t)(v >> 32));
}

/* ---- the writer ---------------------------------------------------------------------- */

typedef struct str_entry {
  uint32_t off, len;
  uint64_t hash;
} str_entry;

typedef struct image_entry {
  uint64_t off, size;
} image_entry;

struct kiln_pack_writer {
  buf meta, strtab, data;
  str_entry *strs; /* interned strings, in string table order */
  size_t nstrs, cap_strs;
  uint32_t *table; /* open addressing over strs: index + 1, 0 = empty */
  size_t table_size;
  image_entry *images;
  size_t nimages, cap_images;
  uint32_t *plan_keys; /* (graph, instance) string offsets per plan */
  size_t nplans, cap_plans;
  int oom;
};

static uint64_t fnv1a(const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t h = 0xcbf29ce484222325ull;
  while (n--) h = (h ^ *p++) * 0x100000001b3ull;
  return h;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

static int table_rebuild(kiln_pack_writer *w, size_t size) {
  uint32_t *t = calloc(size, sizeof *t);
  if (!t) return -1;
  for (size_t i = 0; i < w->nstrs; i++) {
    size_t h = (size_t)w->strs[i].hash & (size - 1);
    while (t[h]) h = (h + 1) & (size - 1);
    t[h] = (uint32_t)i + 1;
  }
  free(w->table);
  w->table = t;
  w->table_size = size;
  return 0;
}

/* Offset of s in the string table, adding it once; KILN_PACK_NOSTR when out of memory. */
static uint32_t intern(kiln_pack_writer *w, const char *s) {
  size_t len = strlen(s);
  uint64_t hash = fnv1a(s, len);
  if (w->nstrs * 2 >= w->table_size &&
      table_rebuild(w, w->table_size ? w->table_size * 2 : 1024) != 0)
    goto oom;
  size_t h = (size_t)hash & (w->table_size - 1);
  for (; w->table[h]; h = (h + 1) & (w->table_size - 1)) {
    const str_entry *e = &w->strs[w->table[h] - 1];
    if (e->hash == hash && e->len == len && memcmp(w->strtab.p + e->off, s, len) == 0)
      return e->off;
  }
  if (w->strtab.len + len + 1 >= KILN_PACK_NOSTR ||
      grow((void **)&w->strs, &w->cap_strs, w->nstrs + 1, sizeof *w->strs) != 0)
    goto oom;
  str_entry e = {(uint32_t)w->strtab.len, (uint32_t)len, hash};
  put(&w->strtab, s, len + 1);
  if (w->strtab.oom) goto oom;
  w->strs[w->nstrs++] = e;
  w->table[h] = (uint32_t)w->nstrs;
  return e.off;
oom:
  w->oom = 1;
  return KILN_PACK_NOSTR;
}

kiln_pack_writer *kiln_pack_writer_new(void) {
  kiln_pack_writer *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  intern(w, ""); /* the string table is never empty and always ends with NUL */
  if (w->oom) {
    kiln_pack_writer_free(w);
    return NULL;
  }
  return w;
}

void kiln_pack_writer_free(kiln_pack_writer *w) {
  if (!w) return;
  free(w->meta.p);
  free(w->strtab.p);
  free(w->data.p);
  free(w->strs);
  free(w->table);
  free(w->images);
  free(w->plan_keys);
  free(w);
}

/* Everything add_plan may append, to undo a failed add. */
typedef struct checkpoint {
  size_t meta, strtab, data, nstrs, nimages, nplans;
} checkpoint;

static checkpoint save(const kiln_pack_writer *w) {
  return (checkpoint){w->meta.len, w->strtab.len, w->data.len, w->nstrs, w->nimages, w->nplans};
}

static void restore(kiln_pack_writer *w, checkpoint c) {
  w->meta.len = c.meta;
  w->strtab.len = c.strtab;
  w->data.len = c.data;
  w->nstrs = c.nstrs;
  w->nimages = c.nimages;
  w->nplans = c.nplans;
  w->meta.oom = w->strtab.oom = w->data.oom = w->oom = 0;
  if (table_rebuild(w, w->table_size) != 0) w->oom = 1; /* unusable from now on */
}

/* Stores an image once; its offset in the image data section. */
static int add_image(kiln_pack_writer *w, const void *data, size_t size, int ptx, uint64_t *off,
                     uint64_t *stored) {
  int add_nul = ptx && ((const unsigned char *)data)[size - 1] != '\0';
  size_t full = size + (size_t)add_nul;
  for (size_t i = 0; i < w->nimages; i++) {
    const image_entry *im = &w->images[i];
    if (im->size == full && memcmp(w->data.p + im->off, data, size) == 0 &&
        (!add_nul || w->data.p[im->off + size] == '\0')) {
      *off = im->off;
      *stored = im->size;
      return 0;
    }
  }
  if (grow((void **)&w->images, &w->cap_images, w->nimages + 1, sizeof *w->images) != 0) return -1;
  static const unsigned char zeros[KILN_PACK_IMAGE_ALIGN];
  put(&w->data, zeros,
      (KILN_PACK_IMAGE_ALIGN - w->data.len % KILN_PACK_IMAGE_ALIGN) % KILN_PACK_IMAGE_ALIGN);
  image_entry e = {w->data.len, full};
  put(&w->data, data, size);
  if (add_nul) put_u8(&w->data, 0);
  if (w->data.oom) return -1;
  w->images[w->nimages++] = e;
  *off = e.off;
  *stored = e.size;
  return 0;
}

/* ---- manifest -> metadata ------------------------------------------------------------- */

typedef struct manifest {
  kiln_pack_writer *w;
  kiln_err *e;
  const char *graph, *instance;
  int ndyn, nspec;
  const char *dyn[KILN_PACK_MAX_DYN];
  const char *spec_name[KILN_PACK_MAX_DYN];
  int64_t spec_value[KILN_PACK_MAX_DYN];
  char *instance_copy; /* spec_name points into it */
  json_t *tensors;
  int ntensors;
  int has_workspace;
  int64_t workspace_literal; /* rounded bytes when the rule uses no dynamic dim, else -1 */
} manifest;

__attribute__((format(printf, 3, 4))) static int fail(manifest *m, const char *code,
                                                      const char *fmt, ...) {
  char msg[3072];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (m->graph)
    return kiln_err_set(m->e, code, "plan manifest %s%s%s%s: %s", m->graph,
                        m->instance && m->instance[0] ? " [" : "", m->instance ? m->instance : "",
                        m->instance && m->instance[0] ? "]" : "", msg);
  return kiln_err_set(m->e, code, "plan manifest: %s", msg);
}

/* Products of literals and dynamic dims; literals are folded into one leading factor. */
typedef struct product {
  int64_t coef;
  int ndyn;
  int64_t dyn[KILN_PACK_MAX_FACTORS];
} product;

static int product_mul_ref(manifest *m, product *p, int64_t ref, const char *what) {
  if (ref >= 0) {
    if (__builtin_mul_overflow(p->coef, ref, &p->coef))
      return fail(m, "E_PACK", "%s: product overflows int64", what);
    return 0;
  }
  if (p->ndyn + 1 >= KILN_PACK_MAX_FACTORS)
    return fail(m, "E_PACK", "%s: more than %d dynamic factors", what, KILN_PACK_MAX_FACTORS - 1);
  p->dyn[p->ndyn++] = ref;
  return 0;
}

static void put_product(buf *b, const product *p) {
  int lead = p->coef != 1 || p->ndyn == 0;
  put_u8(b, (unsigned)(p->ndyn + lead));
  if (lead) put_i64(b, p->coef);
  for (int i = 0; i < p->ndyn; i++) put_i64(b, p->dyn[i]);
}

/* A dim name: dynamic -> -(d+1); specialized -> its value. */
static int resolve_name(manifest *m, const char *name, size_t len, int64_t *ref, const char *what) {
  for (int d = 0; d < m->ndyn; d++)
    if (strlen(m->dyn[d]) == len && memcmp(m->dyn[d], name, len) == 0) {
      *ref = -(int64_t)d - 1;
      return 0;
    }
  for (int i = 0; i < m->nspec; i++)
    if (strlen(m->spec_name[i]) == len && memcmp(m->spec_name[i], name, len) == 0) {
      *ref = m->spec_value[i];
      return 0;
    }
  return fail(m, "E_PACK", "%s: unknown dim '%.*s' (not dynamic, not specialized)", what, (int)len,
              name);
}

/* An integer >= 0 or a dim name. */
static int json_ref(manifest *m, json_t *v, int64_t *ref, const char *what) {
  if (json_is_integer(v)) {
    if (json_integer_value(v) < 0)
      return fail(m, "E_PACK", "%s: negative value %" JSON_INTEGER_FORMAT, what,
                  json_integer_value(v));
    *ref = json_integer_value(v);
    return 0;
  }
  if (json_is_string(v))
    return resolve_name(m, json_string_value(v), json_string_length(v), ref, what);
  return fail(m, "E_PACK", "%s: expected an integer or a dim name", what);
}

/* "T*64", "2 * T * S": a product of integers and dim names. */
static int parse_product_text(manifest *m, const char *s, product *p, const char *what) {
  p->coef = 1;
  p->ndyn = 0;
  for (;;) {
    while (*s == ' ') s++;
    const char *tok = s;
    while (*s && *s != '*' && *s != ' ') s++;
    size_t len = (size_t)(s - tok);
    while (*s == ' ') s++;
    if (len == 0) return fail(m, "E_PACK", "%s: bad product expression", what);
    int64_t ref;
    if (tok[0] >= '0' && tok[0] <= '9') {
      char *end;
      errno = 0;
      long long v = strtoll(tok, &end, 10);
      if (end != tok + len || errno)
        return fail(m, "E_PACK", "%s: bad integer '%.*s'", what, (int)len, tok);
      ref = v;
    } else if (resolve_name(m, tok, len, &ref, what) != 0) {
      return -1;
    }
    if (product_mul_ref(m, p, ref, what) != 0) return -1;
    if (!*s) return 0;
    if (*s != '*') return fail(m, "E_PACK", "%s: bad product expression", what);
    s++;
  }
}

static const char *get_string(manifest *m, json_t *obj, const char *key, const char *dflt,
                              const char *what) {
  json_t *v = json_object_get(obj, key);
  if (!v) {
    if (!dflt) fail(m, "E_PACK", "%s: missing \"%s\"", what, key);
    return dflt;
  }
  if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
    fail(m, "E_PACK", "%s: \"%s\" must be a string without NUL", what, key);
    return NULL;
  }
  return json_string_value(v);
}

static int get_int(manifest *m, json_t *obj, const char *key, int64_t dflt, int required,
                   int64_t lo, int64_t hi, int64_t *out, const char *what) {
  json_t *v = json_object_get(obj, key);
  if (!v) {
    if (required) return fail(m, "E_PACK", "%s: missing \"%s\"", what, key);
    *out = dflt;
    return 0;
  }
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    return fail(m, "E_PACK", "%s: \"%s\" must be an integer in [%" PRId64 ", %" PRId64 "]", what,
                key, lo, hi);
  *out = json_integer_value(v);
  return 0;
}

/* Specialized dims from the instance key "H=4096,W=8"; a key of another form is kept as
 * an opaque string (the plan is then found by exact key only). */
static int parse_instance(manifest *m) {
  m->nspec = 0;
  if (!m->instance[0]) return 0;
  if (!(m->instance_copy = strdup(m->instance))) return fail(m, "E_PACK", "out of memory");
  for (char *s = m->instance_copy; *s;) {
    char *name = s;
    while (*s == ' ') name = ++s;
    char *eq = strchr(s, '=');
    if (!eq || eq == name || m->nspec == KILN_PACK_MAX_DYN) goto opaque;
    *eq = '\0';
    for (char *t = eq - 1; t > name && *t == ' '; t--) *t = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (end == eq + 1 || errno || v < 0) goto opaque;
    while (*end == ' ') end++;
    if (*end && *end != ',') goto opaque;
    for (int i = 0; i < m->nspec; i++)
      if (strcmp(m->spec_name[i], name) == 0) goto opaque;
    m->spec_name[m->nspec] = name;
    m->spec_value[m->nspec++] = v;
    s = *end ? end + 1 : end;
  }
  return 0;
opaque:
  m->nspec = 0;
  return 0;
}

/* Index of the tensor with this uid in the manifest, or -1. */
static int tensor_index(manifest *m, json_int_t uid) {
  for (int i = 0; i < m->ntensors; i++)
    if (json_integer_value(json_object_get(json_array_get(m->tensors, (size_t)i), "uid")) == uid)
      return i;
  return -1;
}

static const char *const role_names[] = {"input", "output", "virtual", "constant", "scalar", "scratch"};

static int role_of(json_t *t) {
  const char *r = json_string_value(json_object_get(t, "role"));
  for (int i = 0; r && i < (int)(sizeof role_names / sizeof role_names[0]); i++)
    if (strcmp(r, role_names[i]) == 0) return i;
  return -1;
}

static int write_tensor(manifest *m, buf *b, int index) {
  json_t *t = json_array_get(m->tensors, (size_t)index);
  char what[256];
  snprintf(what, sizeof what, "tensor #%d", index);
  if (!json_is_object(t)) return fail(m, "E_PACK", "%s is not an object", what);
  int64_t uid;
  if (get_int(m, t, "uid", 0, 1, 1, INT64_MAX, &uid, what) != 0) return -1;
  const char *name = get_string(m, t, "name", NULL, what);
  if (!name) return -1;
  snprintf(what, sizeof what, "tensor '%.200s'", name);
  const char *dtype_name = get_string(m, t, "dtype", NULL, what);
  if (!dtype_name) return -1;
  kiln_dtype dtype = kiln_dtype_from_name(dtype_name);
  if (dtype == KILN_DTYPE_INVALID)
    return fail(m, "E_PACK", "%s: unknown dtype '%s'", what, dtype_name);
  int role = role_of(t);
  if (role < 0) return fail(m, "E_PACK", "%s: missing or unknown role", what);
  json_t *dims = json_object_get(t, "dims"), *strides = json_object_get(t, "strides");
  if (!json_is_array(dims) || json_array_size(dims) > KILN_MAX_DIMS)
    return fail(m, "E_PACK", "%s: \"dims\" must be an array of at most %d entries", what,
                KILN_MAX_DIMS);
  size_t ndim = json_array_size(dims);
  if (strides && (!json_is_array(strides) || json_array_size(strides) != ndim))
    return fail(m, "E_PACK", "%s: \"strides\" must be an array as long as \"dims\"", what);
  int64_t align;
  if (get_int(m, t, "align", (int64_t)kiln_dtype_size(dtype), 0, 1, 4096, &align, what) != 0)
    return -1;
  if (align & (align - 1))
    return fail(m, "E_PACK", "%s: align %" PRId64 " is not a power of two", what, align);
  if (align < (int64_t)kiln_dtype_size(dtype)) align = (int64_t)kiln_dtype_size(dtype);
  double value = 0;
  json_t *jv = json_object_get(t, "value");
  if (jv && json_is_number(jv))
    value = json_number_value(jv);
  else if (jv && json_is_boolean(jv))
    value = json_is_true(jv);
  for (int j = 0; j < index; j++) {
    json_t *o = json_array_get(m->tensors, (size_t)j);
    if (json_integer_value(json_object_get(o, "uid")) == uid)
      return fail(m, "E_PACK", "%s: uid %" PRId64 " used twice", what, uid);
    const char *on = json_string_value(json_object_get(o, "name"));
    if (on && strcmp(on, name) == 0) return fail(m, "E_PACK", "%s: name used twice", what);
  }
  uint32_t name_off = intern(m->w, name);
  put_i64(b, uid);
  put_u32(b, name_off);
  put_u8(b, (unsigned)dtype);
  put_u8(b, (unsigned)role);
  put_u8(b, (unsigned)ndim);
  put_u8(b, 0);
  put_u32(b, (uint32_t)align);
  put_f64(b, value);
  int64_t ref[KILN_MAX_DIMS];
  for (size_t j = 0; j < ndim; j++) {
    if (json_ref(m, json_array_get(dims, j), &ref[j], what) != 0) return -1;
    put_i64(b, ref[j]);
  }
  for (size_t j = 0; j < ndim; j++) {
    product p = {1, 0, {0}};
    json_t *s = strides ? json_array_get(strides, j) : NULL;
    char text[256];
    if (!s) { /* row-major from the dims */
      size_t len = 0;
      text[0] = '\0';
      for (size_t k = j + 1; k < ndim; k++) {
        if (product_mul_ref(m, &p, ref[k], what) != 0) return -1;
        if (ref[k] < 0 && len < sizeof text)
          len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", len ? "*" : "",
                                  m->dyn[-(ref[k] + 1)]);
      }
      if (p.coef != 1 && len < sizeof text)
        snprintf(text + len, sizeof text - len, "%s%" PRId64, len ? "*" : "", p.coef);
    } else if (json_is_integer(s)) {
      if (json_ref(m, s, &p.coef, what) != 0) return -1;
    } else if (json_is_string(s)) {
      if (parse_product_text(m, json_string_value(s), &p, what) != 0) return -1;
      snprintf(text, sizeof text, "%s", json_string_value(s));
    } else {
      return fail(m, "E_PACK", "%s: stride %zu must be an integer or a product string", what, j);
    }
    put_u32(b, p.ndyn ? intern(m->w, text) : KILN_PACK_NOSTR);
    put_product(b, &p);
  }
  return 0;
}

/* [x, y, z] from an array of 1..3 positive integers (missing ones are 1). */
static int dim3(manifest *m, json_t *k, const char *key, int64_t max, uint32_t out[3],
                const char *what) {
  json_t *a = json_object_get(k, key);
  out[0] = out[1] = out[2] = 1;
  if (!a && strcmp(key, "cluster") == 0) return 0;
  if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > 3)
    return fail(m, "E_PACK", "%s: \"%s\" must be an array of 1 to 3 integers", what, key);
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *v = json_array_get(a, i);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)
      return fail(m, "E_PACK", "%s: \"%s\"[%zu] must be an integer in [1, %" PRId64 "]", what, key,
                  i, max);
    out[i] = (uint32_t)json_integer_value(v);
  }
  return 0;
}

/* Appends the scratch tensors the workspace holds after the rule's bytes to its text
 * (" + scratch y, h"; "scratch y" alone when the rule is 0). */
static void scratch_text(manifest *m, char *text, size_t n) {
  size_t len = strlen(text);
  int first = 1;
  for (int i = 0; i < m->ntensors && len < n; i++) {
    json_t *t = json_array_get(m->tensors, (size_t)i);
    if (role_of(t) != KILN_ROLE_SCRATCH) continue;
    const char *name = json_string_value(json_object_get(t, "name"));
    if (first && strcmp(text, "0") == 0) len = 0;
    len += (size_t)snprintf(text + len, n - len, "%s%s", first ? (len ? " + scratch " : "scratch ") : ", ",
                            name ? name : "?");
    first = 0;
  }
}

/* A grid axis or the workspace rule (label "grid[0]", "workspace"): an integer or
 * {"mul": [factors], "div": D, "max": M, "add": A, "sm_mul": S, "sm_div": Q}; writes (str
 * text, i64 div, max, add, sm_mul, sm_div, product). When literal is given, it gets the
 * rule's value if it uses no dynamic dim (on a device of one SM: the smallest), else -1. */
static int write_rule(manifest *m, buf *b, json_t *g, const char *label, const char *what,
                      int64_t *literal) {
  char text[512];
  product p = {1, 0, {0}};
  int64_t div = 1, max = 0, add = 0, sm_mul = 0, sm_div = 1;
  if (json_is_integer(g)) {
    if (json_integer_value(g) < 0) return fail(m, "E_PACK", "%s: %s is negative", what, label);
    p.coef = json_integer_value(g);
    snprintf(text, sizeof text, "%" PRId64, p.coef);
  } else if (json_is_object(g)) {
    const char *key;
    json_t *v;
    json_object_foreach(g, key, v) {
      if (strcmp(key, "mul") && strcmp(key, "div") && strcmp(key, "max") && strcmp(key, "add") &&
          strcmp(key, "sm_mul") && strcmp(key, "sm_div"))
        return fail(m, "E_PACK", "%s: %s has unknown key \"%s\"", what, label, key);
    }
    json_t *mul = json_object_get(g, "mul");
    if (!json_is_array(mul)) return fail(m, "E_PACK", "%s: %s.mul must be an array", what, label);
    if (get_int(m, g, "div", 1, 0, 1, INT64_MAX, &div, what) != 0 ||
        get_int(m, g, "max", 0, 0, 0, INT64_MAX, &max, what) != 0 ||
        get_int(m, g, "add", 0, 0, 0, INT64_MAX, &add, what) != 0 ||
        get_int(m, g, "sm_mul", 0, 0, 0, INT64_MAX / KILN_PACK_MAX_SMS, &sm_mul, what) != 0 ||
        get_int(m, g, "sm_div", 1, 0, 1, INT64_MAX, &sm_div, what) != 0)
      return -1;
    size_t len = 0;
    char prod[384] = "1";
    for (size_t i = 0; i < json_array_size(mul); i++) {
      json_t *f = json_array_get(mul, i);
      int64_t ref;
      if (json_ref(m, f, &ref, what) != 0 || product_mul_ref(m, &p, ref, what) != 0) return -1;
      if (len < sizeof prod) {
        if (json_is_string(f))
          len += (size_t)snprintf(prod + len, sizeof prod - len, "%s%s", len ? "*" : "",
                                  json_string_value(f));
        else
          len += (size_t)snprintf(prod + len, sizeof prod - len, "%s%" PRId64, len ? "*" : "", ref);
      }
    }
    char rule[448];
    if (div > 1)
      snprintf(rule, sizeof rule, "ceil(%s/%" PRId64 ")", prod, div);
    else
      snprintf(rule, sizeof rule, "%s", prod);
    char sm[64] = "", lim[96] = "", capped[480];
    if (sm_mul > 0 && sm_div > 1)
      snprintf(sm, sizeof sm, "SMS*%" PRId64 "/%" PRId64, sm_mul, sm_div);
    else if (sm_mul > 1)
      snprintf(sm, sizeof sm, "SMS*%" PRId64, sm_mul);
    else if (sm_mul == 1)
      snprintf(sm, sizeof sm, "SMS");
    if (max > 0 && sm[0])
      snprintf(lim, sizeof lim, "%" PRId64 ", %s", max, sm);
    else if (max > 0)
      snprintf(lim, sizeof lim, "%" PRId64, max);
    else
      snprintf(lim, sizeof lim, "%s", sm);
    if (lim[0])
      snprintf(capped, sizeof capped, "min(%s, %s)", rule, lim);
    else
      snprintf(capped, sizeof capped, "%s", rule);
    if (add > 0)
      snprintf(text, sizeof text, "%s + %" PRId64, capped, add);
    else
      snprintf(text, sizeof text, "%s", capped);
  } else {
    return fail(m, "E_PACK", "%s: %s must be an integer or {mul, div, max}", what, label);
  }
  if (strcmp(label, "workspace") == 0) scratch_text(m, text, sizeof text);
  if (literal) {
    *literal = -1;
    if (p.ndyn == 0) {
      int64_t v = p.coef / div + (p.coef % div != 0);
      v = max > 0 && v > max ? max : v;
      const int64_t cap = sm_mul / sm_div > 1 ? sm_mul / sm_div : 1;
      v = sm_mul > 0 && v > cap ? cap : v;
      if (__builtin_add_overflow(v, add, literal)) return fail(m, "E_PACK", "%s: %s overflows", what, label);
    }
  }
  put_u32(b, intern(m->w, text));
  put_i64(b, div);
  put_i64(b, max);
  put_i64(b, add);
  put_i64(b, sm_mul);
  put_i64(b, sm_div);
  put_product(b, &p);
  return 0;
}

/* {"kind": "tmap", "uid": U, "dims": [{"axis": A, "box": B}, ...], "swizzle": S}: a tensor
 * map of a tensor in memory, map dim 0 innermost (the runtime checks strides per launch). */
static int write_tmap(manifest *m, buf *b, json_t *pa, int index, const char *what) {
  json_t *uid = json_object_get(pa, "uid"), *dims = json_object_get(pa, "dims");
  int t = json_is_integer(uid) ? tensor_index(m, json_integer_value(uid)) : -1;
  if (t < 0) return fail(m, "E_PACK", "%s: param %d: no tensor with that uid", what, index);
  json_t *tj = json_array_get(m->tensors, (size_t)t);
  int role = role_of(tj);
  if (role != KILN_ROLE_INPUT && role != KILN_ROLE_OUTPUT && role != KILN_ROLE_SCRATCH)
    return fail(m, "E_PACK", "%s: param %d: tensor map of a %s tensor", what, index,
                role_names[role]);
  size_t ndim = json_array_size(json_object_get(tj, "dims"));
  if (!json_is_array(dims) || json_array_size(dims) < 1 ||
      json_array_size(dims) > KILN_PACK_MAX_TMAP_RANK || json_array_size(dims) > ndim)
    return fail(m, "E_PACK", "%s: param %d: tensor map \"dims\" must list 1 to %d of the tensor's %zu axes",
                what, index, KILN_PACK_MAX_TMAP_RANK, ndim);
  int64_t swizzle;
  if (get_int(m, pa, "swizzle", 0, 0, 0, 3, &swizzle, what) != 0) return -1;
  put_u8(b, KILN__PARAM_TMAP);
  put_i64(b, t);
  put_u8(b, (uint8_t)json_array_size(dims));
  unsigned used = 0;
  for (size_t i = 0; i < json_array_size(dims); i++) {
    int64_t axis, box;
    json_t *d = json_array_get(dims, i);
    if (!json_is_object(d) || get_int(m, d, "axis", 0, 1, 0, (int64_t)ndim - 1, &axis, what) != 0 ||
        get_int(m, d, "box", 0, 1, 1, 256, &box, what) != 0)
      return json_is_object(d) ? -1 : fail(m, "E_PACK", "%s: param %d: tensor map dim %zu is not an object", what, index, i);
    if (used >> axis & 1u)
      return fail(m, "E_PACK", "%s: param %d: tensor map lists axis %" PRId64 " twice", what, index, axis);
    used |= 1u << axis;
    put_u8(b, (uint8_t)axis);
    put_u32(b, (uint32_t)box);
  }
  put_u8(b, (uint8_t)swizzle);
  return 0;
}

static int write_param(manifest *m, buf *b, json_t *pa, int index, const char *what) {
  const char *kind = json_string_value(json_object_get(pa, "kind"));
  if (!json_is_object(pa) || !kind)
    return fail(m, "E_PACK", "%s: param %d must be an object with a \"kind\"", what, index);
  if (strcmp(kind, "dim") == 0) {
    json_t *name = json_object_get(pa, "name");
    int64_t ref;
    if (!json_is_string(name))
      return fail(m, "E_PACK", "%s: param %d: dim needs a name", what, index);
    if (resolve_name(m, json_string_value(name), json_string_length(name), &ref, what) != 0)
      return -1;
    put_u8(b, ref < 0 ? KILN__PARAM_DIM : KILN__PARAM_I64);
    put_i64(b, ref < 0 ? -(ref + 1) : ref);
    return 0;
  }
  if (strcmp(kind, "workspace") == 0) {
    int64_t off;
    if (!m->has_workspace)
      return fail(m, "E_PACK", "%s: param %d is the workspace, but the plan has no \"workspace\"",
                  what, index);
    if (get_int(m, pa, "offset", 0, 0, 0, INT64_MAX, &off, what) != 0) return -1;
    if (m->workspace_literal >= 0 && off >= m->workspace_literal)
      return fail(m, "E_PACK",
                  "%s: param %d: workspace offset %" PRId64 " is outside the workspace (%" PRId64
                  " bytes)",
                  what, index, off, m->workspace_literal);
    put_u8(b, KILN__PARAM_WORKSPACE);
    put_i64(b, off);
    return 0;
  }
  if (strcmp(kind, "tmap") == 0) return write_tmap(m, b, pa, index, what);
  if (strcmp(kind, "sms") == 0) { /* the SM count the launch's rules used */
    put_u8(b, KILN__PARAM_SMS);
    put_i64(b, 0);
    return 0;
  }
  int tensor = strcmp(kind, "tensor") == 0;
  if (!tensor && strcmp(kind, "scalar") != 0)
    return fail(m, "E_PACK", "%s: param %d has unknown kind '%s'", what, index, kind);
  json_t *uid = json_object_get(pa, "uid");
  int t = json_is_integer(uid) ? tensor_index(m, json_integer_value(uid)) : -1;
  if (t < 0) return fail(m, "E_PACK", "%s: param %d: no tensor with that uid", what, index);
  json_t *tj = json_array_get(m->tensors, (size_t)t);
  int role = role_of(tj);
  if (tensor) {
    if (role != KILN_ROLE_INPUT && role != KILN_ROLE_OUTPUT && role != KILN_ROLE_SCRATCH)
      return fail(m, "E_PACK",
                  "%s: param %d: tensor uid %" JSON_INTEGER_FORMAT
                  " is %s, not in "
                  "memory",
                  what, index, json_integer_value(uid), role_names[role]);
    put_u8(b, KILN__PARAM_TENSOR);
    put_i64(b, t);
  } else if (role == KILN_ROLE_SCALAR) {
    put_u8(b, KILN__PARAM_SCALAR);
    put_i64(b, t);
  } else if (role == KILN_ROLE_CONSTANT) {
    json_t *v = json_object_get(tj, "value");
    double d = json_is_number(v) ? json_number_value(v) : json_is_true(v) ? 1.0 : 0.0;
    int64_t bits;
    memcpy(&bits, &d, sizeof bits);
    put_u8(b, KILN__PARAM_F32);
    put_i64(b, bits);
  } else {
    return fail(m, "E_PACK", "%s: param %d: scalar uid %" JSON_INTEGER_FORMAT " is %s", what, index,
                json_integer_value(uid), role_names[role]);
  }
  return 0;
}

static int write_kernel(manifest *m, buf *b, json_t *k, int index, const char *const *archs,
                        int narch, const kiln_blob *images) {
  char what[256];
  snprintf(what, sizeof what, "kernel #%d", index);
  if (!json_is_object(k)) return fail(m, "E_PACK", "%s is not an object", what);
  const char *symbol = get_string(m, k, "symbol", NULL, what);
  if (!symbol) return -1;
  snprintf(what, sizeof what, "kernel '%.200s'", symbol);
  const char *engine = get_string(m, k, "engine", "", what);
  const char *plan_id = get_string(m, k, "plan_id", "", what);
  if (!engine || !plan_id) return -1;
  uint32_t block[3], cluster[3];
  int64_t smem;
  if (dim3(m, k, "block", 1024, block, what) != 0 ||
      dim3(m, k, "cluster", 16, cluster, what) != 0 ||
      get_int(m, k, "smem", 0, 0, 0, UINT32_MAX, &smem, what) != 0)
    return -1;
  if ((uint64_t)block[0] * block[1] * block[2] > 1024)
    return fail(m, "E_PACK", "%s: block has more than 1024 threads", what);
  /* Per image: "by_arch" {arch: {"smem": bytes, "cluster": [x, y, z]}} overrides the kernel's;
   * the kernel keeps the largest smem and, per axis, the largest cluster (which all divide). */
  json_t *by_arch = json_object_get(k, "by_arch");
  if (by_arch && !json_is_object(by_arch))
    return fail(m, "E_PACK", "%s: \"by_arch\" must be an object", what);
  int64_t image_smem[KILN_PACK_MAX_IMAGES], max_smem = 0;
  uint32_t image_cluster[KILN_PACK_MAX_IMAGES][3];
  uint32_t max_cluster[3] = {1, 1, 1};
  for (int a = 0; a < narch; a++) {
    json_t *o = by_arch ? json_object_get(by_arch, archs[a]) : NULL;
    image_smem[a] = smem;
    memcpy(image_cluster[a], cluster, sizeof cluster);
    if (o && (!json_is_object(o) || get_int(m, o, "smem", smem, 0, 0, UINT32_MAX, &image_smem[a], what) != 0 ||
              (json_object_get(o, "cluster") && dim3(m, o, "cluster", 16, image_cluster[a], what) != 0)))
      return json_is_object(o) ? -1 : fail(m, "E_PACK", "%s: \"by_arch\" entry %s is not an object", what, archs[a]);
    if (!images[index * narch + a].data || !images[index * narch + a].size) continue;
    if (image_smem[a] > max_smem) max_smem = image_smem[a];
    for (int i = 0; i < 3; i++)
      if (image_cluster[a][i] > max_cluster[i]) max_cluster[i] = image_cluster[a][i];
  }
  for (int a = 0; a < narch; a++)
    for (int i = 0; i < 3; i++)
      if (images[index * narch + a].data && images[index * narch + a].size &&
          max_cluster[i] % image_cluster[a][i])
        return fail(m, "E_PACK", "%s: the %s image's cluster does not divide the others'", what,
                    archs[a]);
  put_u32(b, intern(m->w, symbol));
  put_u32(b, intern(m->w, engine));
  put_u32(b, intern(m->w, plan_id));
  for (int i = 0; i < 3; i++) put_u32(b, block[i]);
  put_u32(b, (uint32_t)max_smem);
  for (int i = 0; i < 3; i++) put_u32(b, max_cluster[i]);
  json_t *pdl = json_object_get(k, "pdl"), *pdl_entry = json_object_get(k, "pdl_entry");
  if (pdl && !json_is_boolean(pdl)) return fail(m, "E_PACK", "%s: \"pdl\" must be a boolean", what);
  if (pdl_entry && !json_is_boolean(pdl_entry))
    return fail(m, "E_PACK", "%s: \"pdl_entry\" must be a boolean", what);
  put_u32(b, (json_is_true(pdl) ? KILN_PACK_KERNEL_PDL : 0u) | (json_is_true(pdl_entry) ? KILN_PACK_KERNEL_PDL_ENTRY : 0u));
  json_t *grid = json_object_get(k, "grid");
  if (!json_is_array(grid) || json_array_size(grid) < 1 || json_array_size(grid) > 3)
    return fail(m, "E_PACK", "%s: \"grid\" must be an array of 1 to 3 entries", what);
  json_t *one = json_integer(1);
  for (int a = 0; a < 3; a++) {
    json_t *g = (size_t)a < json_array_size(grid) ? json_array_get(grid, (size_t)a) : one;
    char label[16];
    snprintf(label, sizeof label, "grid[%d]", a);
    if (write_rule(m, b, g, label, what, NULL) != 0) {
      json_decref(one);
      return -1;
    }
  }
  json_decref(one);
  json_t *params = json_object_get(k, "params");
  if (!json_is_array(params) || json_array_size(params) > KILN_PACK_MAX_PARAMS)
    return fail(m, "E_PACK", "%s: \"params\" must be an array of at most %d", what,
                KILN_PACK_MAX_PARAMS);
  put_u32(b, (uint32_t)json_array_size(params));
  for (size_t i = 0; i < json_array_size(params); i++)
    if (write_param(m, b, json_array_get(params, i), (int)i, what) != 0) return -1;
  int n = 0;
  for (int a = 0; a < narch; a++)
    n += images[index * narch + a].data && images[index * narch + a].size;
  if (n == 0) return fail(m, "E_PACK", "%s: no code image for any arch", what);
  put_u32(b, (uint32_t)n);
  for (int a = 0; a < narch; a++) {
    const kiln_blob *im = &images[index * narch + a];
    if (!im->data || !im->size) continue;
    int major, minor, ptx;
    char suffix;
    kiln__parse_arch(archs[a], &major, &minor, &suffix, &ptx); /* checked by the caller */
    uint64_t off, size;
    if (add_image(m->w, im->data, im->size, ptx, &off, &size) != 0)
      return fail(m, "E_PACK", "out of memory");
    put_u32(b, intern(m->w, archs[a]));
    put_u64(b, off);
    put_u64(b, size);
    put_u32(b, (uint32_t)image_smem[a]);
    for (int i = 0; i < 3; i++) put_u32(b, image_cluster[a][i]);
  }
  return 0;
}

static int add_plan_json(manifest *m, json_t *root, const char *const *archs, int narch,
                         const kiln_blob *images) {
  kiln_pack_writer *w = m->w;
  if (!json_is_object(root)) return fail(m, "E_JSON", "not a JSON object");
  const char *schema = json_string_value(json_object_get(root, "schema"));
  json_t *version = json_object_get(root, "version");
  if (!schema || strcmp(schema, "kiln.plan") != 0 || !json_is_integer(version) ||
      json_integer_value(version) != 1)
    return fail(m, "E_JSON_VERSION", "expected schema \"kiln.plan\" version 1, got \"%s\" %s",
                schema ? schema : "(none)", json_is_integer(version) ? "" : "(no version)");
  if (!(m->graph = get_string(m, root, "graph", NULL, "plan"))) return -1;
  if (!m->graph[0]) return fail(m, "E_PACK", "empty graph name");
  if (!(m->instance = get_string(m, root, "instance", "", "plan"))) return -1;
  if (parse_instance(m) != 0) return -1;
  json_t *dyn = json_object_get(root, "dynamic");
  if (dyn && (!json_is_array(dyn) || json_array_size(dyn) > KILN_PACK_MAX_DYN))
    return fail(m, "E_PACK", "\"dynamic\" must be an array of at most %d names", KILN_PACK_MAX_DYN);
  m->ndyn = dyn ? (int)json_array_size(dyn) : 0;
  for (int d = 0; d < m->ndyn; d++) {
    json_t *v = json_array_get(dyn, (size_t)d);
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        strlen(json_string_value(v)) != json_string_length(v))
      return fail(m, "E_PACK", "dynamic dim %d must be a non-empty string", d);
    m->dyn[d] = json_string_value(v);
    for (int j = 0; j < d; j++)
      if (strcmp(m->dyn[j], m->dyn[d]) == 0)
        return fail(m, "E_PACK", "dynamic dim '%s' listed twice", m->dyn[d]);
    for (int i = 0; i < m->nspec; i++)
      if (strcmp(m->spec_name[i], m->dyn[d]) == 0)
        return fail(m, "E_PACK", "dim '%s' is both dynamic and specialized", m->dyn[d]);
  }
  m->tensors = json_object_get(root, "tensors");
  json_t *kernels = json_object_get(root, "kernels");
  if (!json_is_array(m->tensors) || json_array_size(m->tensors) > KILN_PACK_MAX_TENSORS)
    return fail(m, "E_PACK", "\"tensors\" must be an array of at most %d", KILN_PACK_MAX_TENSORS);
  if (!json_is_array(kernels) || json_array_size(kernels) > KILN_PACK_MAX_KERNELS)
    return fail(m, "E_PACK", "\"kernels\" must be an array of at most %d", KILN_PACK_MAX_KERNELS);
  m->ntensors = (int)json_array_size(m->tensors);

  json_t *gj = json_object_get(root, "graph_json");
  char *gj_text = NULL;
  if (gj && !json_is_string(gj)) gj_text = json_dumps(gj, JSON_COMPACT);
  const char *graph_json = gj_text ? gj_text : gj ? json_string_value(gj) : "";

  uint32_t graph_off = intern(w, m->graph), inst_off = intern(w, m->instance);
  for (size_t i = 0; i < w->nplans; i++)
    if (w->plan_keys[2 * i] == graph_off && w->plan_keys[2 * i + 1] == inst_off) {
      free(gj_text);
      return fail(m, "E_PACK", "a plan for this graph and instance is already in the pack");
    }
  buf *b = &w->meta;
  put_u32(b, graph_off);
  put_u32(b, inst_off);
  put_u32(b, intern(w, graph_json));
  free(gj_text);
  put_u32(b, (uint32_t)m->nspec);
  for (int i = 0; i < m->nspec; i++) {
    put_u32(b, intern(w, m->spec_name[i]));
    put_i64(b, m->spec_value[i]);
  }
  put_u32(b, (uint32_t)m->ndyn);
  for (int d = 0; d < m->ndyn; d++) put_u32(b, intern(w, m->dyn[d]));
  json_t *ws = json_object_get(root, "workspace");
  m->has_workspace = ws && !json_is_null(ws);
  for (int i = 0; i < m->ntensors && !m->has_workspace; i++)
    if (role_of(json_array_get(m->tensors, (size_t)i)) == KILN_ROLE_SCRATCH)
      return fail(m, "E_PACK", "scratch tensors need a \"workspace\" (0 when the kernels need none)");
  m->workspace_literal = -1;
  if (m->has_workspace) {
    int64_t lit;
    if (write_rule(m, b, ws, "workspace", "plan", &lit) != 0) return -1;
    const int64_t a = KILN_PACK_WORKSPACE_ALIGN;
    if (lit > INT64_MAX - (a - 1)) return fail(m, "E_PACK", "workspace size overflows");
    if (lit >= 0) m->workspace_literal = (lit + a - 1) / a * a;
  } else {
    put_u32(b, KILN_PACK_NOSTR); /* no workspace: div 1, max 0, add 0, no SM cap, no factors */
    put_i64(b, 1);
    put_i64(b, 0);
    put_i64(b, 0);
    put_i64(b, 0);
    put_i64(b, 1);
    put_u8(b, 0);
  }
  put_u32(b, (uint32_t)m->ntensors);
  for (int i = 0; i < m->ntensors; i++)
    if (write_tensor(m, b, i) != 0) return -1;
  put_u32(b, (uint32_t)json_array_size(kernels));
  for (size_t k = 0; k < json_array_size(kernels); k++)
    if (write_kernel(m, b, json_array_get(kernels, k), (int)k, archs, narch, images) != 0)
      return -1;
  if (grow((void **)&w->plan_keys, &w->cap_plans, 2 * (w->nplans + 1), sizeof *w->plan_keys) != 0)
    return fail(m, "E_PACK", "out of memory");
  w->plan_keys[2 * w->nplans] = graph_off;
  w->plan_keys[2 * w->nplans + 1] = inst_off;
  w->nplans++;
  if (w->oom || w->meta.oom || w->strtab.oom || w->data.oom)
    return fail(m, "E_PACK", "out of memory");
  return 0;
}

int kiln_pack_writer_add_plan(kiln_pack_writer *w, const char *manifest_json,
                              const char *const *archs, int narch, const kiln_blob *images,
                              kiln_err *e) {
  if (!w || !manifest_json || narch < 0 || narch > KILN_PACK_MAX_IMAGES ||
      (narch && (!archs || !images)))
    return kiln_err_set(e, "E_PACK", "kiln_pack_writer_add_plan: bad arguments");
  if (w->oom) return kiln_err_set(e, "E_PACK", "pack writer is out of memory");
  for (int a = 0; a < narch; a++) {
    int major, minor, ptx;
    char suffix;
    if (!archs[a] || kiln__parse_arch(archs[a], &major, &minor, &suffix, &ptx) != 0)
      return kiln_err_set(e, "E_PACK", "bad arch '%s' (want sm_NN[a|f] or compute_NN[a|f])",
                          archs[a] ? archs[a] : "(null)");
    for (int b = 0; b < a; b++)
      if (strcmp(archs[a], archs[b]) == 0)
        return kiln_err_set(e, "E_PACK", "arch '%s' listed twice", archs[a]);
  }
  json_error_t jerr;
  json_t *root = json_loads(manifest_json, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return kiln_err_set(e, "E_JSON", "plan manifest: line %d column %d: %s", jerr.line, jerr.column,
                        jerr.text);
  manifest m = {.w = w, .e = e};
  checkpoint cp = save(w);
  int rc = add_plan_json(&m, root, archs, narch, images);
  free(m.instance_copy);
  json_decref(root);
  if (rc != 0) restore(w, cp);
  return rc;
}

/* ---- output -------------------------------------------------------------------------- */

int kiln_pack_writer_to_memory(kiln_pack_writer *w, void **data, size_t *size, kiln_err *e) {
  if (!w || !data || !size)
    return kiln_err_set(e, "E_PACK", "kiln_pack_writer_to_memory: bad arguments");
  if (w->oom || w->meta.oom || w->strtab.oom || w->data.oom)
    return kiln_err_set(e, "E_PACK", "pack writer is out of memory");
  uint64_t meta_off = KILN_PACK_HEADER_SIZE;
  uint64_t str_off = meta_off + w->meta.len;
  uint64_t data_off = (str_off + w->strtab.len + KILN_PACK_IMAGE_ALIGN - 1) /
                      KILN_PACK_IMAGE_ALIGN * KILN_PACK_IMAGE_ALIGN;
  uint64_t total = data_off + w->data.len;
  unsigned char *p = calloc(1, (size_t)total);
  if (!p) return kiln_err_set(e, "E_PACK", "out of memory (%" PRIu64 " bytes)", total);
  memcpy(p, KILN_PACK_MAGIC, 8);
  wr_u32(p + KILN_PACK_OFF_VERSION, KILN_PACK_VERSION);
  wr_u32(p + KILN_PACK_OFF_HEADER_SIZE, KILN_PACK_HEADER_SIZE);
  wr_u64(p + KILN_PACK_OFF_FILE_SIZE, total);
  wr_u32(p + KILN_PACK_OFF_NPLANS, (uint32_t)w->nplans);
  wr_u32(p + KILN_PACK_OFF_NIMAGES, (uint32_t)w->nimages);
  wr_u64(p + KILN_PACK_OFF_META, meta_off);
  wr_u64(p + KILN_PACK_OFF_META + 8, w->meta.len);
  wr_u64(p + KILN_PACK_OFF_STRTAB, str_off);
  wr_u64(p + KILN_PACK_OFF_STRTAB + 8, w->strtab.len);
  wr_u64(p + KILN_PACK_OFF_DATA, data_off);
  wr_u64(p + KILN_PACK_OFF_DATA + 8, w->data.len);
  if (w->meta.len) memcpy(p + meta_off, w->meta.p, w->meta.len);
  memcpy(p + str_off, w->strtab.p, w->strtab.len);
  if (w->data.len) memcpy(p + data_off, w->data.p, w->data.len);
  wr_u32(p + KILN_PACK_OFF_CHECKSUM, kiln__pack_checksum(p, (size_t)total));
  *data = p;
  *size = (size_t)total;
  return 0;
}

int kiln_pack_writer_write(kiln_pack_writer *w, const char *path, kiln_err *e) {
  void *data;
  size_t size;
  if (!path) return kiln_err_set(e, "E_IO", "no output path");
  if (kiln_pack_writer_to_memory(w, &data, &size, e) != 0) return -1;
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 16);
  if (!tmp) {
    free(data);
    return kiln_err_set(e, "E_IO", "out of memory");
  }
  snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    int err = errno;
    free(tmp);
    free(data);
    return kiln_err_set(e, "E_IO", "creating a temporary file next to %s: %s", path, strerror(err));
  }
  const char *step = "writing";
  size_t done = 0;
  int err = 0;
  while (done < size) {
    ssize_t n = write(fd, (const char *)data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += (size_t)n;
  }
  free(data);
  if (!err && fchmod(fd, 0644) != 0) err = errno, step = "chmod";
  if (!err && fsync(fd) != 0) err = errno, step = "fsync";
  if (close(fd) != 0 && !err) err = errno, step = "closing";
  if (!err && rename(tmp, path) != 0) err = errno, step = "renaming to";
  if (err) {
    unlink(tmp);
    free(tmp);
    return kiln_err_set(e, "E_IO", "%s %s: %s", step, path, strerror(err));
  }
  free(tmp);
  /* make the rename durable */
  char *dir = strdup(path);
  if (dir) {
    char *slash = strrchr(dir, '/');
    const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
    int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
    free(dir);
  }
  return 0;
}
