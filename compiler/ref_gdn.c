/* kiln reference executor: gdn and gdn_bwd (Gated DeltaNet, OPS.md §8), THD form, the token
 * loop of §8.1 in fp64 and its exact reverse-time derivative (§8.4). States are kept V x K,
 * cuDNN's layout [N, HO, V, K]: with M = S^T of FLA's K x V state, a token does
 *   M' = alpha M;  p = M' k;  u = beta (v - p);  M = M' + u k^T;  o = M (scale q). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ref_impl.h"

static int eval_gdn(const ref_op *op, const ref_node *n, kiln_err *e);
static int eval_gdn_bwd(const ref_op *op, const ref_node *n, kiln_err *e);

static const char *const INPUTS[] = {"q",          "k",           "v",
                                     "g",          "beta",        "cu_seqlens",
                                     "initial_state", "state_indices", "a_log",
                                     "dt_bias",    NULL};
static const char *const OUTPUTS[] = {"O", "final_state", "state_checkpoints", NULL};
static const char *const UNSUPPORTED[] = {"state_checkpoints", NULL};
static const char *const ATTRS[] = {
    "scale", "use_qk_l2norm", "use_beta_sigmoid", "allow_neg_eigval", "safe_gate",
    "gate_domain", "output_final_state", "batch_invariant", "overwrite_initial_state",
    "checkpoint_every_n_tokens", NULL};
/* state_checkpoints only spare a kernel the recomputation; the reference recomputes. */
static const char *const B_INPUTS[] = {
    "q",     "k",     "v",       "g",     "beta", "cu_seqlens", "dO", "state_checkpoints",
    "initial_state", "d_final_state", "a_log", "dt_bias", NULL};
static const char *const B_OUTPUTS[] = {"dQ",    "dK",    "dV",        "dG",
                                        "dBeta", "d_initial_state", "d_a_log", "d_dt_bias",
                                        NULL};
static const char *const B_ATTRS[] = {
    "scale", "use_qk_l2norm", "use_beta_sigmoid", "allow_neg_eigval", "safe_gate",
    "gate_domain", "batch_invariant", "checkpoint_every_n_tokens", NULL};
static const ref_op OPS[] = {
    {"gdn", INPUTS, OUTPUTS, ATTRS, eval_gdn, NULL},
    {"gdn_bwd", B_INPUTS, B_OUTPUTS, B_ATTRS, eval_gdn_bwd, NULL},
};

const ref_op *kiln__ref_gdn_op(const char *name) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
  return NULL;
}

static const double L2_EPS = 1e-6;      /* FLA's epsilon inside the square root */
static const double LINEAR_FLOOR = 1e-10; /* gate_domain linear: alpha floor */

typedef struct {
  double scale;
  int l2, beta_sigmoid, neg_eigval, safe_gate, linear_gate;
} gdn_cfg;

/* The checked operands of either direction. */
typedef struct {
  gdn_cfg c;
  ref_tensor *q, *k, *v, *g, *beta, *cu, *h0, *idx, *alog, *dtb;
  int64_t T, H, HK, HV, HO, K, V, N;
} gdn_prob;

static double sigmoid(double z) {
  return z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
}
static double softplus(double z) { return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)); }

static int read_cfg(const ref_node *n, int64_t K, gdn_cfg *c, kiln_err *e) {
  int overwrite;
  int64_t ckpt;
  const char *domain;
  if (kiln__ref_attr_num(n, "scale", 1.0 / sqrt((double)K), &c->scale, e) ||
      kiln__ref_attr_bool(n, "use_qk_l2norm", 0, &c->l2, e) ||
      kiln__ref_attr_bool(n, "use_beta_sigmoid", 0, &c->beta_sigmoid, e) ||
      kiln__ref_attr_bool(n, "allow_neg_eigval", 0, &c->neg_eigval, e) ||
      kiln__ref_attr_bool(n, "safe_gate", 0, &c->safe_gate, e) ||
      kiln__ref_attr_bool(n, "overwrite_initial_state", 0, &overwrite, e) ||
      kiln__ref_attr_int(n, "checkpoint_every_n_tokens", 0, &ckpt, e) ||
      kiln__ref_attr_str(n, "gate_domain", "log", &domain, e))
    return -1;
  /* overwrite_initial_state moves where the final state lands (into the pool rows), not what
   * it is: O and final_state are the same, and the inputs are never written here */
  (void)overwrite;
  if (ckpt && kiln__ref_out(n, "state_checkpoints"))
    return kiln__ref_unsupported(n, "state checkpoints", e);
  if (c->neg_eigval && !c->beta_sigmoid)
    return kiln_err_set(e, "E_ATTR", "%s: allow_neg_eigval needs use_beta_sigmoid", n->op);
  if (strcasecmp(domain, "linear") == 0) c->linear_gate = 1;
  else if (strcasecmp(domain, "log") == 0) c->linear_gate = 0;
  else return kiln_err_set(e, "E_ATTR", "%s: gate_domain must be log or linear", n->op);
  if (c->linear_gate && c->safe_gate)
    return kiln_err_set(e, "E_ATTR", "%s: gate_domain linear excludes safe_gate", n->op);
  return 0;
}

