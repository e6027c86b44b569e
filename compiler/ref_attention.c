/* kiln reference executor: sdpa forward and backward (OPS.md §7.3, §7.5, §7.6), dense BHSD:
 * scale, softcap, bias, ALiBi, padding mask, diagonal bands (causal both alignments, sliding
 * window), GQA, sink token, paged K/V (forward, §7.4); forward outputs O, Stats (LSE), Max,
 * Sum_exp; backward dQ, dK, dV, dBias, DSINK_TOKEN. No dropout, ragged layouts or fp8. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ref_impl.h"

static int eval_sdpa(const ref_op *op, const ref_node *n, kiln_err *e);
static int eval_sdpa_bwd(const ref_op *op, const ref_node *n, kiln_err *e);

/* Ports the reference does not evaluate (ragged, dropout, block mask). */
static const char *const UNSUPPORTED[] = {
    "block_mask", "cu_seq_len_q", "cu_seq_len_kv", "seed", "offset", "dropout_mask",
    "dropout_scale", "RNG_DUMP", NULL};
static const char *const INPUTS[] = {
    "q|Q", "k|K", "v|V", "attn_scale|Attn_scale", "bias|Bias", "seq_len_q|SEQ_LEN_Q",
    "seq_len_kv|SEQ_LEN_KV", "sink_token|SINK_TOKEN", "block_mask", "cu_seq_len_q",
    "cu_seq_len_kv", "seed", "offset", "dropout_mask", "dropout_scale",
    "paged_attention_k_table", "paged_attention_v_table", NULL};
static const char *const OUTPUTS[] = {"O", "Stats", "Max", "Sum_exp", "RNG_DUMP", NULL};
/* generate_stats / is_inference / score_max / score_sum_exp only say which outputs exist;
 * implementation, unfuse_fma and the max_total_seq_len_* bounds do not change the math. */
static const char *const ATTRS[] = {
    "attn_scale", "softcap", "use_alibi_mask", "use_padding_mask", "use_causal_mask",
    "use_causal_mask_bottom_right", "sliding_window_length", "diagonal_alignment",
    "diagonal_band_left_bound", "diagonal_band_right_bound", "dropout_probability", "rng_dump",
    "max_total_seq_len_q", "max_total_seq_len_kv", "generate_stats", "is_inference",
    "stats_use_log2", "implementation", "unfuse_fma", "paged_attention_max_seq_len_kv",
    "score_max", "score_sum_exp", NULL};
static const char *const B_INPUTS[] = {
    "q|Q", "k|K", "v|V", "o|O", "dO", "stats|Stats", "attn_scale|Attn_scale", "bias|Bias",
    "seq_len_q|SEQ_LEN_Q", "seq_len_kv|SEQ_LEN_KV", "sink_token|SINK_TOKEN", "cu_seq_len_q",
    "cu_seq_len_kv", "seed", "offset", "dropout_mask", "dropout_scale", "dropout_scale_inv",
    NULL};
static const char *const B_OUTPUTS[] = {"dQ", "dK", "dV", "dBias", "DSINK_TOKEN", "RNG_DUMP",
                                        NULL};
/* dBias / dSink_token only say which outputs exist. */
static const char *const B_ATTRS[] = {
    "attn_scale", "softcap", "use_alibi_mask", "use_padding_mask", "use_causal_mask",
    "use_causal_mask_bottom_right", "sliding_window_length", "diagonal_alignment",
    "diagonal_band_left_bound", "diagonal_band_right_bound", "dropout_probability", "rng_dump",
    "max_total_seq_len_q", "max_total_seq_len_kv", "dBias", "dSink_token",
    "use_deterministic_algorithm", NULL};
static const ref_op OPS[] = {
    {"sdpa", INPUTS, OUTPUTS, ATTRS, eval_sdpa, NULL},
    {"sdpa_backward", B_INPUTS, B_OUTPUTS, B_ATTRS, eval_sdpa_bwd, NULL},
};

const ref_op *kiln__ref_attention_op(const char *name) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
  return NULL;
}

typedef struct {
  double scale, softcap;
  int padding, alibi, has_left, has_right, bottom_right, log2_stats;
  int64_t left, right;
} sdpa_cfg;

