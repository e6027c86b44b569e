/* kiln reference executor: graph JSON parsing and validation, buffer binding, the evaluation
 * driver, and the helpers the op family files share. */
#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "numeric.h"
#include "ref_impl.h"

typedef struct {
  json_t *root;
  ref_tensor *t;
  size_t nt;
  ref_tensor **by_uid; /* sorted by uid */
  ref_node *n;
  const ref_op **ops;
  size_t nn;
} ref_graph;

static const ref_op *(*const FAMILIES[])(const char *) = {
    kiln__ref_pointwise_op, kiln__ref_reduce_op, kiln__ref_norm_op,
    kiln__ref_softmax_op,   kiln__ref_matmul_op, kiln__ref_quant_op,
    kiln__ref_conv_op,      kiln__ref_attention_op, kiln__ref_gdn_op,
};

/* Keys that a front end may leave among attrs without changing the math. */
static const char *const NEUTRAL_ATTRS[] = {"name", "compute_data_type", "compute_dtype", NULL};

static const ref_op *find_op(const char *name) {
  for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++) {
    const ref_op *op = FAMILIES[i](name);
    if (op) return op;
  }
  return NULL;
}

/* ---------------------------------------------------------------- shared helpers */

int kiln__ref_port_match(const char *alts, const char *port) {
  size_t len = strlen(port);
  for (const char *p = alts; *p;) {
    const char *bar = strchr(p, '|');
    size_t n = bar ? (size_t)(bar - p) : strlen(p);
    if (n == len && strncmp(p, port, n) == 0) return 1;
    if (!bar) break;
    p = bar + 1;
  }
  return 0;
}

static int in_list(const char *const *list, const char *name) {
  for (; list && *list; list++)
    if (kiln__ref_port_match(*list, name)) return 1;
  return 0;
}

static ref_tensor *find_port(const ref_port *ports, int n, const char *alts) {
  for (int i = 0; i < n; i++)
    if (kiln__ref_port_match(alts, ports[i].port)) return ports[i].t;
  return NULL;
}

static const char *first_alt(const char *alts, char *buf, size_t len) {
  const char *bar = strchr(alts, '|');
  size_t n = bar ? (size_t)(bar - alts) : strlen(alts);
  if (n >= len) n = len - 1;
  memcpy(buf, alts, n);
  buf[n] = '\0';
  return buf;
}

ref_tensor *kiln__ref_in(const ref_node *n, const char *alts) {
  return find_port(n->in, n->nin, alts);
}

ref_tensor *kiln__ref_out(const ref_node *n, const char *alts) {
  return find_port(n->out, n->nout, alts);
}

int kiln__ref_need_in(const ref_node *n, const char *alts, ref_tensor **t, kiln_err *e) {
  char buf[64];
  if (!(*t = kiln__ref_in(n, alts)))
    return kiln_err_set(e, "E_PORT", "%s needs input port %s", n->op,
                        first_alt(alts, buf, sizeof buf));
  return 0;
}

int kiln__ref_need_out(const ref_node *n, const char *alts, ref_tensor **t, kiln_err *e) {
  char buf[64];
  if (!(*t = kiln__ref_out(n, alts)))
    return kiln_err_set(e, "E_PORT", "%s needs output port %s", n->op,
                        first_alt(alts, buf, sizeof buf));
  return 0;
}

static json_t *attr_get(const ref_node *n, const char *name) {
  json_t *v = json_object_get(n->attrs, name);
  return json_is_null(v) ? NULL : v;
}

int kiln__ref_attr_has(const ref_node *n, const char *name) { return attr_get(n, name) != NULL; }

int kiln__ref_unsupported(const ref_node *n, const char *what, kiln_err *e) {
  return kiln_err_set(e, "E_UNKNOWN_OP", "reference executor has no %s with %s", n->op, what);
}

int kiln__ref_reject_ports(const ref_node *n, const char *const *ports, kiln_err *e) {
  char what[96];
  for (; *ports; ports++)
    if (kiln__ref_in(n, *ports) || kiln__ref_out(n, *ports)) {
      snprintf(what, sizeof what, "port %s", *ports);
      return kiln__ref_unsupported(n, what, e);
    }
  return 0;
}

