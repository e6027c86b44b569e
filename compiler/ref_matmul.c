/* kiln reference executor: matmul (OPS.md §6), C[..., m, n] = sum_k A[..., m, k] B[..., k, n]
 * with numpy broadcasting of the batch dims. Transposes are strides, already applied.
 * M/N/K_override give per-batch actual sizes: C is `padding` outside M x N, the sum stops at
 * K (semantics inferred from SDPA's use, OPS.md §6). */
#include <stdlib.h>
#include <string.h>

#include "ref_impl.h"

static int eval_matmul(const ref_op *op, const ref_node *n, kiln_err *e);
static int eval_grouped(const ref_op *op, const ref_node *n, kiln_err *e);

static const char *const INPUTS[] = {"A", "B", "M_override", "N_override", "K_override", NULL};
static const char *const OUTPUTS[] = {"C", NULL};
static const char *const ATTRS[] = {"padding", NULL};
static const char *const G_INPUTS[] = {"token", "weight", "first_token_offset", NULL};
static const char *const G_OUTPUTS[] = {"Y", NULL};
static const char *const G_ATTRS[] = {"mode", "top_k", NULL};
static const ref_op OPS[] = {{"matmul", INPUTS, OUTPUTS, ATTRS, eval_matmul, NULL},
                             {"moe_grouped_matmul", G_INPUTS, G_OUTPUTS, G_ATTRS, eval_grouped, NULL}};

const ref_op *kiln__ref_matmul_op(const char *name) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(name, OPS[i].name) == 0) return &OPS[i];
  return NULL;
}

/* Expert e's first row: the offsets as a running maximum clamped to [0, T] (out-of-order or
 * out-of-range offsets give empty experts, never overlapping ones), OPS.md §6. */
static int64_t expert_start(const ref_tensor *off, int64_t e, int64_t T, int64_t prev) {
  if (e >= (int64_t)off->numel) return T;
  double v = off->data[e];
  int64_t s = v < 0 ? 0 : v > (double)T ? T : (int64_t)v;
  return s < prev ? prev : s;
}

/* moe_grouped_matmul (mode none): Y[t] = token[t] . weight[e] for the expert e whose rows
 * [start[e], start[e + 1]) hold t; rows before the first expert's are 0. */
static int eval_grouped(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  ref_tensor *x, *w, *off, *y;
  if (kiln__ref_need_in(n, "token", &x, e) || kiln__ref_need_in(n, "weight", &w, e) ||
      kiln__ref_need_in(n, "first_token_offset", &off, e) || kiln__ref_need_out(n, "Y", &y, e))
    return -1;
  const char *mode;
  if (kiln__ref_attr_str(n, "mode", "none", &mode, e)) return -1;
  if (strcmp(mode, "none") != 0)
    return kiln_err_set(e, "E_ATTR", "moe_grouped_matmul: mode '%s' is not supported", mode);
  if (x->rank != 2 || w->rank != 3 || y->rank != 2)
    return kiln_err_set(e, "E_SHAPE", "moe_grouped_matmul: token [T, K], weight [E, K, N], Y [T, N]");
  int64_t T = x->dims[0], K = x->dims[1], E = w->dims[0], N = w->dims[2];
  if (w->dims[1] != K || y->dims[0] != T || y->dims[1] != N || (int64_t)off->numel != E)
    return kiln_err_set(e, "E_SHAPE", "moe_grouped_matmul: token [T, K], weight [E, K, N], "
                                      "first_token_offset [E], Y [T, N] do not agree");
  memset(y->data, 0, (size_t)(T * N) * sizeof(double));
  int64_t start = expert_start(off, 0, T, 0);
  for (int64_t g = 0; g < E; g++) {
    int64_t end = expert_start(off, g + 1, T, start);
    const double *pw = w->data + (size_t)(g * K * N);
    for (int64_t t = start; t < end; t++) {
      double *row = y->data + t * N;
      for (int64_t k = 0; k < K; k++) {
        double av = x->data[t * K + k];
        const double *brow = pw + k * N;
        for (int64_t j = 0; j < N; j++) row[j] += av * brow[j];
      }
    }
    start = end;
  }
  return 0;
}