static int read_cfg(const ref_node *n, int scale_port, sdpa_cfg *c, kiln_err *e) {
  int causal, causal_br, rng_dump;
  int64_t window;
  const char *align;
  memset(c, 0, sizeof *c);
  if (kiln__ref_attr_num(n, "attn_scale", 1.0, &c->scale, e) ||
      kiln__ref_attr_num(n, "softcap", 0.0, &c->softcap, e) ||
      kiln__ref_attr_bool(n, "use_alibi_mask", 0, &c->alibi, e) ||
      kiln__ref_attr_bool(n, "use_causal_mask", 0, &causal, e) ||
      kiln__ref_attr_bool(n, "use_causal_mask_bottom_right", 0, &causal_br, e) ||
      kiln__ref_attr_bool(n, "stats_use_log2", 0, &c->log2_stats, e) ||
      kiln__ref_attr_int(n, "sliding_window_length", 0, &window, e) ||
      kiln__ref_attr_int(n, "diagonal_band_left_bound", 0, &c->left, e) ||
      kiln__ref_attr_int(n, "diagonal_band_right_bound", 0, &c->right, e) ||
      kiln__ref_attr_str(n, "diagonal_alignment", "top_left", &align, e) ||
      kiln__ref_attr_bool(n, "rng_dump", 0, &rng_dump, e))
    return -1;
  if (kiln__ref_attr_has(n, "dropout_probability") || rng_dump)
    return kiln__ref_unsupported(n, "dropout", e);
  if (scale_port && kiln__ref_attr_has(n, "attn_scale"))
    return kiln_err_set(e, "E_ATTR", "sdpa: attn_scale given both as attribute and port");
  if (causal && causal_br)
    return kiln_err_set(e, "E_ATTR", "sdpa: use_causal_mask and use_causal_mask_bottom_right "
                        "are exclusive");
  c->has_right = kiln__ref_attr_has(n, "diagonal_band_right_bound");
  c->has_left = kiln__ref_attr_has(n, "diagonal_band_left_bound");
  if (strcasecmp(align, "top_left") == 0) c->bottom_right = 0;
  else if (strcasecmp(align, "bottom_right") == 0) c->bottom_right = 1;
  else return kiln_err_set(e, "E_ATTR", "sdpa: diagonal_alignment must be TOP_LEFT or "
                           "BOTTOM_RIGHT");
  if (causal || causal_br) {
    if (c->has_right)
      return kiln_err_set(e, "E_ATTR", "sdpa: a causal mask excludes "
                          "diagonal_band_right_bound");
    c->has_right = 1;
    c->right = 0;
    c->bottom_right = causal_br;
  }
  if (kiln__ref_attr_has(n, "sliding_window_length")) {
    if (c->has_left)
      return kiln_err_set(e, "E_ATTR", "sdpa: sliding_window_length excludes "
                          "diagonal_band_left_bound");
    c->has_left = 1;
    c->left = window;
  }
  if (c->has_left && c->left < 1)
    return kiln_err_set(e, "E_ATTR", "sdpa: the left bound (window) must be >= 1");
  if (c->has_right && c->right < 0)
    return kiln_err_set(e, "E_ATTR", "sdpa: the right bound must be >= 0");
  if (c->softcap < 0) return kiln_err_set(e, "E_ATTR", "sdpa: softcap must be > 0");
  return 0;
}

/* ALiBi slope of head h of H (OPS.md §7.3 step 6). */
static double alibi_slope(int64_t h, int64_t H) {
  int64_t p = 1;
  while (p * 2 <= H) p *= 2;
  if (h < p) return pow(2.0, -8.0 * (double)(h + 1) / (double)p);
  return pow(2.0, -4.0 * (double)(2 * (h - p) + 1) / (double)p);
}

/* The checked operands and the mask configuration shared by forward and backward. */
typedef struct {
  sdpa_cfg c;
  ref_tensor *q, *k, *v, *bias, *slq, *slk, *sink;
  int64_t B, Hq, Sq, Dqk, Hk, Skv, Hv, Dv;
  int64_t bstride[4]; /* bias strides over (B, Hq, Sq, Skv), 0 where broadcast */
  ref_tensor paged[2]; /* paged K/V gathered into dense (B, H, S_kv, D) copies (owned) */
} sdpa_prob;