/* E_SHAPE unless t's dims are want (leading extents of 1 allowed). */
static int want_dims(const ref_tensor *t, int n, const int64_t *want, const char *what,
                     kiln_err *e) {
  int64_t d[4];
  if (kiln__ref_tail_dims(t, n, d, what, e)) return -1;
  if (memcmp(d, want, (size_t)n * sizeof *d) == 0) return 0;
  char a[160], b[160];
  return kiln_err_set(e, "E_SHAPE", "gdn: %s is %s, expected %s", what,
                      kiln__ref_dims_str(t->rank, t->dims, a, sizeof a),
                      kiln__ref_dims_str(n, want, b, sizeof b));
}

static int gdn_prob_of(const ref_node *n, gdn_prob *p, kiln_err *e) {
  memset(p, 0, sizeof *p);
  p->h0 = kiln__ref_in(n, "initial_state");
  p->idx = kiln__ref_in(n, "state_indices");
  p->alog = kiln__ref_in(n, "a_log");
  p->dtb = kiln__ref_in(n, "dt_bias");
  if (kiln__ref_need_in(n, "q", &p->q, e) || kiln__ref_need_in(n, "k", &p->k, e) ||
      kiln__ref_need_in(n, "v", &p->v, e) || kiln__ref_need_in(n, "g", &p->g, e) ||
      kiln__ref_need_in(n, "beta", &p->beta, e) || kiln__ref_need_in(n, "cu_seqlens", &p->cu, e))
    return -1;
  int64_t qd[3], kd[3], vd[3];
  if (kiln__ref_tail_dims(p->q, 3, qd, "q", e) || kiln__ref_tail_dims(p->k, 3, kd, "k", e) ||
      kiln__ref_tail_dims(p->v, 3, vd, "v", e))
    return -1;
  p->T = qd[0], p->H = qd[1], p->K = qd[2], p->HK = kd[1], p->HV = vd[1], p->V = vd[2];
  p->HO = p->H > p->HV ? p->H : p->HV;
  if (kd[0] != p->T || vd[0] != p->T || kd[2] != p->K)
    return kiln_err_set(e, "E_SHAPE", "gdn: q, k, v dims disagree");
  if (p->H < 1 || p->HK < 1 || p->HV < 1 || p->HO % p->H || p->HO % p->HK || p->HO % p->HV)
    return kiln_err_set(e, "E_SHAPE", "gdn: head counts %lld/%lld/%lld do not group",
                        (long long)p->H, (long long)p->HK, (long long)p->HV);
  if (p->cu->numel < 1) return kiln_err_set(e, "E_SHAPE", "gdn: cu_seqlens is empty");
  p->N = (int64_t)p->cu->numel - 1;
  int64_t gd[2] = {p->T, p->HO};
  if (want_dims(p->g, 2, gd, "g", e) || want_dims(p->beta, 2, gd, "beta", e)) return -1;
  if (p->idx && !p->h0)
    return kiln_err_set(e, "E_PORT", "gdn: state_indices needs initial_state");
  if (p->idx && p->idx->numel != (size_t)p->N)
    return kiln_err_set(e, "E_SHAPE", "gdn: state_indices must have N=%lld values",
                        (long long)p->N);
  /* initial_state has N rows, or with state_indices any number of pool rows */
  int64_t rows = p->idx && p->h0->rank == 4 ? p->h0->dims[0] : p->N;
  int64_t hd[4] = {rows, p->HO, p->V, p->K};
  if (p->h0 && want_dims(p->h0, 4, hd, "initial_state", e)) return -1;
  if ((p->alog && p->alog->numel != (size_t)p->HO) || (p->dtb && p->dtb->numel != (size_t)p->HO))
    return kiln_err_set(e, "E_SHAPE", "gdn: a_log and dt_bias must have HO values");
  if (read_cfg(n, p->K, &p->c, e)) return -1;
  if ((p->alog || p->dtb) && !p->c.safe_gate)
    return kiln_err_set(e, "E_PORT", "gdn: a_log / dt_bias need safe_gate");
  for (int64_t i = 0; p->idx && i < p->N; i++) {
    double r = p->idx->data[i];
    if (r != floor(r) || r < 0 || r >= (double)rows)
      return kiln_err_set(e, "E_SHAPE", "gdn: state_indices[%lld] = %g is not a row of "
                          "initial_state", (long long)i, r);
  }
  for (int64_t i = 0; i <= p->N; i++) {
    double x = p->cu->data[i];
    if (x != floor(x) || x < 0 || x > (double)p->T || (i > 0 && x < p->cu->data[i - 1]))
      return kiln_err_set(e, "E_SHAPE", "gdn: cu_seqlens must be non-decreasing in [0, T]");
  }
  return 0;
}