/* A JSON number, boolean, or one of the strings inf/-inf/nan. */
static int json_to_double(const json_t *j, double *v) {
  if (json_is_number(j)) *v = json_number_value(j);
  else if (json_is_boolean(j)) *v = json_is_true(j);
  else if (json_is_string(j)) {
    const char *s = json_string_value(j);
    if (strcasecmp(s, "inf") == 0 || strcasecmp(s, "+inf") == 0) *v = INFINITY;
    else if (strcasecmp(s, "-inf") == 0) *v = -INFINITY;
    else if (strcasecmp(s, "nan") == 0) *v = NAN;
    else return -1;
  } else return -1;
  return 0;
}

int kiln__ref_attr_num(const ref_node *n, const char *name, double def, double *v, kiln_err *e) {
  json_t *j = attr_get(n, name);
  *v = def;
  if (j && (json_is_boolean(j) || json_to_double(j, v) != 0))
    return kiln_err_set(e, "E_ATTR", "%s: attribute %s must be a number", n->op, name);
  return 0;
}

int kiln__ref_attr_int(const ref_node *n, const char *name, int64_t def, int64_t *v,
                       kiln_err *e) {
  json_t *j = attr_get(n, name);
  *v = def;
  if (!j) return 0;
  if (json_is_integer(j)) *v = json_integer_value(j);
  else if (json_is_real(j) && json_real_value(j) == floor(json_real_value(j)) &&
           fabs(json_real_value(j)) < 0x1p62)
    *v = (int64_t)json_real_value(j);
  else return kiln_err_set(e, "E_ATTR", "%s: attribute %s must be an integer", n->op, name);
  return 0;
}

int kiln__ref_attr_bool(const ref_node *n, const char *name, int def, int *v, kiln_err *e) {
  json_t *j = attr_get(n, name);
  *v = def;
  if (!j) return 0;
  if (json_is_boolean(j)) *v = json_is_true(j);
  else if (json_is_integer(j) && (json_integer_value(j) == 0 || json_integer_value(j) == 1))
    *v = (int)json_integer_value(j);
  else return kiln_err_set(e, "E_ATTR", "%s: attribute %s must be a boolean", n->op, name);
  return 0;
}

int kiln__ref_attr_str(const ref_node *n, const char *name, const char *def, const char **v,
                       kiln_err *e) {
  json_t *j = attr_get(n, name);
  *v = def;
  if (!j) return 0;
  if (!json_is_string(j))
    return kiln_err_set(e, "E_ATTR", "%s: attribute %s must be a string", n->op, name);
  *v = json_string_value(j);
  return 0;
}

const char *kiln__ref_dims_str(int rank, const int64_t *dims, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = '\0';
  k += (size_t)snprintf(buf + k, len - k, "[");
  for (int i = 0; i < rank && k < len; i++)
    k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (k < len) snprintf(buf + k, len - k, "]");
  return buf;
}

int kiln__ref_scalar(const ref_tensor *t, double *v, kiln_err *e) {
  if (t->numel != 1)
    return kiln_err_set(e, "E_SHAPE", "tensor '%s' must hold one value, has %zu", t->name,
                        t->numel);
  *v = t->data[0];
  return 0;
}

int kiln__ref_check_dims(const ref_tensor *t, int rank, const int64_t *dims, const char *what,
                         kiln_err *e) {
  int ok = t->rank == rank;
  for (int i = 0; ok && i < rank; i++) ok = t->dims[i] == dims[i];
  if (ok) return 0;
  char a[160], b[160];
  return kiln_err_set(e, "E_SHAPE", "%s '%s' has dims %s, expected %s", what, t->name,
                      kiln__ref_dims_str(t->rank, t->dims, a, sizeof a),
                      kiln__ref_dims_str(rank, dims, b, sizeof b));
}

int kiln__ref_tail_dims(const ref_tensor *t, int n, int64_t *dims, const char *what,
                        kiln_err *e) {
  char a[160];
  if (t->rank < n)
    return kiln_err_set(e, "E_SHAPE", "%s '%s' has rank %d, expected %d", what, t->name,
                        t->rank, n);
  for (int i = 0; i < t->rank - n; i++)
    if (t->dims[i] != 1)
      return kiln_err_set(e, "E_SHAPE", "%s '%s' has dims %s, expected rank %d", what, t->name,
                          kiln__ref_dims_str(t->rank, t->dims, a, sizeof a), n);
  memcpy(dims, t->dims + (t->rank - n), (size_t)n * sizeof *dims);
  return 0;
}