static int eval_matmul(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  ref_tensor *a, *b, *c;
  if (kiln__ref_need_in(n, "A", &a, e) || kiln__ref_need_in(n, "B", &b, e) ||
      kiln__ref_need_out(n, "C", &c, e))
    return -1;
  ref_tensor *ov[3] = {kiln__ref_in(n, "M_override"), kiln__ref_in(n, "N_override"),
                       kiln__ref_in(n, "K_override")};
  double pad;
  if (kiln__ref_attr_num(n, "padding", 0.0, &pad, e)) return -1;
  if (a->rank < 2 || b->rank < 2 || c->rank < 2)
    return kiln_err_set(e, "E_SHAPE", "matmul: A, B and C need rank >= 2");
  int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1];
  int64_t N = b->dims[b->rank - 1];
  if (b->dims[b->rank - 2] != K)
    return kiln_err_set(e, "E_SHAPE", "matmul: A has K=%lld, B has K=%lld", (long long)K,
                        (long long)b->dims[b->rank - 2]);
  if (c->dims[c->rank - 2] != M || c->dims[c->rank - 1] != N)
    return kiln_err_set(e, "E_SHAPE", "matmul: C must end in [%lld,%lld]", (long long)M,
                        (long long)N);
  /* Batch dims: C's must be the broadcast of A's and B's. */
  int rb = c->rank - 2;
  if (a->rank - 2 > rb) rb = a->rank - 2;
  if (b->rank - 2 > rb) rb = b->rank - 2;
  for (int d = 1; d <= rb; d++) {
    int64_t ea = d <= a->rank - 2 ? a->dims[a->rank - 2 - d] : 1;
    int64_t eb = d <= b->rank - 2 ? b->dims[b->rank - 2 - d] : 1;
    int64_t ec = d <= c->rank - 2 ? c->dims[c->rank - 2 - d] : 1;
    if ((ea != 1 && eb != 1 && ea != eb) || ec != (ea != 1 ? ea : eb))
      return kiln_err_set(e, "E_SHAPE", "matmul: batch dims of A, B, C do not broadcast");
  }
  ref_iter it; /* over C's batch dims */
  kiln__ref_iter_init(&it, c->rank - 2, c->dims);
  if (kiln__ref_iter_add(&it, a->rank - 2, a->dims, "A", e) < 0 ||
      kiln__ref_iter_add(&it, b->rank - 2, b->dims, "B", e) < 0)
    return -1;
  size_t batches = c->numel / (size_t)(M * N > 0 ? M * N : 1);
  if (M * N == 0) batches = 0;
  /* Overrides: one actual M/N/K per batch entry (C's first dim), or one for all. */
  int64_t nb0 = c->rank > 2 ? c->dims[0] : 1, full[3] = {M, N, K};
  for (int i = 0; i < 3; i++)
    if (ov[i] && ov[i]->numel != 1 && ov[i]->numel != (size_t)nb0)
      return kiln_err_set(e, "E_SHAPE", "matmul: '%s' must hold one value per batch entry",
                          ov[i]->name);
  size_t sa = (size_t)(M * K), sb = (size_t)(K * N), sc = (size_t)(M * N);
  size_t per_b0 = nb0 > 0 ? batches / (size_t)nb0 : 0;
  for (size_t bi = 0; bi < batches; bi++, kiln__ref_iter_next(&it)) {
    const double *pa = a->data + it.off[0] * sa, *pb = b->data + it.off[1] * sb;
    double *pc = c->data + bi * sc;
    int64_t act[3];
    for (int i = 0; i < 3; i++) {
      act[i] = full[i];
      if (!ov[i]) continue;
      double v = ov[i]->data[ov[i]->numel == 1 ? 0 : bi / per_b0];
      if (v < act[i]) act[i] = v < 0 ? 0 : (int64_t)v;
    }
    for (int64_t m = 0; m < M; m++) {
      double *row = pc + m * N;
      for (int64_t j = 0; j < N; j++) row[j] = m < act[0] && j < act[1] ? 0.0 : pad;
      if (m >= act[0]) continue;
      for (int64_t k = 0; k < act[2]; k++) {
        double av = pa[m * K + k];
        const double *brow = pb + k * N;
        for (int64_t j = 0; j < act[1]; j++) row[j] += av * brow[j];
      }
    }
  }
  return 0;
}