/* The initial state of sequence s, head j (V x K), or NULL for zeros. */
static const double *initial_of(const gdn_prob *p, int64_t s, int64_t j) {
  if (!p->h0) return NULL;
  int64_t row = p->idx ? (int64_t)p->idx->data[s] : s;
  return p->h0->data + (size_t)((row * p->HO + j) * p->V * p->K);
}

/* One token's operands for head j: normalized q (unscaled) and k with their 1/norms, the
 * decay alpha, the write strength beta. */
typedef struct {
  double *q, *k; /* K each */
  double rq, rk, alpha, beta;
} gdn_tok;

static void load_vec(double *dst, const double *src, int64_t len, int l2, double *r) {
  double ss = 0;
  for (int64_t i = 0; i < len; i++) ss += src[i] * src[i];
  *r = l2 ? 1.0 / sqrt(ss + L2_EPS) : 1.0;
  for (int64_t i = 0; i < len; i++) dst[i] = src[i] * *r;
}

static void load_token(const gdn_prob *p, int64_t t, int64_t j, gdn_tok *tk) {
  int64_t qh = j / (p->HO / p->H), kh = j / (p->HO / p->HK);
  load_vec(tk->q, p->q->data + (t * p->H + qh) * p->K, p->K, p->c.l2, &tk->rq);
  load_vec(tk->k, p->k->data + (t * p->HK + kh) * p->K, p->K, p->c.l2, &tk->rk);
  double graw = p->g->data[t * p->HO + j], braw = p->beta->data[t * p->HO + j];
  if (p->c.linear_gate) {
    tk->alpha = graw > LINEAR_FLOOR ? graw : LINEAR_FLOOR;
  } else {
    double ge = graw;
    if (p->c.safe_gate)
      ge = -(p->alog ? exp(p->alog->data[j]) : 1.0) *
           softplus(graw + (p->dtb ? p->dtb->data[j] : 0.0));
    tk->alpha = exp(ge);
  }
  tk->beta = p->c.beta_sigmoid ? (p->c.neg_eigval ? 2.0 : 1.0) * sigmoid(braw) : braw;
}

/* One token forward on M (V x K): fills p_out (V, may be NULL), u_out (V), o (V, may be
 * NULL). */
static void token_forward(const gdn_prob *p, double *M, const gdn_tok *tk, const double *vt,
                          double *p_out, double *u_out, double *o) {
  for (int64_t vi = 0; vi < p->V; vi++) {
    double *row = M + vi * p->K, pred = 0, acc = 0;
    for (int64_t ki = 0; ki < p->K; ki++) pred += (row[ki] *= tk->alpha) * tk->k[ki];
    double u = tk->beta * (vt[vi] - pred);
    for (int64_t ki = 0; ki < p->K; ki++) acc += (row[ki] += u * tk->k[ki]) * tk->q[ki];
    if (p_out) p_out[vi] = pred;
    u_out[vi] = u;
    if (o) o[vi] = p->c.scale * acc;
  }
}