double *kiln__ref_alloc(size_t n, kiln_err *e) {
  double *p = calloc(n ? n : 1, sizeof *p);
  if (!p) kiln_err_set(e, "E_LIMIT", "out of memory allocating %zu values", n);
  return p;
}

void kiln__ref_iter_init(ref_iter *it, int rank, const int64_t *dims) {
  memset(it, 0, sizeof *it);
  it->rank = rank;
  memcpy(it->dims, dims, (size_t)rank * sizeof *dims);
}

int kiln__ref_iter_add(ref_iter *it, int trank, const int64_t *tdims, const char *what,
                       kiln_err *e) {
  char a[160], b[160];
  if (it->nt >= KILN_REF_ITER_MAX)
    return kiln_err_set(e, "E_LIMIT", "too many broadcast operands");
  int k = it->nt;
  for (int i = 0; i < trank - it->rank; i++)
    if (tdims[i] != 1) goto bad;
  int64_t s = 1;
  for (int d = it->rank - 1; d >= 0; d--) {
    int td = d - (it->rank - trank);
    int64_t ext = td >= 0 ? tdims[td] : 1;
    if (ext == it->dims[d]) it->stride[k][d] = ext == 1 ? 0 : s;
    else if (ext == 1) it->stride[k][d] = 0;
    else goto bad;
    s *= ext;
  }
  it->off[k] = 0;
  it->nt++;
  return k;
bad:
  kiln_err_set(e, "E_SHAPE", "%s dims %s do not broadcast to %s", what,
               kiln__ref_dims_str(trank, tdims, a, sizeof a),
               kiln__ref_dims_str(it->rank, it->dims, b, sizeof b));
  return -1;
}

void kiln__ref_iter_next(ref_iter *it) {
  for (int d = it->rank - 1; d >= 0; d--) {
    it->coord[d]++;
    for (int k = 0; k < it->nt; k++) it->off[k] += (size_t)it->stride[k][d];
    if (it->coord[d] < it->dims[d]) return;
    for (int k = 0; k < it->nt; k++) it->off[k] -= (size_t)(it->stride[k][d] * it->dims[d]);
    it->coord[d] = 0;
  }
}

/* ---------------------------------------------------------------- parsing */

static int cmp_uid(const void *a, const void *b) {
  int64_t x = (*(ref_tensor *const *)a)->uid, y = (*(ref_tensor *const *)b)->uid;
  return x < y ? -1 : x > y;
}