static void sdpa_prob_free(sdpa_prob *p) {
  free(p->paged[0].data);
  free(p->paged[1].data);
}

/* Block container c (blocks, H, bs, D) through page table t (B, 1, blocks a sequence, 1) into
 * dense (B, H, S_kv, D) (OPS.md §7.4); keys at or past a sequence's length (the table need not
 * name a block for them) are zero. */
static int gather_pages(const ref_tensor *c, const ref_tensor *t, const ref_tensor *slk, int64_t B,
                        int64_t skv, ref_tensor *out, kiln_err *e) {
  if (c->rank != 4 || t->rank != 4 || t->dims[0] != B || t->dims[1] != 1 || t->dims[3] != 1)
    return kiln_err_set(e, "E_SHAPE", "sdpa: paged K/V needs containers (blocks, H, bs, D) and "
                        "page tables (B, 1, blocks, 1)");
  int64_t nb = c->dims[0], H = c->dims[1], bs = c->dims[2], D = c->dims[3], per = t->dims[2];
  if (bs < 1 || per * bs < skv)
    return kiln_err_set(e, "E_SHAPE", "sdpa: %s holds %lld blocks of %lld keys, fewer than "
                        "paged_attention_max_seq_len_kv = %lld", t->name, (long long)per,
                        (long long)bs, (long long)skv);
  *out = *c;
  out->dims[0] = B, out->dims[2] = skv;
  out->numel = (size_t)(B * H * skv * D);
  out->owned = 1;
  out->data = kiln__ref_alloc(out->numel, e);
  if (!out->data) return -1;
  for (int64_t b = 0; b < B; b++) {
    int64_t lk = slk ? (int64_t)slk->data[b] : skv;
    for (int64_t s = 0; s < skv && s < lk; s++) {
      double blk = t->data[b * per + s / bs];
      if (!(blk >= 0 && blk < (double)nb))
        return kiln_err_set(e, "E_SHAPE", "sdpa: %s[%lld, 0, %lld] = %g is not a block of %s "
                            "(%lld blocks)", t->name, (long long)b, (long long)(s / bs), blk,
                            c->name, (long long)nb);
      for (int64_t h = 0; h < H; h++)
        memcpy(out->data + ((b * H + h) * skv + s) * D,
               c->data + (((int64_t)blk * H + h) * bs + s % bs) * D, (size_t)D * sizeof(double));
    }
  }
  return 0;
}

/* Paged K/V: p->k and p->v become dense gathered copies. */
static int paged_kv(const ref_node *n, sdpa_prob *p, kiln_err *e) {
  ref_tensor *kt = kiln__ref_in(n, "paged_attention_k_table"), *vt = kiln__ref_in(n, "paged_attention_v_table");
  if (!kt && !vt) return 0;
  int64_t skv;
  if (!kt || !vt) return kiln_err_set(e, "E_PORT", "sdpa: paged K/V needs both page tables");
  if (kiln__ref_attr_int(n, "paged_attention_max_seq_len_kv", 0, &skv, e)) return -1;
  if (skv < 1) return kiln_err_set(e, "E_ATTR", "sdpa: paged K/V needs paged_attention_max_seq_len_kv >= 1");
  if (gather_pages(p->k, kt, p->slk, p->q->dims[0], skv, &p->paged[0], e) ||
      gather_pages(p->v, vt, p->slk, p->q->dims[0], skv, &p->paged[1], e))
    return -1;
  p->k = &p->paged[0], p->v = &p->paged[1];
  return 0;
}

