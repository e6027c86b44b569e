/* kiln reference executor: matmul (OPS.md §6), C[..., m, n] = sum_k A[..., m, k] B[..., k, n]
 * with numpy broadcasting of the batch dims. Transposes are strides, already applied.
 * M/N/K_override give per-batch actual sizes: C is `padding` outside M x N, the sum stops at
 * K (semantics inferred from SDPA's use, OPS.md §6). */
#include <stdlib.h>
#include <string.h>

#include "ref_impl.h"

static int eval_matmul(const ref_op *op, const ref_node *n, kiln_err *e);

static const char *const INPUTS[] = {"A", "B", "M_override", "N_override", "K_override", NULL};
static const char *const OUTPUTS[] = {"C", NULL};
static const char *const ATTRS[] = {"padding", NULL};
static const ref_op OPS[] = {{"matmul", INPUTS, OUTPUTS, ATTRS, eval_matmul, NULL}};

const ref_op *kiln__ref_matmul_op(const char *name) {
  return strcmp(name, OPS[0].name) == 0 ? &OPS[0] : NULL;
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