static ref_tensor *tensor_by_uid(const ref_graph *g, int64_t uid) {
  size_t lo = 0, hi = g->nt;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (g->by_uid[mid]->uid == uid) return g->by_uid[mid];
    if (g->by_uid[mid]->uid < uid) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

static int resolve_dim(const json_t *root, const json_t *d, const kiln_ref_dim *dims, int ndims,
                       int64_t *v, const char *tname, kiln_err *e) {
  if (json_is_integer(d)) {
    *v = json_integer_value(d);
  } else if (json_is_string(d)) {
    const char *name = json_string_value(d);
    int found = 0;
    for (int i = 0; i < ndims && !found; i++)
      if (dims[i].name && strcmp(dims[i].name, name) == 0) *v = dims[i].value, found = 1;
    json_t *def = json_object_get(json_object_get(root, "dims"), name);
    if (!found) {
      json_t *val = json_object_get(def, "value");
      if (json_is_integer(val)) *v = json_integer_value(val), found = 1;
    }
    if (!found && !def)
      return kiln_err_set(e, "E_DANGLING", "tensor '%s' refers to unknown dim %s", tname, name);
    if (!found)
      return kiln_err_set(e, "E_SPEC", "tensor '%s': dynamic dim %s has no value (pass it in "
                          "dims)", tname, name);
  } else {
    return kiln_err_set(e, "E_JSON", "tensor '%s': dims entries must be integers or names",
                        tname);
  }
  if (*v < 0) return kiln_err_set(e, "E_SHAPE", "tensor '%s': negative dim", tname);
  return 0;
}

static int parse_role(const char *s, ref_role *r) {
  static const char *const NAMES[] = {"input", "output", "virtual", "constant", "scalar"};
  for (int i = 0; i < 5; i++)
    if (strcmp(s, NAMES[i]) == 0) return *r = (ref_role)i, 0;
  return -1;
}

static int parse_tensor(ref_graph *g, const json_t *jt, size_t idx, const kiln_ref_dim *dims,
                        int ndims, kiln_err *e) {
  ref_tensor *t = &g->t[idx];
  t->producer = -1;
  if (!json_is_object(jt)) return kiln_err_set(e, "E_JSON", "tensors[%zu] is not an object", idx);
  json_t *uid = json_object_get(jt, "uid"), *name = json_object_get(jt, "name");
  json_t *dtype = json_object_get(jt, "dtype"), *jd = json_object_get(jt, "dims");
  json_t *role = json_object_get(jt, "role");
  if (!json_is_integer(uid) || json_integer_value(uid) <= 0)
    return kiln_err_set(e, "E_JSON", "tensors[%zu]: uid must be a positive integer", idx);
  t->uid = json_integer_value(uid);
  t->name = json_is_string(name) ? json_string_value(name) : "";
  if (!json_is_string(dtype))
    return kiln_err_set(e, "E_JSON", "tensor uid %lld: dtype missing", (long long)t->uid);
  t->dtype = json_string_value(dtype);
  if (kiln_dtype_name_size(t->dtype) == 0)
    return kiln_err_set(e, "E_DTYPE", "tensor '%s': unknown dtype %s", t->name, t->dtype);
  if (!json_is_string(role) || parse_role(json_string_value(role), &t->role) != 0)
    return kiln_err_set(e, "E_JSON", "tensor '%s': role must be input, output, virtual, "
                        "constant or scalar", t->name);
  if (!json_is_array(jd))
    return kiln_err_set(e, "E_JSON", "tensor '%s': dims must be an array", t->name);
  if (json_array_size(jd) > KILN_REF_MAXRANK)
    return kiln_err_set(e, "E_SHAPE", "tensor '%s': rank %zu above %d", t->name,
                        json_array_size(jd), KILN_REF_MAXRANK);
  t->rank = (int)json_array_size(jd);
  t->numel = 1;
  int64_t span = 1; /* product of the nonzero extents: ops multiply extents in int64 */
  for (int i = 0; i < t->rank; i++) {
    if (resolve_dim(g->root, json_array_get(jd, (size_t)i), dims, ndims, &t->dims[i], t->name,
                    e))
      return -1;
    if (t->dims[i] > 0 && __builtin_mul_overflow(span, t->dims[i], &span))
      return kiln_err_set(e, "E_SHAPE", "tensor '%s': element count overflows", t->name);
    t->numel *= (size_t)t->dims[i];
  }
  if (t->role == REF_CONSTANT) {
    double v;
    if (json_to_double(json_object_get(jt, "value"), &v) != 0)
      return kiln_err_set(e, "E_JSON", "constant '%s' needs a numeric value", t->name);
    if (!(t->data = kiln__ref_alloc(t->numel, e))) return -1;
    t->owned = 1;
    v = kiln_round_to(t->dtype, v);
    for (size_t i = 0; i < t->numel; i++) t->data[i] = v;
  }
  return 0;
}

/* Lua encoders cannot tell {} from [], so an empty array stands for an empty object. */
static int empty_object(const json_t *j) { return json_is_array(j) && json_array_size(j) == 0; }

static int parse_ports(ref_graph *g, const json_t *obj, ref_port *ports, int *np, size_t ni,
                       const char *kind, kiln_err *e) {
  const char *key;
  json_t *v;
  ref_node *n = &g->n[ni];
  *np = 0;
  if (!obj || empty_object(obj)) return 0;
  if (!json_is_object(obj))
    return kiln_err_set(e, "E_JSON", "node '%s': %s must be an object", n->name, kind);
  json_object_foreach((json_t *)obj, key, v) {
    if (*np >= KILN_REF_MAXPORTS)
      return kiln_err_set(e, "E_LIMIT", "node '%s': too many %s", n->name, kind);
    if (!json_is_integer(v))
      return kiln_err_set(e, "E_JSON", "node '%s': %s.%s must be a uid", n->name, kind, key);
    ref_tensor *t = tensor_by_uid(g, json_integer_value(v));
    if (!t)
      return kiln_err_set(e, "E_DANGLING", "node '%s': %s.%s references uid %lld which does "
                          "not exist", n->name, kind, key, (long long)json_integer_value(v));
    ports[*np].port = key;
    ports[*np].t = t;
    (*np)++;
  }
  return 0;
}

static int check_node(ref_graph *g, size_t ni, kiln_err *e) {
  ref_node *n = &g->n[ni];
  const ref_op *op = g->ops[ni];
  for (int i = 0; i < n->nin; i++) {
    ref_tensor *t = n->in[i].t;
    if (!in_list(op->inputs, n->in[i].port))
      return kiln_err_set(e, "E_PORT", "node '%s': %s has no input port %s", n->name, n->op,
                          n->in[i].port);
    if ((t->role == REF_OUTPUT || t->role == REF_VIRTUAL) &&
        (t->producer < 0 || (size_t)t->producer >= ni))
      return kiln_err_set(e, "E_CYCLE", "node '%s': input %s (uid %lld) is used before the "
                          "node that produces it", n->name, n->in[i].port, (long long)t->uid);
  }
  for (int i = 0; i < n->nout; i++) {
    if (!in_list(op->outputs, n->out[i].port))
      return kiln_err_set(e, "E_PORT", "node '%s': %s has no output port %s", n->name, n->op,
                          n->out[i].port);
    for (int j = 0; j < n->nin; j++)
      if (n->in[j].t == n->out[i].t)
        return kiln_err_set(e, "E_CYCLE", "node '%s' reads its own output '%s'", n->name,
                            n->out[i].t->name);
  }
  const char *key;
  json_t *v;
  json_object_foreach(n->attrs, key, v) {
    (void)v;
    if (!in_list(op->attrs, key) && !in_list(NEUTRAL_ATTRS, key))
      return kiln_err_set(e, "E_ATTR", "node '%s': %s has no attribute %s", n->name, n->op,
                          key);
  }
  return 0;
}

static int parse_node(ref_graph *g, const json_t *jn, size_t ni, const char *graph_compute,
                      kiln_err *e) {
  ref_node *n = &g->n[ni];
  if (!json_is_object(jn)) return kiln_err_set(e, "E_JSON", "nodes[%zu] is not an object", ni);
  json_t *op = json_object_get(jn, "op"), *name = json_object_get(jn, "name");
  json_t *attrs = json_object_get(jn, "attrs"), *cd = json_object_get(jn, "compute_dtype");
  if (!json_is_string(op)) return kiln_err_set(e, "E_JSON", "nodes[%zu]: op missing", ni);
  n->op = json_string_value(op);
  n->name = json_is_string(name) ? json_string_value(name) : n->op;
  n->compute_dtype = json_is_string(cd) ? json_string_value(cd) : graph_compute;
  if (attrs && !json_is_null(attrs) && !json_is_object(attrs) && !empty_object(attrs))
    return kiln_err_set(e, "E_JSON", "node '%s': attrs must be an object", n->name);
  n->attrs = json_is_object(attrs) ? attrs : NULL;
  if (!n->attrs) {
    n->attrs = json_object();
    if (!n->attrs) return kiln_err_set(e, "E_LIMIT", "out of memory");
    json_object_set_new((json_t *)jn, "attrs", n->attrs); /* owned by the document */
  }
  if (parse_ports(g, json_object_get(jn, "inputs"), n->in, &n->nin, ni, "inputs", e) ||
      parse_ports(g, json_object_get(jn, "outputs"), n->out, &n->nout, ni, "outputs", e))
    return -1;
  if (!(g->ops[ni] = find_op(n->op)))
    return kiln_err_set(e, "E_UNKNOWN_OP", "reference executor has no %s", n->op);
  for (int i = 0; i < n->nout; i++) {
    ref_tensor *t = n->out[i].t;
    if (t->role != REF_OUTPUT && t->role != REF_VIRTUAL)
      return kiln_err_set(e, "E_JSON", "node '%s' writes tensor '%s' whose role cannot have a "
                          "producer", n->name, t->name);
    if (t->producer >= 0)
      return kiln_err_set(e, "E_JSON", "tensor '%s' (uid %lld) has two producers", t->name,
                          (long long)t->uid);
    t->producer = (int)ni;
  }
  return 0;
}

static int graph_parse(ref_graph *g, const char *text, const kiln_ref_dim *dims, int ndims,
                       kiln_err *e) {
  json_error_t jerr;
  if (!text) return kiln_err_set(e, "E_JSON", "no graph JSON");
  g->root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
  if (!g->root)
    return kiln_err_set(e, "E_JSON", "graph JSON line %d column %d: %s", jerr.line,
                        jerr.column, jerr.text);
  json_t *root = g->root;
  if (!json_is_object(root)) return kiln_err_set(e, "E_JSON", "graph JSON is not an object");
  json_t *schema = json_object_get(root, "schema"), *version = json_object_get(root, "version");
  if (!json_is_string(schema) || strcmp(json_string_value(schema), "kiln.graph") != 0)
    return kiln_err_set(e, "E_JSON_VERSION", "schema is not kiln.graph");
  if (!json_is_integer(version) || json_integer_value(version) != 1)
    return kiln_err_set(e, "E_JSON_VERSION", "kiln.graph version must be 1");
  json_t *jd = json_object_get(root, "dims");
  if (jd && !json_is_object(jd) && !empty_object(jd))
    return kiln_err_set(e, "E_JSON", "dims must be an object");
  json_t *jt = json_object_get(root, "tensors"), *jn = json_object_get(root, "nodes");
  if (!json_is_array(jt)) return kiln_err_set(e, "E_JSON", "tensors must be an array");
  if (jn && !json_is_array(jn)) return kiln_err_set(e, "E_JSON", "nodes must be an array");
  json_t *gc = json_object_get(root, "compute_dtype");
  const char *graph_compute = json_is_string(gc) ? json_string_value(gc) : "fp32";

  g->nt = json_array_size(jt);
  g->nn = jn ? json_array_size(jn) : 0;
  g->t = calloc(g->nt + 1, sizeof *g->t);
  g->by_uid = calloc(g->nt + 1, sizeof *g->by_uid);
  g->n = calloc(g->nn + 1, sizeof *g->n);
  g->ops = calloc(g->nn + 1, sizeof *g->ops);
  if (!g->t || !g->by_uid || !g->n || !g->ops) return kiln_err_set(e, "E_LIMIT", "out of memory");
  for (size_t i = 0; i < g->nt; i++) {
    if (parse_tensor(g, json_array_get(jt, i), i, dims, ndims, e)) return -1;
    g->by_uid[i] = &g->t[i];
  }
  qsort(g->by_uid, g->nt, sizeof *g->by_uid, cmp_uid);
  for (size_t i = 1; i < g->nt; i++)
    if (g->by_uid[i]->uid == g->by_uid[i - 1]->uid)
      return kiln_err_set(e, "E_UID", "uid %lld is used by '%s' and '%s'",
                          (long long)g->by_uid[i]->uid, g->by_uid[i - 1]->name,
                          g->by_uid[i]->name);
  for (size_t i = 0; i < g->nn; i++)
    if (parse_node(g, json_array_get(jn, i), i, graph_compute, e)) return -1;
  for (size_t i = 0; i < g->nn; i++)
    if (check_node(g, i, e)) return -1;
  for (size_t i = 0; i < g->nt; i++) {
    ref_tensor *t = &g->t[i];
    if ((t->role == REF_OUTPUT || t->role == REF_VIRTUAL) && t->producer < 0)
      return kiln_err_set(e, "E_DANGLING", "%s tensor '%s' (uid %lld) has no producer",
                          t->role == REF_OUTPUT ? "output" : "virtual", t->name,
                          (long long)t->uid);
  }
  return 0;
}

static int graph_bind(ref_graph *g, kiln_ref_buffer *bufs, int nbufs, kiln_err *e) {
  for (int i = 0; i < nbufs; i++) {
    ref_tensor *t = tensor_by_uid(g, bufs[i].uid);
    if (!t)
      return kiln_err_set(e, "E_DANGLING", "buffer for uid %lld, which the graph lacks",
                          (long long)bufs[i].uid);
    if (t->role == REF_CONSTANT) continue; /* the graph's value wins */
    if (t->role == REF_VIRTUAL)
      return kiln_err_set(e, "E_SPEC", "buffer given for virtual tensor '%s'", t->name);
    if (t->data)
      return kiln_err_set(e, "E_UID", "two buffers for uid %lld", (long long)t->uid);
    if (bufs[i].numel != t->numel)
      return kiln_err_set(e, "E_SHAPE", "buffer for '%s' has %zu values, the tensor %zu",
                          t->name, bufs[i].numel, t->numel);
    if (!bufs[i].data && t->numel)
      return kiln_err_set(e, "E_SPEC", "buffer for '%s' has no data", t->name);
    t->data = bufs[i].data;
  }
  for (size_t i = 0; i < g->nt; i++) {
    ref_tensor *t = &g->t[i];
    if (t->data) continue;
    if (t->role != REF_VIRTUAL)
      return kiln_err_set(e, "E_SPEC", "no buffer for tensor '%s' (uid %lld)", t->name,
                          (long long)t->uid);
    if (!(t->data = kiln__ref_alloc(t->numel, e))) return -1;
    t->owned = 1;
  }
  return 0;
}

/* Outputs are stored in their dtype; virtual tensors keep fp64 unless narrower than fp32. */
static void round_output(ref_tensor *t) {
  if (t->role == REF_VIRTUAL &&
      (strcmp(t->dtype, "fp32") == 0 || strcmp(t->dtype, "fp64") == 0))
    return;
  for (size_t i = 0; i < t->numel; i++) t->data[i] = kiln_round_to(t->dtype, t->data[i]);
}

static int graph_run(ref_graph *g, kiln_err *e) {
  for (size_t i = 0; i < g->nn; i++) {
    ref_node *n = &g->n[i];
    if (g->ops[i]->eval(g->ops[i], n, e))
      return kiln_err_wrap(e, "node '%s' (%s)", n->name, n->op);
    for (int k = 0; k < n->nout; k++) round_output(n->out[k].t);
  }
  return 0;
}

static void graph_free(ref_graph *g) {
  for (size_t i = 0; g->t && i < g->nt; i++)
    if (g->t[i].owned) free(g->t[i].data);
  free(g->t);
  free(g->by_uid);
  free(g->n);
  free(g->ops);
  json_decref(g->root);
}

int kiln_ref_eval(const char *graph_json, const kiln_ref_dim *dims, int ndims,
                  kiln_ref_buffer *bufs, int nbufs, kiln_err *e) {
  ref_graph g;
  memset(&g, 0, sizeof g);
  int rc = graph_parse(&g, graph_json, dims, ndims, e);
  if (rc == 0) rc = graph_bind(&g, bufs, nbufs, e);
  if (rc == 0) rc = graph_run(&g, e);
  graph_free(&g);
  return rc;
}

/* Outputs checked at their node's io dtype's tolerance (kiln_ref_check_dtype): op, port, and
 * the input port whose dtype is the io dtype. */
static const struct {
  const char *op, *port, *io;
} IO_PRECISION[] = {
    {"gdn", "final_state", "q"},
    {"gdn", "state_checkpoints", "q"},
};

static const char *static_dtype(const char *name) {
  static const char *const NAMES[] = {"fp16", "bf16", "fp8_e4m3", "fp8_e5m2"};
  for (size_t i = 0; name && i < sizeof NAMES / sizeof NAMES[0]; i++)
    if (strcmp(NAMES[i], name) == 0) return NAMES[i];
  return NULL;
}

static const char *tensor_dtype(json_t *tensors, json_int_t uid) {
  size_t i;
  json_t *t;
  json_array_foreach(tensors, i, t) {
    if (json_integer_value(json_object_get(t, "uid")) == uid)
      return json_string_value(json_object_get(t, "dtype"));
  }
  return NULL;
}

const char *kiln_ref_check_dtype(const char *graph_json, int64_t uid) {
  json_t *root = json_loads(graph_json, 0, NULL);
  const char *found = NULL;
  size_t i;
  json_t *n;
  json_array_foreach(json_object_get(root, "nodes"), i, n) {
    const char *op = json_string_value(json_object_get(n, "op"));
    for (size_t r = 0; op && !found && r < sizeof IO_PRECISION / sizeof IO_PRECISION[0]; r++) {
      json_t *out = json_object_get(json_object_get(n, "outputs"), IO_PRECISION[r].port);
      json_t *in = json_object_get(json_object_get(n, "inputs"), IO_PRECISION[r].io);
      if (strcmp(op, IO_PRECISION[r].op) == 0 && json_integer_value(out) == uid && in)
        found = static_dtype(tensor_dtype(json_object_get(root, "tensors"), json_integer_value(in)));
    }
  }
  json_decref(root);
  return found;
}