static int eval_gdn(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  gdn_prob p;
  ref_tensor *o, *hT = kiln__ref_out(n, "final_state");
  if (kiln__ref_reject_ports(n, UNSUPPORTED, e) || gdn_prob_of(n, &p, e) ||
      kiln__ref_need_out(n, "O", &o, e))
    return -1;
  int64_t od[3] = {p.T, p.HO, p.V}, sd[4] = {p.N, p.HO, p.V, p.K};
  if (want_dims(o, 3, od, "O", e) || (hT && want_dims(hT, 4, sd, "final_state", e))) return -1;
  size_t VK = (size_t)(p.V * p.K);
  double *buf = kiln__ref_alloc(VK + 2 * (size_t)p.K + (size_t)p.V, e);
  if (!buf) return -1;
  double *M = buf, *u = M + VK;
  gdn_tok tk = {u + p.V, u + p.V + p.K, 0, 0, 0, 0};
  memset(o->data, 0, o->numel * sizeof(double)); /* tokens outside every sequence */
  for (int64_t s = 0; s < p.N; s++)
    for (int64_t j = 0; j < p.HO; j++) {
      const double *init = initial_of(&p, s, j);
      for (size_t i = 0; i < VK; i++) M[i] = init ? init[i] : 0.0;
      int64_t vh = j / (p.HO / p.HV);
      for (int64_t t = (int64_t)p.cu->data[s]; t < (int64_t)p.cu->data[s + 1]; t++) {
        load_token(&p, t, j, &tk);
        token_forward(&p, M, &tk, p.v->data + (t * p.HV + vh) * p.V, NULL, u,
                      o->data + (t * p.HO + j) * p.V);
      }
      if (hT) memcpy(hT->data + (size_t)(s * p.HO + j) * VK, M, VK * sizeof *M);
    }
  free(buf);
  return 0;
}

/* Through x_hat = x r, r = 1/sqrt(sum x^2 + eps): dx = r (dx_hat - x_hat <x_hat, dx_hat>). */
static void l2_backward(const double *xhat, double r, const double *dxhat, int64_t len, int l2,
                        double *dx_acc) {
  double dot = 0;
  for (int64_t i = 0; i < len; i++) dot += xhat[i] * dxhat[i];
  for (int64_t i = 0; i < len; i++)
    dx_acc[i] += l2 ? r * (dxhat[i] - xhat[i] * dot) : dxhat[i];
}

typedef struct {
  ref_tensor *dq, *dk, *dv, *dg, *dbeta, *dh0, *dalog, *ddtb, *dO, *dhT;
} gdn_grads;

static int grads_of(const ref_node *n, const gdn_prob *p, gdn_grads *d, kiln_err *e) {
  memset(d, 0, sizeof *d);
  d->dh0 = kiln__ref_out(n, "d_initial_state");
  d->dalog = kiln__ref_out(n, "d_a_log");
  d->ddtb = kiln__ref_out(n, "d_dt_bias");
  d->dhT = kiln__ref_in(n, "d_final_state");
  if (kiln__ref_need_in(n, "dO", &d->dO, e) || kiln__ref_need_out(n, "dQ", &d->dq, e) ||
      kiln__ref_need_out(n, "dK", &d->dk, e) || kiln__ref_need_out(n, "dV", &d->dv, e) ||
      kiln__ref_need_out(n, "dG", &d->dg, e) || kiln__ref_need_out(n, "dBeta", &d->dbeta, e))
    return -1;
  int64_t od[3] = {p->T, p->HO, p->V}, sd[4] = {p->N, p->HO, p->V, p->K};
  if (want_dims(d->dO, 3, od, "dO", e) || (d->dhT && want_dims(d->dhT, 4, sd, "d_final_state", e)))
    return -1;
  if (p->idx) return kiln__ref_unsupported(n, "state_indices", e);
  ref_tensor *pairs[7][2] = {{d->dq, p->q},     {d->dk, p->k},      {d->dv, p->v},
                             {d->dg, p->g},     {d->dbeta, p->beta}, {d->dh0, p->h0},
                             {d->dalog, p->alog}};
  for (int i = 0; i < 7; i++)
    if (pairs[i][0] && (!pairs[i][1] || pairs[i][0]->numel != pairs[i][1]->numel))
      return kiln_err_set(e, "E_SHAPE", "gdn_bwd: '%s' must have the shape of its input",
                          pairs[i][0]->name);
  if (d->ddtb && (!p->dtb || d->ddtb->numel != p->dtb->numel))
    return kiln_err_set(e, "E_SHAPE", "gdn_bwd: d_dt_bias must have dt_bias's shape");
  ref_tensor *all[8] = {d->dq, d->dk, d->dv, d->dg, d->dbeta, d->dh0, d->dalog, d->ddtb};
  for (int i = 0; i < 8; i++)
    if (all[i]) memset(all[i]->data, 0, all[i]->numel * sizeof(double));
  return 0;
}

