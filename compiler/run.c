/* kiln compiler: `kiln run` — random inputs (fresh per run, never zeros), poisoned outputs,
 * one launch through libkilnrt, every output compared with the reference executor under
 * dtype-aware tolerances, and optional timing with CUDA events (median after warm-up). */
#include "run.h"

#include <cuda.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_dl.h"
#include "internal.h"
#include "kiln.h"
#include "numeric.h"
#include "ref.h"

double kiln_main_start_ms;
/* Time spent in driver initialization and context creation (cuInit, primary context):
 * every CUDA process pays it, so start-up reports exclude it. */
static double driver_ms;

double kiln_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct run_tensor {
  kiln_tensor_info info;
  int64_t dims[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
  size_t numel, span, elem;
  double *logical;  /* row-major values (inputs: as stored on the device) */
  double *result;   /* outputs: what the kernel wrote */
  void *host;       /* physical (strided) bytes */
  CUdeviceptr dev;
} run_tensor;

/* atol + rtol·|ref| per output dtype: one or two units in the last place of the stored
 * type, with an absolute floor for values near zero. */
static void tolerance(kiln_dtype d, double *atol, double *rtol) {
  switch (d) {
    case KILN_DTYPE_FP32: *atol = 1e-5, *rtol = 1e-5; break;
    case KILN_DTYPE_FP16: *atol = 1e-3, *rtol = 2e-3; break;
    case KILN_DTYPE_BF16: *atol = 1e-2, *rtol = 1e-2; break;
    case KILN_DTYPE_FP8_E4M3: *atol = 2e-2, *rtol = 0.13; break;
    case KILN_DTYPE_FP8_E5M2: *atol = 4e-2, *rtol = 0.26; break;
    default: *atol = 0, *rtol = 0; break;
  }
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uniform(uint64_t *s) { return (splitmix(s) >> 11) * (1.0 / 9007199254740992.0); }
static double normal(uint64_t *s) {
  double u = uniform(s), v = uniform(s);
  return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

/* Random values that suit the dtype: normals for floats, small integers, 0/1 for bool. */
static double random_value(kiln_dtype d, kiln_role role, uint64_t *s) {
  if (role == KILN_ROLE_SCALAR) return 0.5 + uniform(s);
  switch (d) {
    case KILN_DTYPE_BOOL: return (double)(splitmix(s) & 1);
    case KILN_DTYPE_INT32:
    case KILN_DTYPE_INT64: return (double)((int64_t)(splitmix(s) % 17) - 8);
    case KILN_DTYPE_FP8_E8M0: return ldexp(1.0, (int)(splitmix(s) % 16) - 8);
    default: return normal(s);
  }
}

/* Physical element offset of logical index i (row-major over dims). */
static size_t physical_offset(const run_tensor *t, size_t i) {
  size_t off = 0;
  for (int k = t->info.ndim - 1; k >= 0; k--) {
    int64_t d = t->dims[k];
    off += (size_t)((int64_t)(i % (size_t)d) * t->strides[k]);
    i /= (size_t)d;
  }
  return off;
}

static int is_row_major(const run_tensor *t) {
  int64_t want = 1;
  for (int k = t->info.ndim - 1; k >= 0; k--) {
    if (t->dims[k] != 1 && t->strides[k] != want) return 0;
    want *= t->dims[k];
  }
  return 1;
}

#define TABLE 4096
/* Fills t->logical and t->host with fresh random values: a table of TABLE random values of
 * the tensor's dtype (rounded and encoded once), indexed at random per element — fast for
 * tensors of hundreds of millions of elements, and still random data, never zeros. */
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A BOUNDS or DISTINCT range's values into t->logical: sorted from lo (first) to hi (last), or
 * distinct values of [lo, hi] in random order (uniform ones where there are too few). */
static void ordered_values(run_tensor *t, const kiln_run_range *r, uint64_t *seed) {
  size_t n = t->numel;
  uint64_t span = (uint64_t)(r->hi - r->lo + 1);
  for (size_t j = 0; j < n; j++) t->logical[j] = (double)(r->lo + (int64_t)(splitmix(seed) % span));
  if (r->kind == KILN_RANGE_BOUNDS) {
    qsort(t->logical, n, sizeof(double), cmp_double);
    if (n) t->logical[0] = (double)r->lo, t->logical[n - 1] = (double)r->hi;
  } else if (span >= n && span <= (uint64_t)1 << 24) {
    int64_t *pick = malloc(span * sizeof *pick);
    if (!pick) return;
    for (uint64_t j = 0; j < span; j++) pick[j] = r->lo + (int64_t)j;
    for (size_t j = 0; j < n; j++) { /* partial Fisher-Yates */
      uint64_t k = j + splitmix(seed) % (span - j);
      int64_t x = pick[k];
      pick[k] = pick[j], pick[j] = x;
      t->logical[j] = (double)x;
    }
    free(pick);
  }
}

static int fill_random(run_tensor *t, const kiln_run_range *range, uint64_t *seed) {
  const char *dname = kiln_dtype_name(t->info.dtype);
  if (range && range->kind != KILN_RANGE_UNIFORM) {
    ordered_values(t, range, seed);
    for (size_t j = 0; j < t->numel; j++) {
      unsigned char enc[8];
      if (kiln_encode(dname, &t->logical[j], enc, 1) != 0) return -1;
      memcpy((char *)t->host + (is_row_major(t) ? j : physical_offset(t, j)) * t->elem, enc, t->elem);
    }
    return 0;
  }
  double table[TABLE];
  unsigned char enc[TABLE * 8];
  for (int i = 0; i < TABLE; i++)
    table[i] = range ? (double)(range->lo + (int64_t)(splitmix(seed) % (uint64_t)(range->hi - range->lo + 1)))
                     : kiln_round_to(dname, random_value(t->info.dtype, t->info.role, seed));
  if (kiln_encode(dname, table, enc, TABLE) != 0) return -1;
  int contiguous = is_row_major(t);
  uint64_t x = splitmix(seed) | 1;
  for (size_t j = 0; j < t->numel; j++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    unsigned idx = (unsigned)(x >> 52);     /* top 12 bits: 0..4095 */
    t->logical[j] = table[idx];
    size_t off = contiguous ? j : physical_offset(t, j);
    memcpy((char *)t->host + off * t->elem, enc + (size_t)idx * t->elem, t->elem);
  }
  return 0;
}

/* Decodes what the kernel wrote (t->host, physical layout) into t->result (row-major). */
static int read_result(run_tensor *t) {
  const char *dname = kiln_dtype_name(t->info.dtype);
  if (is_row_major(t)) return kiln_decode(dname, t->host, t->result, t->numel);
  for (size_t j = 0; j < t->numel; j++)
    if (kiln_decode(dname, (char *)t->host + physical_offset(t, j) * t->elem, &t->result[j], 1) != 0) return -1;
  return 0;
}

static int eval_expr(const char *expr, const char *const *names, const int64_t *values, int n, int64_t *out) {
  int64_t v = 1;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", expr);
  for (char *save = NULL, *tok = strtok_r(buf, "*", &save); tok; tok = strtok_r(NULL, "*", &save)) {
    char *end;
    long long lit = strtoll(tok, &end, 10);
    if (*end == '\0') { v *= lit; continue; }
    int found = 0;
    for (int i = 0; i < n; i++)
      if (strcmp(names[i], tok) == 0) { v *= values[i]; found = 1; break; }
    if (!found) return -1;
  }
  *out = v;
  return 0;
}

int kiln_run_device_arch(char *arch, size_t n, char *name, size_t name_n, kiln_err *e) {
  kiln_rt *rt = NULL;
  if (kiln_rt_create(&rt) != KILN_OK) return kiln_err_set(e, "E_CUDA", "cannot create the kiln runtime");
  int version;
  double t0 = kiln_now_ms();
  kiln_status st = kiln_rt_driver_version(rt, &version);
  driver_ms += kiln_now_ms() - t0;
  if (st != KILN_OK) {
    kiln_err_set(e, "E_CUDA", "%s", kiln_rt_errmsg(rt));
    kiln_rt_destroy(rt);
    return -1;
  }
  kiln_rt_destroy(rt);
  int count = 0, major = 0, minor = 0;
  CUdevice dev;
  if (kiln__cu.DeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
    return kiln_err_set(e, "E_CUDA", "no CUDA device");
  if (kiln__cu.DeviceGet(&dev, 0) != CUDA_SUCCESS ||
      kiln__cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
      kiln__cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
    return kiln_err_set(e, "E_CUDA", "cannot query device 0");
  if (name && kiln__cu.DeviceGetName(name, (int)name_n, dev) != CUDA_SUCCESS) snprintf(name, name_n, "?");
  /* arch-specific ("a") targets where the chip has them: Hopper and datacenter Blackwell */
  snprintf(arch, n, "sm_%d%d%s", major, minor, (major == 9 || major == 10) ? "a" : "");
  return 0;
}

#define CU(call)                                                                         \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      char d_[256];                                                                      \
      kiln__cuda_describe(r_, d_, sizeof d_);                                            \
      rc = kiln_err_set(e, "E_CUDA", "%s failed: %s", #call, d_);                        \
      goto done;                                                                         \
    }                                                                                    \
  } while (0)
#define RT(call)                                                                         \
  do {                                                                                   \
    kiln_status s_ = (call);                                                             \
    if (s_ != KILN_OK) {                                                                 \
      rc = kiln_err_set(e, "E_CUDA", "%s: %s: %s", #call, kiln_errstr(s_), kiln_rt_errmsg(rt)); \
      goto done;                                                                         \
    }                                                                                    \
  } while (0)

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Compares one output with the reference; prints a line (quiet: only on a mismatch); returns 1
 * when it mismatches.
 * Element test: |kiln - ref| <= atol·max(1, rms(ref)) + rtol·|ref| — the absolute floor
 * grows with the values' scale, since accumulation error does (a K=1056 GEMM sums to ~30).
 * Whole-tensor test: ‖kiln - ref‖ / ‖ref‖ <= rtol. NaN matches only NaN. */
static int compare_output(const run_tensor *t, const double *ref, const char *as, FILE *out, int quiet) {
  double atol, rtol, max_abs = 0, max_rel = 0, num = 0, den = 0;
  tolerance(t->info.dtype, &atol, &rtol);
  if (as) { /* the op's kernels may compute it through `as` operands (kiln_ref_check_dtype) */
    double a2, r2;
    tolerance(kiln_dtype_from_name(as), &a2, &r2);
    if (r2 > rtol) atol = a2, rtol = r2;
    else as = NULL;
  }
  for (size_t i = 0; i < t->numel; i++)
    if (!isnan(ref[i]) && !isinf(ref[i])) den += ref[i] * ref[i];
  double rms = t->numel ? sqrt(den / (double)t->numel) : 0;
  double floor_abs = atol * (rms > 1 ? rms : 1);
  size_t bad = 0, first_bad = (size_t)-1;
  for (size_t i = 0; i < t->numel; i++) {
    double g = t->result[i], r = ref[i];
    if (isnan(r) && isnan(g)) continue;
    double d = fabs(g - r);
    if (isnan(g) || isnan(r) || d > floor_abs + rtol * fabs(r)) {
      if (!bad) first_bad = i;
      bad++;
    }
    if (!isnan(d) && !isinf(d)) {
      if (d > max_abs) max_abs = d;
      if (fabs(r) > 0 && d / fabs(r) > max_rel) max_rel = d / fabs(r);
      num += d * d;
    }
  }
  double rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
  int l2_bad = rel_l2 > rtol;
  if (quiet && !bad && !l2_bad) return 0;
  fprintf(out, "  %-14s %-8s %9zu elements: max abs %.3g, max rel %.3g, rel L2 %.3g (<= %.0e), %zu outside %.1e + %.0e|ref|%s%s — %s\n",
          t->info.name, kiln_dtype_name(t->info.dtype), t->numel, max_abs, max_rel, rel_l2, rtol, bad, floor_abs, rtol,
          as ? ", at the tolerance of its op's operands, " : "", as ? as : "", bad || l2_bad ? "MISMATCH" : "ok");
  if (bad)
    fprintf(out, "    first mismatch at element %zu: kiln %.9g, reference %.9g\n", first_bad, t->result[first_bad],
            ref[first_bad]);
  return bad != 0 || l2_bad;
}

/* The tensors of one graph instance, made once and bound alike for every candidate plan of
 * it: inputs drawn once, the reference computed once. */
typedef struct run_session {
  const kiln_run_opts *o;
  kiln_rt *rt;
  run_tensor *ts;
  int nt;
  kiln_ref_buffer *bufs;
  int nbufs;
  double **refs;    /* per tensor: the reference of an output */
  int have_refs;    /* the reference executor has run */
  double bytes;     /* minimal bytes moved */
  uint64_t seed;
  double ctx_ms;    /* driver init and context creation, excluded from start-up */
  double setup0_ms; /* when test-data set-up began, excluded as well */
  FILE *out;
} run_session;

/* Allocates and fills s's tensors from the first plan's tensor table (inputs random, never
 * zeros; outputs with room for the reference). */
static int session_tensors(run_session *s, kiln_plan *plan, int nt, kiln_err *e) {
  const kiln_run_opts *o = s->o;
  kiln_rt *rt = s->rt;
  int rc = 0;
  s->nt = nt;
  s->ts = calloc((size_t)nt, sizeof *s->ts);
  s->bufs = calloc((size_t)nt + 1, sizeof *s->bufs);
  s->refs = calloc((size_t)nt + 1, sizeof *s->refs);
  if (!s->ts || !s->bufs || !s->refs) return kiln_err_set(e, "E_IO", "out of memory");
  for (int i = 0; i < nt; i++) {
    run_tensor *t = &s->ts[i];
    RT(kiln_plan_tensor(plan, i, &t->info));
    kiln_role role = t->info.role;
    if (role == KILN_ROLE_VIRTUAL || role == KILN_ROLE_CONSTANT || role == KILN_ROLE_SCRATCH) continue;
    t->numel = 1;
    t->span = 1;
    for (int k = 0; k < t->info.ndim; k++) {
      t->dims[k] = t->info.dims[k];
      if (t->dims[k] < 0 && eval_expr(t->info.dim_names[k], o->dim_names, o->dim_values, o->ndims, &t->dims[k]) != 0)
        return kiln_err_set(e, "E_USAGE", "dynamic dim %s of %s has no value (use --set %s=N)", t->info.dim_names[k],
                            t->info.name, t->info.dim_names[k]);
      t->strides[k] = t->info.strides[k];
      if (t->strides[k] < 0 &&
          eval_expr(t->info.stride_exprs[k], o->dim_names, o->dim_values, o->ndims, &t->strides[k]) != 0)
        return kiln_err_set(e, "E_USAGE", "stride %s of %s has no value", t->info.stride_exprs[k], t->info.name);
      t->numel *= (size_t)t->dims[k];
      t->span += (size_t)((t->dims[k] - 1) * t->strides[k]);
    }
    if (t->numel == 0) t->span = 0;
    t->elem = kiln_dtype_size(t->info.dtype);
    t->logical = calloc(t->numel + 1, sizeof(double));
    t->host = calloc(t->span + 1, t->elem);
    if (!t->logical || !t->host) return kiln_err_set(e, "E_IO", "out of memory for %s", t->info.name);
    s->bytes += (double)(t->numel * t->elem);
    kiln_ref_buffer *buf = &s->bufs[s->nbufs++];
    buf->uid = t->info.uid;
    buf->numel = t->numel;
    buf->data = t->logical;
    if (role == KILN_ROLE_SCALAR) {
      t->logical[0] = kiln_round_to("fp32", random_value(t->info.dtype, role, &s->seed));
      continue;
    }
    CU(kiln__cu.MemAlloc(&t->dev, t->span * t->elem + 16));
    if (role == KILN_ROLE_INPUT) {
      const kiln_run_range *range = NULL;
      for (int k = 0; k < o->nranges; k++)
        if (o->ranges[k].uid == t->info.uid && o->ranges[k].hi >= o->ranges[k].lo) range = &o->ranges[k];
      if (fill_random(t, range, &s->seed) != 0)
        return kiln_err_set(e, "E_DTYPE", "cannot encode %s", kiln_dtype_name(t->info.dtype));
    } else {
      s->refs[i] = calloc(t->numel + 1, sizeof(double));
      t->result = calloc(t->numel + 1, sizeof(double));
      if (!s->refs[i] || !t->result) return kiln_err_set(e, "E_IO", "out of memory");
      buf->data = s->refs[i];
    }
  }
done:
  return rc;
}

/* Binds s's dims, scalars and tensors to b; uploads the inputs afresh and poisons the
 * outputs (NaN for every float type), so a plan sees what the first one saw. */
static int session_bind(run_session *s, kiln_bind *b, kiln_err *e) {
  const kiln_run_opts *o = s->o;
  kiln_rt *rt = s->rt;
  int rc = 0;
  for (int d = 0; d < o->ndims; d++) RT(kiln_bind_dim(b, o->dim_names[d], o->dim_values[d]));
  for (int i = 0; i < s->nt; i++) {
    run_tensor *t = &s->ts[i];
    if (t->info.role == KILN_ROLE_SCALAR) RT(kiln_bind_scalar(b, t->info.name, t->logical[0]));
    if (!t->dev) continue;
    if (t->info.role == KILN_ROLE_INPUT) CU(kiln__cu.MemcpyHtoD(t->dev, t->host, t->span * t->elem));
    else CU(kiln__cu.MemsetD8(t->dev, 0xff, t->span * t->elem));
    RT(kiln_bind_tensor(b, t->info.name, (kiln_devptr)t->dev, t->info.ndim, t->dims, t->strides, t->info.dtype));
  }
done:
  return rc;
}

/* Reads the outputs back and compares them with the reference (run once, on first need). */
static int session_check(run_session *s, const kiln_plan_info *pi, kiln_run_result *res, kiln_err *e) {
  const kiln_run_opts *o = s->o;
  int rc = 0;
  for (int i = 0; i < s->nt; i++) {
    run_tensor *t = &s->ts[i];
    if (t->info.role != KILN_ROLE_OUTPUT) continue;
    CU(kiln__cu.MemcpyDtoH(t->host, t->dev, t->span * t->elem));
    if (read_result(t) != 0) return kiln_err_set(e, "E_DTYPE", "cannot decode %s", kiln_dtype_name(t->info.dtype));
  }
  if (!o->check) return 0;
  if (!s->have_refs) {
    kiln_ref_dim rd[KILN_PACK_MAX_DYN];
    int nd = o->ndims < KILN_PACK_MAX_DYN ? o->ndims : KILN_PACK_MAX_DYN;
    for (int d = 0; d < nd; d++) rd[d] = (kiln_ref_dim){o->dim_names[d], o->dim_values[d]};
    if (kiln_ref_eval(pi->graph_json, rd, nd, s->bufs, s->nbufs, e) != 0) return kiln_err_wrap(e, "reference executor");
    s->have_refs = 1;
  }
  for (int i = 0; i < s->nt; i++)
    if (s->ts[i].info.role == KILN_ROLE_OUTPUT)
      res->mismatched_outputs += compare_output(&s->ts[i], s->refs[i], kiln_ref_check_dtype(pi->graph_json, s->ts[i].info.uid),
                                                s->out, o->quiet);
done:
  return rc;
}

/* Captures `reps` launches of the plan on stream into a CUDA graph; 0 with *exec set, else -1
 * (the capture is ended and dropped; the caller times launches one by one). */
static int capture_launches(kiln_plan *plan, kiln_bind *b, CUstream stream, int reps, CUgraphExec *exec) {
  CUgraph graph = NULL;
  if (kiln__cu.StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS) return -1;
  int ok = 1;
  for (int r = 0; r < reps && ok; r++) ok = kiln_launch(plan, b, stream) == KILN_OK;
  ok &= kiln__cu.StreamEndCapture(stream, &graph) == CUDA_SUCCESS;
  ok = ok && graph && kiln__cu.GraphInstantiateWithFlags(exec, graph, 0) == CUDA_SUCCESS;
  if (graph) kiln__cu.GraphDestroy(graph);
  return ok ? 0 : -1;
}

/* The launch time of the plan: the median over o->iters samples, each a replay of a CUDA graph
 * of as many launches as take about 0.2 ms (one launch where capture fails), timed with events;
 * the inputs stay in L2 from one launch to the next where they fit. */
static int time_plan(run_session *s, kiln_plan *plan, kiln_bind *b, kiln_run_result *res, kiln_err *e) {
  kiln_rt *rt = s->rt;
  int rc = 0, iters = s->o->iters > 0 ? s->o->iters : 100;
  CUevent ev[2] = {0, 0};
  CUstream stream = NULL;
  CUgraphExec exec = NULL;
  float *times = calloc((size_t)iters, sizeof *times), one = 0;
  if (!times) return kiln_err_set(e, "E_IO", "out of memory");
  CU(kiln__cu.StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CU(kiln__cu.EventCreate(&ev[0], CU_EVENT_DEFAULT));
  CU(kiln__cu.EventCreate(&ev[1], CU_EVENT_DEFAULT));
  for (int w = 0; w < 10; w++) RT(kiln_launch(plan, b, stream));
  CU(kiln__cu.EventRecord(ev[0], stream));
  RT(kiln_launch(plan, b, stream));
  CU(kiln__cu.EventRecord(ev[1], stream));
  CU(kiln__cu.EventSynchronize(ev[1]));
  CU(kiln__cu.EventElapsedTime(&one, ev[0], ev[1]));
  int reps = one > 0 ? (int)ceil(0.2 / one) : 1;
  reps = reps < 1 ? 1 : reps > 200 ? 200 : reps;
  if (capture_launches(plan, b, stream, reps, &exec) != 0) reps = 1, exec = NULL;
  for (int it = 0; it < iters; it++) {
    CU(kiln__cu.EventRecord(ev[0], stream));
    if (exec) CU(kiln__cu.GraphLaunch(exec, stream));
    else RT(kiln_launch(plan, b, stream));
    CU(kiln__cu.EventRecord(ev[1], stream));
    CU(kiln__cu.EventSynchronize(ev[1]));
    CU(kiln__cu.EventElapsedTime(&times[it], ev[0], ev[1]));
    times[it] /= (float)reps;
  }
  qsort(times, (size_t)iters, sizeof *times, cmp_float);
  res->median_ms = times[iters / 2];
  res->samples = iters;
  res->replays = exec ? reps : 0;
  fprintf(s->out, "  time: median %.4f ms (p10 %.4f, p90 %.4f) over %d %s, L2 warm; %.1f MB moved, %.3f TB/s\n",
          res->median_ms, times[iters / 10], times[iters * 9 / 10], iters, exec ? "CUDA graph replays" : "launches",
          s->bytes / 1e6, s->bytes / (res->median_ms * 1e-3) / 1e12);
  if (exec) fprintf(s->out, "    (each replay %d launches, its time divided by %d)\n", reps, reps);
done:
  if (exec) kiln__cu.GraphExecDestroy(exec);
  if (ev[0]) kiln__cu.EventDestroy(ev[0]);
  if (ev[1]) kiln__cu.EventDestroy(ev[1]);
  if (stream) kiln__cu.StreamDestroy(stream);
  free(times);
  return rc;
}

/* Runs candidate `k` of o's packs on s's tensors: one launch, the check, the timing. */
static int run_plan(run_session *s, int k, kiln_run_result *res, kiln_err *e) {
  const kiln_run_opts *o = s->o;
  kiln_rt *rt = s->rt;
  kiln_pack *pack = NULL;
  kiln_plan *plan = NULL;
  kiln_bind *b = NULL;
  CUdeviceptr ws = 0;
  int rc = 0;
  res->bytes = s->bytes;
  RT(kiln_pack_open_memory(rt, o->packs[k], o->pack_sizes[k], &pack));
  RT(kiln_plan_get(pack, o->graph, o->instance, &plan));
  kiln_plan_info pi;
  RT(kiln_plan_info_get(plan, &pi));
  if (pi.ntensors != s->nt) {
    rc = kiln_err_set(e, "E_USAGE", "candidate %d of %s has %d tensors, the first %d", k, o->graph, pi.ntensors, s->nt);
    goto done;
  }
  RT(kiln_bind_create(plan, &b));
  if (session_bind(s, b, e) != 0) { rc = -1; goto done; }
  size_t ws_bytes = 0;
  RT(kiln_plan_workspace_size(plan, b, &ws_bytes));
  if (ws_bytes) {
    int64_t sms;
    int have_ctx;
    RT(kiln__context_sms(rt, &sms, &have_ctx));
    if (!o->quiet) fprintf(s->out, "  workspace: %zu bytes, persistent grids for %lld SMs\n", ws_bytes, (long long)sms);
    CU(kiln__cu.MemAlloc(&ws, ws_bytes));
    CU(kiln__cu.MemsetD8(ws, 0xff, ws_bytes)); /* kernels must not rely on a zeroed workspace */
    RT(kiln_bind_workspace(b, (kiln_devptr)ws, ws_bytes));
  }
  double t_launch0 = kiln_now_ms();
  RT(kiln_launch(plan, b, NULL));
  CU(kiln__cu.CtxSynchronize());
  static int reported; /* start-up is the first launch of the process only */
  if (kiln_main_start_ms > 0 && !reported++)
    fprintf(s->out, "  start-up: first launch done %.1f ms after main; driver init + context creation %.1f ms and test-data set-up "
            "%.1f ms excluded: kiln's own part %.2f ms\n", kiln_now_ms() - kiln_main_start_ms, s->ctx_ms,
            t_launch0 - s->setup0_ms, kiln_now_ms() - kiln_main_start_ms - s->ctx_ms - (t_launch0 - s->setup0_ms));
  if (session_check(s, &pi, res, e) != 0) { rc = -1; goto done; }
  if (o->bench && time_plan(s, plan, b, res, e) != 0) rc = -1;
done:
  if (ws) kiln__cu.MemFree(ws);
  if (b) kiln_bind_destroy(b);
  if (pack) kiln_pack_close(pack);
  return rc;
}

int kiln_run(const kiln_run_opts *o, kiln_run_result *res, kiln_err *e) {
  int rc = 0;
  memset(res, 0, (size_t)o->npacks * sizeof *res);
  run_session s = {.o = o, .out = o->out ? o->out : stdout};
  s.seed = o->seed ? o->seed : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ (uint64_t)clock();
  kiln_rt *rt = NULL;
  kiln_pack *pack = NULL;
  kiln_plan *plan = NULL;
  CUdevice dev = 0;
  int have_ctx = 0;
  if (o->npacks < 1) return kiln_err_set(e, "E_USAGE", "kiln_run: no plan to run");
  if (kiln_rt_create(&rt) != KILN_OK) return kiln_err_set(e, "E_CUDA", "cannot create the kiln runtime");
  s.rt = rt;
  int version;
  double t_ctx0 = kiln_now_ms();
  RT(kiln_rt_driver_version(rt, &version));
  CUcontext ctx;
  CU(kiln__cu.DeviceGet(&dev, 0));
  CU(kiln__cu.DevicePrimaryCtxRetain(&ctx, dev));
  have_ctx = 1;
  CU(kiln__cu.CtxSetCurrent(ctx));
  s.ctx_ms = kiln_now_ms() - t_ctx0 + driver_ms;
  RT(kiln_pack_open_memory(rt, o->packs[0], o->pack_sizes[0], &pack));
  RT(kiln_plan_get(pack, o->graph, o->instance, &plan));
  kiln_plan_info pi;
  RT(kiln_plan_info_get(plan, &pi));
  fprintf(s.out, "run %s%s%s%s: seed %llu\n", pi.graph, *pi.instance ? " [" : "", pi.instance, *pi.instance ? "]" : "",
          (unsigned long long)s.seed);
  s.setup0_ms = kiln_now_ms();
  if (session_tensors(&s, plan, pi.ntensors, e) != 0) { rc = -1; goto done; }
  for (int k = 0; k < o->npacks && rc == 0; k++) {
    if (o->npacks > 1) fprintf(s.out, "  candidate %d\n", k);
    rc = run_plan(&s, k, &res[k], e);
  }
done:
  for (int i = 0; s.ts && i < s.nt; i++) {
    if (s.ts[i].dev) kiln__cu.MemFree(s.ts[i].dev);
    free(s.ts[i].logical);
    free(s.ts[i].result);
    free(s.ts[i].host);
    if (s.refs) free(s.refs[i]);
  }
  free(s.ts);
  free(s.refs);
  free(s.bufs);
  if (pack) kiln_pack_close(pack);
  kiln_rt_destroy(rt);
  if (have_ctx) kiln__cu.DevicePrimaryCtxRelease(dev);
  return rc;
}