static int sdpa_prob_of(const ref_node *n, sdpa_prob *p, kiln_err *e) {
  memset(p, 0, sizeof *p);
  ref_tensor *ts = kiln__ref_in(n, "attn_scale|Attn_scale");
  p->bias = kiln__ref_in(n, "bias|Bias");
  p->slq = kiln__ref_in(n, "seq_len_q|SEQ_LEN_Q");
  p->slk = kiln__ref_in(n, "seq_len_kv|SEQ_LEN_KV");
  p->sink = kiln__ref_in(n, "sink_token|SINK_TOKEN");
  if (kiln__ref_reject_ports(n, UNSUPPORTED, e) || kiln__ref_need_in(n, "q|Q", &p->q, e) ||
      kiln__ref_need_in(n, "k|K", &p->k, e) || kiln__ref_need_in(n, "v|V", &p->v, e) ||
      read_cfg(n, ts != NULL, &p->c, e))
    return -1;
  if (ts && kiln__ref_scalar(ts, &p->c.scale, e)) return -1;
  if (kiln__ref_attr_bool(n, "use_padding_mask", p->slq && p->slk, &p->c.padding, e)) return -1;
  if (p->q->rank == 4 && paged_kv(n, p, e)) return -1;
  if (p->c.padding && (!p->slq || !p->slk))
    return kiln_err_set(e, "E_PORT", "%s: the padding mask needs seq_len_q and seq_len_kv",
                        n->op);
  ref_tensor *q = p->q, *k = p->k, *v = p->v;
  if (q->rank != 4 || k->rank != 4 || v->rank != 4)
    return kiln_err_set(e, "E_SHAPE", "%s: q, k, v must be 4-D (B, H, S, D)", n->op);
  p->B = q->dims[0], p->Hq = q->dims[1], p->Sq = q->dims[2], p->Dqk = q->dims[3];
  p->Hk = k->dims[1], p->Skv = k->dims[2], p->Hv = v->dims[1], p->Dv = v->dims[3];
  if (k->dims[0] != p->B || v->dims[0] != p->B || k->dims[3] != p->Dqk || v->dims[2] != p->Skv)
    return kiln_err_set(e, "E_SHAPE", "%s: q, k, v dims disagree", n->op);
  if (p->Hk < 1 || p->Hv < 1 || p->Hq % p->Hk || p->Hq % p->Hv)
    return kiln_err_set(e, "E_SHAPE", "%s: q heads must be a multiple of k and v heads", n->op);
  if ((p->slq && p->slq->numel != (size_t)p->B) || (p->slk && p->slk->numel != (size_t)p->B))
    return kiln_err_set(e, "E_SHAPE", "%s: seq_len_q / seq_len_kv must have B values", n->op);
  if (p->sink && p->sink->numel != (size_t)p->Hq && p->sink->numel != 1)
    return kiln_err_set(e, "E_SHAPE", "%s: sink_token must be (1, H_q, 1, 1)", n->op);
  ref_iter bit;
  int64_t sd[4] = {p->B, p->Hq, p->Sq, p->Skv};
  kiln__ref_iter_init(&bit, 4, sd);
  if (p->bias) {
    if (kiln__ref_iter_add(&bit, p->bias->rank, p->bias->dims, "bias", e) < 0) return -1;
    memcpy(p->bstride, bit.stride[0], sizeof p->bstride);
  }
  return 0;
}

static double sink_of(const sdpa_prob *p, int64_t h) {
  return p->sink ? p->sink->data[p->sink->numel == 1 ? 0 : h] : -INFINITY;
}

/* Scores of query row (b, h, i) after steps 1-8 of OPS.md §7.3 into s[0..Skv); raw[j] (if
 * not NULL) gets the scaled score before softcap. Returns the row max (with the sink) and
 * sets *dead for a row that gets P = 0 (fully masked, or padded). */
static double score_row(const sdpa_prob *p, int64_t b, int64_t h, int64_t i, double *s,
                        double *raw, int *dead) {
  const sdpa_cfg *c = &p->c;
  int64_t lq = c->padding ? (int64_t)p->slq->data[b] : p->Sq;
  int64_t lk = c->padding ? (int64_t)p->slk->data[b] : p->Skv;
  int64_t shift = c->bottom_right ? lk - lq : 0;
  double slope = c->alibi ? alibi_slope(h, p->Hq) : 0.0, m = sink_of(p, h);
  const double *kh = p->k->data + (size_t)((b * p->Hk + h / (p->Hq / p->Hk)) * p->Skv * p->Dqk);
  const double *qi = p->q->data + (size_t)(((b * p->Hq + h) * p->Sq + i) * p->Dqk);
  for (int64_t j = 0; j < p->Skv; j++) {
    double x = 0;
    for (int64_t d = 0; d < p->Dqk; d++) x += qi[d] * kh[j * p->Dqk + d];
    x *= c->scale;
    if (raw) raw[j] = x;
    if (c->softcap > 0) x = c->softcap * tanh(x / c->softcap);
    if (p->bias)
      x += p->bias->data[b * p->bstride[0] + h * p->bstride[1] + i * p->bstride[2] +
                         j * p->bstride[3]];
    if (c->alibi) x += slope * (double)(j - i);
    if (c->padding && (j >= lk || i >= lq)) x = -INFINITY;
    if (c->has_right && j > i + shift + c->right) x = -INFINITY;
    if (c->has_left && j <= i + shift - c->left) x = -INFINITY;
    s[j] = x;
    if (isnan(x) || x > m) m = isnan(m) ? m : x;
  }
  *dead = m == -INFINITY || (c->padding && i >= lq);
  return m;
}