/* dalpha = <dM', M_prev> (M' = alpha M_prev) into the raw gate's gradient. */
static void gate_backward(const gdn_prob *p, const gdn_grads *d, int64_t t, int64_t j,
                          double dalpha) {
  double graw = p->g->data[t * p->HO + j];
  if (p->c.linear_gate) {
    d->dg->data[t * p->HO + j] += graw > LINEAR_FLOOR ? dalpha : 0.0;
    return;
  }
  double alpha_amp = p->alog ? exp(p->alog->data[j]) : 1.0;
  double z = graw + (p->dtb ? p->dtb->data[j] : 0.0);
  double ge = p->c.safe_gate ? -alpha_amp * softplus(z) : graw;
  double dge = dalpha * exp(ge); /* d alpha / d g_eff = alpha */
  if (!p->c.safe_gate) {
    d->dg->data[t * p->HO + j] += dge;
    return;
  }
  double dz = dge * -alpha_amp * sigmoid(z);
  d->dg->data[t * p->HO + j] += dz;
  if (d->ddtb) d->ddtb->data[j] += dz;
  if (d->dalog) d->dalog->data[j] += dge * ge; /* d g_eff / d a_log = g_eff */
}

static int eval_gdn_bwd(const ref_op *op, const ref_node *n, kiln_err *e) {
  (void)op;
  gdn_prob p;
  gdn_grads d;
  if (gdn_prob_of(n, &p, e) || grads_of(n, &p, &d, e)) return -1;
  int64_t K = p.K, V = p.V, maxlen = 0;
  for (int64_t s = 0; s < p.N; s++)
    if (p.cu->data[s + 1] - p.cu->data[s] > (double)maxlen)
      maxlen = (int64_t)(p.cu->data[s + 1] - p.cu->data[s]);
  size_t VK = (size_t)(V * K);
  /* states M_0..M_L, then per token q, k, p, u (for the reverse sweep), then scratch */
  size_t per_tok = (size_t)(2 * K + 2 * V + 2);
  size_t total = (size_t)(maxlen + 1) * VK + (size_t)maxlen * per_tok + VK +
                 (size_t)(3 * K + 2 * V);
  double *buf = kiln__ref_alloc(total, e);
  if (!buf) return -1;
  double *Ms = buf, *toks = Ms + (size_t)(maxlen + 1) * VK, *dM = toks + (size_t)maxlen * per_tok;
  double *dqh = dM + VK, *dkh = dqh + K, *du = dkh + K, *dp = du + V;
  double *dkx = dp + V;
  for (int64_t s = 0; s < p.N; s++)
    for (int64_t j = 0; j < p.HO; j++) {
      int64_t t0 = (int64_t)p.cu->data[s], L = (int64_t)p.cu->data[s + 1] - t0;
      int64_t qh = j / (p.HO / p.H), kh = j / (p.HO / p.HK), vh = j / (p.HO / p.HV);
      const double *init = initial_of(&p, s, j);
      for (size_t i = 0; i < VK; i++) Ms[i] = init ? init[i] : 0.0;
      for (int64_t l = 0; l < L; l++) { /* forward, keeping every state */
        double *tb = toks + (size_t)l * per_tok;
        gdn_tok tk = {tb, tb + K, 0, 0, 0, 0};
        load_token(&p, t0 + l, j, &tk);
        tb[2 * K + 2 * V] = tk.rq, tb[2 * K + 2 * V + 1] = tk.rk;
        memcpy(Ms + (size_t)(l + 1) * VK, Ms + (size_t)l * VK, VK * sizeof *Ms);
        token_forward(&p, Ms + (size_t)(l + 1) * VK, &tk,
                      p.v->data + ((t0 + l) * p.HV + vh) * V, tb + 2 * K, tb + 2 * K + V, NULL);
      }
      const double *dfin = d.dhT ? d.dhT->data + (size_t)(s * p.HO + j) * VK : NULL;
      for (size_t i = 0; i < VK; i++) dM[i] = dfin ? dfin[i] : 0.0;
      for (int64_t l = L - 1; l >= 0; l--) {
        int64_t t = t0 + l;
        double *tb = toks + (size_t)l * per_tok, *qn = tb, *kn = tb + K, *pv = tb + 2 * K;
        double *uv = pv + V, rq = tb[2 * K + 2 * V], rk = tb[2 * K + 2 * V + 1];
        const double *Mt = Ms + (size_t)(l + 1) * VK, *Mprev = Ms + (size_t)l * VK;
        const double *dot = d.dO->data + (t * p.HO + j) * V, *vt = p.v->data + (t * p.HV + vh) * V;
        gdn_tok tk = {qn, kn, rq, rk, 0, 0};
        load_token(&p, t, j, &tk); /* alpha, beta (q, k reloaded identically) */
        double sc = p.c.scale;
        for (int64_t ki = 0; ki < K; ki++) dqh[ki] = dkh[ki] = 0;
        for (int64_t vi = 0; vi < V; vi++) /* dM += do (scale q)^T; dq = scale M^T do */
          for (int64_t ki = 0; ki < K; ki++) {
            dM[vi * K + ki] += dot[vi] * sc * qn[ki];
            dqh[ki] += sc * Mt[vi * K + ki] * dot[vi];
          }
        for (int64_t vi = 0; vi < V; vi++) {
          du[vi] = 0;
          for (int64_t ki = 0; ki < K; ki++) {
            du[vi] += dM[vi * K + ki] * kn[ki];
            dkh[ki] += dM[vi * K + ki] * uv[vi];
          }
          d.dv->data[(t * p.HV + vh) * V + vi] += tk.beta * du[vi];
          dp[vi] = -tk.beta * du[vi];
        }
        double dbeta = 0;
        for (int64_t vi = 0; vi < V; vi++) dbeta += du[vi] * (vt[vi] - pv[vi]);
        double braw = p.beta->data[t * p.HO + j];
        if (p.c.beta_sigmoid) {
          double sg = sigmoid(braw);
          dbeta *= (p.c.neg_eigval ? 2.0 : 1.0) * sg * (1 - sg);
        }
        d.dbeta->data[t * p.HO + j] += dbeta;
        double dalpha = 0;
        for (int64_t vi = 0; vi < V; vi++) /* dM' = dM + dp k^T; dk += M'^T dp */
          for (int64_t ki = 0; ki < K; ki++) {
            double mp = tk.alpha * Mprev[vi * K + ki];
            dM[vi * K + ki] += dp[vi] * kn[ki];
            dkh[ki] += mp * dp[vi];
            dalpha += dM[vi * K + ki] * Mprev[vi * K + ki];
          }
        gate_backward(&p, &d, t, j, dalpha);
        for (size_t i = 0; i < VK; i++) dM[i] *= tk.alpha;
        l2_backward(qn, rq, dqh, K, p.c.l2, d.dq->data + (t * p.H + qh) * K);
        memset(dkx, 0, (size_t)K * sizeof *dkx);
        l2_backward(kn, rk, dkh, K, p.c.l2, dkx);
        for (int64_t ki = 0; ki < K; ki++) d.dk->data[(t * p.HK + kh) * K + ki] += dkx[ki];
      }
      if (d.dh0) {
        int64_t row = s; /* state_indices is rejected for the backward */
        double *dst = d.dh0->data + (size_t)(row * p.HO + j) * VK;
        for (size_t i = 0; i < VK; i++) dst[i] += dM[i];
      }
    }
  free(buf);
  return 0;
}