static int stats_shaped(const ref_tensor *t, const sdpa_prob *p, kiln_err *e) {
  if (t && t->numel != (size_t)(p->B * p->Hq * p->Sq))
    return kiln_err_set(e, "E_SHAPE", "sdpa: '%s' must have B*H_q*S_q values", t->name);
  return 0;
}

static int sdpa_forward(const ref_node *n, const sdpa_prob *pp, kiln_err *e);

static int eval_sdpa(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  sdpa_prob p;
  int rc = sdpa_prob_of(n, &p, e) || sdpa_forward(n, &p, e) ? -1 : 0;
  sdpa_prob_free(&p);
  return rc;
}

static int sdpa_forward(const ref_node *n, const sdpa_prob *pp, kiln_err *e) {
  const sdpa_prob p = *pp;
  ref_tensor *o = kiln__ref_out(n, "O"), *stats = kiln__ref_out(n, "Stats");
  ref_tensor *mx = kiln__ref_out(n, "Max"), *sum = kiln__ref_out(n, "Sum_exp");
  int64_t od[4] = {p.B, p.Hq, p.Sq, p.Dv};
  if ((o && kiln__ref_check_dims(o, 4, od, "O", e)) || stats_shaped(stats, &p, e) ||
      stats_shaped(mx, &p, e) || stats_shaped(sum, &p, e))
    return -1;
  double *s = kiln__ref_alloc((size_t)p.Skv, e);
  if (!s) return -1;
  for (int64_t b = 0; b < p.B; b++)
    for (int64_t h = 0; h < p.Hq; h++) {
      const double *vh = p.v->data + (size_t)((b * p.Hv + h / (p.Hq / p.Hv)) * p.Skv * p.Dv);
      for (int64_t i = 0; i < p.Sq; i++) {
        int dead;
        double m = score_row(&p, b, h, i, s, NULL, &dead), z = 0;
        if (!dead) {
          for (int64_t j = 0; j < p.Skv; j++) z += (s[j] = exp(s[j] - m));
          if (p.sink) z += exp(sink_of(&p, h) - m);
        }
        size_t r = (size_t)((b * p.Hq + h) * p.Sq + i);
        double lse = m + log(z); /* -inf for a dead row */
        if (stats) stats->data[r] = p.c.log2_stats ? lse * 1.4426950408889634074 : lse;
        if (mx) mx->data[r] = m;
        if (sum) sum->data[r] = z;
        if (!o) continue;
        double *oi = o->data + r * (size_t)p.Dv;
        for (int64_t d = 0; d < p.Dv; d++) oi[d] = 0;
        for (int64_t j = 0; !dead && j < p.Skv; j++) {
          double pj = s[j] / z;
          for (int64_t d = 0; pj != 0 && d < p.Dv; d++) oi[d] += pj * vh[j * p.Dv + d];
        }
      }
    }
  free(s);
  return 0;
}

/* OPS.md §7.6: P = e^(s - Stats), D = rowsum(dO o O), dS = P (dO V^T - D), back through
 * softcap and the scale; GQA gradients sum over the q heads of a group. */
static int eval_sdpa_bwd(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  sdpa_prob p;
  ref_tensor *o, *dO, *st, *dq, *dk, *dv, *dbias = kiln__ref_out(n, "dBias");
  ref_tensor *dsink = kiln__ref_out(n, "DSINK_TOKEN");
  if (sdpa_prob_of(n, &p, e) || kiln__ref_need_in(n, "o|O", &o, e) ||
      kiln__ref_need_in(n, "dO", &dO, e) || kiln__ref_need_in(n, "stats|Stats", &st, e) ||
      kiln__ref_need_out(n, "dQ", &dq, e) || kiln__ref_need_out(n, "dK", &dk, e) ||
      kiln__ref_need_out(n, "dV", &dv, e))
    return -1;
  int64_t od[4] = {p.B, p.Hq, p.Sq, p.Dv};
  if (kiln__ref_check_dims(o, 4, od, "o", e) || kiln__ref_check_dims(dO, 4, od, "dO", e) ||
      stats_shaped(st, &p, e) || kiln__ref_check_dims(dq, 4, p.q->dims, "dQ", e) ||
      kiln__ref_check_dims(dk, 4, p.k->dims, "dK", e) ||
      kiln__ref_check_dims(dv, 4, p.v->dims, "dV", e))
    return -1;
  if (dbias && (!p.bias || kiln__ref_check_dims(dbias, p.bias->rank, p.bias->dims, "dBias", e)))
    return p.bias ? -1 : kiln_err_set(e, "E_PORT", "sdpa_backward: dBias needs bias");
  if (dsink && (!p.sink || dsink->numel != p.sink->numel))
    return kiln_err_set(e, "E_PORT", "sdpa_backward: DSINK_TOKEN needs sink_token's shape");
  ref_tensor *outs[5] = {dq, dk, dv, dbias, dsink};
  for (int i = 0; i < 5; i++)
    if (outs[i]) memset(outs[i]->data, 0, outs[i]->numel * sizeof(double));
  double *s = kiln__ref_alloc((size_t)p.Skv, e), *raw = s ? kiln__ref_alloc((size_t)p.Skv, e) : NULL;
  if (!raw) return free(s), -1;
  int64_t gk = p.Hq / p.Hk, gv = p.Hq / p.Hv;
  for (int64_t b = 0; b < p.B; b++)
    for (int64_t h = 0; h < p.Hq; h++) {
      size_t koff = (size_t)((b * p.Hk + h / gk) * p.Skv * p.Dqk);
      size_t voff = (size_t)((b * p.Hv + h / gv) * p.Skv * p.Dv);
      for (int64_t i = 0; i < p.Sq; i++) {
        int dead;
        score_row(&p, b, h, i, s, raw, &dead);
        if (dead) continue;
        size_t r = (size_t)((b * p.Hq + h) * p.Sq + i);
        const double *qi = p.q->data + r * (size_t)p.Dqk, *doi = dO->data + r * (size_t)p.Dv;
        const double *oi = o->data + r * (size_t)p.Dv;
        double L = st->data[r], D = 0;
        for (int64_t d = 0; d < p.Dv; d++) D += doi[d] * oi[d];
        if (dsink) dsink->data[dsink->numel == 1 ? 0 : h] -= exp(sink_of(&p, h) - L) * D;
        for (int64_t j = 0; j < p.Skv; j++) {
          double pj = exp(s[j] - L);
          if (pj == 0) continue;
          const double *vj = p.v->data + voff + (size_t)(j * p.Dv);
          double dp = 0;
          for (int64_t d = 0; d < p.Dv; d++) {
            dp += doi[d] * vj[d];
            dv->data[voff + (size_t)(j * p.Dv + d)] += pj * doi[d];
          }
          double ds = pj * (dp - D);
          if (dbias)
            dbias->data[b * p.bstride[0] + h * p.bstride[1] + i * p.bstride[2] +
                        j * p.bstride[3]] += ds;
          if (p.c.softcap > 0) {
            double t = tanh(raw[j] / p.c.softcap);
            ds *= 1 - t * t;
          }
          ds *= p.c.scale;
          const double *kj = p.k->data + koff + (size_t)(j * p.Dqk);
          for (int64_t d = 0; d < p.Dqk; d++) {
            dq->data[r * (size_t)p.Dqk + (size_t)d] += ds * kj[d];
            dk->data[koff + (size_t)(j * p.Dqk + d)] += ds * qi[d];
          }
        }
      }
    }
  free(s);
  free(raw);
  return 0;
}
