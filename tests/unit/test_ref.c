/* Unit tests of the reference executor (compiler/ref*.c) against hand-computed values.
 * Graph JSON is written with single quotes for readability; run() turns them into double
 * quotes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "tap.h"

#define GRAPH(tensors, nodes)                                                    \
  "{'schema':'kiln.graph','version':1,'name':'t','io_dtype':'fp32',"            \
  "'intermediate_dtype':'fp32','compute_dtype':'fp32','dims':{'T':{'kind':'dynamic'}}," \
  "'tensors':[" tensors "],'nodes':[" nodes "]}"
#define TEN(uid, name, dtype, dims, role)                                               \
  "{'uid':" #uid ",'name':'" name "','dtype':'" dtype "','dims':" dims ",'role':'" role \
  "'}"
#define CONST(uid, name, value) \
  "{'uid':" #uid ",'name':'" name "','dtype':'fp32','dims':[1],'role':'constant','value':" \
  value "}"
#define NODE(op, ins, outs, attrs) \
  "{'op':'" op "','name':'" op "','inputs':{" ins "},'outputs':{" outs "},'attrs':{" attrs "}}"

static kiln_err err;

static int run_dims(const char *sq, const kiln_ref_dim *dims, int nd, kiln_ref_buffer *b,
                    int nb) {
  char *j = strdup(sq);
  for (char *p = j; *p; p++)
    if (*p == '\'') *p = '"';
  kiln_err_clear(&err);
  int rc = kiln_ref_eval(j, dims, nd, b, nb, &err);
  if (rc) DIAG("kiln_ref_eval: %s: %s", err.code ? err.code : "?", err.msg);
  free(j);
  return rc;
}
static int run(const char *sq, kiln_ref_buffer *b, int nb) { return run_dims(sq, NULL, 0, b, nb); }

/* Expects failure with code. */
static int fails_with(const char *sq, kiln_ref_buffer *b, int nb, const char *code) {
  char *j = strdup(sq);
  for (char *p = j; *p; p++)
    if (*p == '\'') *p = '"';
  kiln_err_clear(&err);
  int rc = kiln_ref_eval(j, NULL, 0, b, nb, &err);
  free(j);
  if (rc == 0) return DIAG("expected %s, got success", code), 0;
  if (!err.code || strcmp(err.code, code) != 0)
    return DIAG("expected %s, got %s: %s", code, err.code ? err.code : "?", err.msg), 0;
  return 1;
}

static int close_to(const double *got, const double *want, size_t n, double tol) {
  for (size_t i = 0; i < n; i++) {
    int ok = (isnan(want[i]) && isnan(got[i])) || got[i] == want[i] ||
             fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i]));
    if (!ok) return DIAG("[%zu] got %.17g want %.17g", i, got[i], want[i]), 0;
  }
  return 1;
}

#define BUF(uid, arr) {uid, arr, sizeof(arr) / sizeof((arr)[0])}

static void test_pointwise(void) {
  double a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30}, y[6];
  kiln_ref_buffer bufs[] = {BUF(1, a), BUF(2, b), BUF(3, y)};
  int rc = run(GRAPH(TEN(1, "a", "fp32", "[2,3]", "input") "," TEN(2, "b", "fp32", "[3]", "input")
                     "," TEN(3, "y", "fp32", "[2,3]", "output"),
                     NODE("add", "'a':1,'b':2", "'OUT_0':3", "")),
               bufs, 3);
  double want[6] = {11, 22, 33, 14, 25, 36};
  OK(rc == 0 && close_to(y, want, 6, 0), "add [2,3] + [3] broadcasts");

  double x1[1] = {1.0}, g1[1], g2[1];
  kiln_ref_buffer gb[] = {BUF(1, x1), BUF(2, g1), BUF(3, g2)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[1]", "input") "," TEN(2, "g", "fp64", "[1]", "output") ","
                 TEN(3, "h", "fp32", "[1]", "output"),
                 NODE("gelu", "'input':1", "'OUT_0':2", "") ","
                 NODE("gelu", "'input':1", "'OUT_0':3", "")),
           gb, 3);
  OK(rc == 0 && fabs(g1[0] - 0.8413447460685429) < 1e-15, "gelu(1.0) = 0.8413447460685429");
  OK(rc == 0 && g2[0] == (double)(float)0.8413447460685429, "gelu to fp32 output rounds via float");

  double rx[5] = {-2, -0.5, 0.5, 3, 10}, ry[5], rz[5], rd[5], ones[5] = {1, 1, 1, 1, 1};
  kiln_ref_buffer rb[] = {BUF(1, rx), BUF(2, ry), BUF(3, rz), BUF(4, ones), BUF(5, rd)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[5]", "input") "," TEN(2, "y", "fp64", "[5]", "output") ","
                 TEN(3, "z", "fp64", "[5]", "output") "," TEN(4, "dy", "fp32", "[5]", "input") ","
                 TEN(5, "dx", "fp64", "[5]", "output"),
                 NODE("relu", "'input':1", "'OUT_0':2",
                      "'lower_clip':-1,'upper_clip':4,'negative_slope':0.1") ","
                 NODE("relu", "'input':1", "'OUT_0':3", "") ","
                 NODE("relu_backward", "'loss':4,'input':1", "'OUT_0':5",
                      "'lower_clip':-1,'upper_clip':4,'negative_slope':0.1")),
           rb, 5);
  double rw[5] = {-1.1, -0.5, 0.5, 3, 4}, rw0[5] = {0, 0, 0.5, 3, 10}, rwd[5] = {0.1, 1, 1, 1, 0};
  OK(rc == 0 && close_to(ry, rw, 5, 1e-15), "relu with lower_clip -1, upper_clip 4, slope 0.1");
  OK(rc == 0 && close_to(rz, rw0, 5, 0), "relu defaults");
  OK(rc == 0 && close_to(rd, rwd, 5, 0), "relu_backward with clips and slope");

  double ca[3] = {1, 5, 3}, cb[3] = {4, 2, 3}, cm[3], cs[3];
  kiln_ref_buffer cbf[] = {BUF(1, ca), BUF(2, cb), BUF(4, cm), BUF(5, cs)};
  rc = run(GRAPH(TEN(1, "a", "fp32", "[3]", "input") "," TEN(2, "b", "fp32", "[3]", "input") ","
                 TEN(3, "gt", "bool", "[3]", "virtual") "," TEN(4, "ge", "bool", "[3]", "output")
                 "," TEN(5, "sel", "fp32", "[3]", "output"),
                 NODE("cmp_gt", "'input':1,'comparison':2", "'OUT_0':3", "") ","
                 NODE("cmp_ge", "'input':1,'comparison':2", "'OUT_0':4", "") ","
                 NODE("binary_select", "'input0':1,'input1':2,'mask':3", "'OUT_0':5", "")),
           cbf, 4);
  double wm[3] = {0, 1, 1}, wsel[3] = {4, 5, 3};
  OK(rc == 0 && close_to(cm, wm, 3, 0), "cmp_ge gives 0/1");
  OK(rc == 0 && close_to(cs, wsel, 3, 0), "binary_select(a, b, cmp_gt(a, b))");

  /* a grab bag of unary/binary modes vs libm formulas */
  double u[2] = {0.5, -1.25}, v[2] = {2.0, 3.0}, o[12][2];
  kiln_ref_buffer ub[14] = {BUF(1, u), BUF(2, v)};
  for (int i = 0; i < 12; i++) ub[2 + i] = (kiln_ref_buffer){10 + i, o[i], 2};
#define OUT64(uid) "," TEN(uid, "o" #uid, "fp64", "[2]", "output")
  rc = run(GRAPH(TEN(1, "u", "fp64", "[2]", "input") "," TEN(2, "v", "fp64", "[2]", "input")
                 OUT64(10) OUT64(11) OUT64(12) OUT64(13) OUT64(14) OUT64(15) OUT64(16) OUT64(17)
                 OUT64(18) OUT64(19) OUT64(20) OUT64(21),
                 NODE("sigmoid", "'input':1", "'OUT_0':10", "") ","
                 NODE("swish", "'input':1", "'OUT_0':11", "'swish_beta':2") ","
                 NODE("softplus", "'input':1", "'OUT_0':12", "") ","
                 NODE("elu", "'input':1", "'OUT_0':13", "'elu_alpha':0.5") ","
                 NODE("gelu_approx_tanh", "'input':1", "'OUT_0':14", "") ","
                 NODE("pow", "'input0':2,'input1':1", "'OUT_0':15", "") ","
                 NODE("mod", "'input0':1,'input1':2", "'OUT_0':16", "") ","
                 NODE("add_square", "'a':1,'b':2", "'OUT_0':17", "") ","
                 NODE("tanh_backward", "'loss':2,'input':1", "'OUT_0':18", "") ","
                 NODE("atan2", "'a':1,'b':2", "'OUT_0':19", "") ","
                 NODE("gen_index", "'input':1", "'OUT_0':20", "'axis':0") ","
                 NODE("logical_not", "'input':1", "'OUT_0':21", "")),
           ub, 14);
  int good = rc == 0;
  for (int i = 0; good && i < 2; i++) {
    double x = u[i], s = 1 / (1 + exp(-x)), t = tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x));
    double w[12] = {s, x / (1 + exp(-2 * x)), log(1 + exp(x)), x > 0 ? x : 0.5 * (exp(x) - 1),
                    0.5 * x * (1 + t), pow(v[i], x), fmod(x, v[i]), x + v[i] * v[i],
                    v[i] * (1 - tanh(x) * tanh(x)), atan2(x, v[i]), (double)i, 0};
    for (int k = 0; k < 12; k++) good = good && close_to(&o[k][i], &w[k], 1, 1e-14);
  }
  OK(good, "sigmoid swish softplus elu gelu_approx_tanh pow mod add_square tanh_backward "
     "atan2 gen_index logical_not");
}

static void test_reduction(void) {
  double x[6] = {1, -2, 3, 4, 5, -6}, s0[3], s1[2], all[1], mx[2], avg[3], n2[1], am[1], mz[1];
  kiln_ref_buffer b[] = {BUF(1, x), BUF(2, s0), BUF(3, s1), BUF(4, all), BUF(5, mx),
                         BUF(6, avg), BUF(7, n2), BUF(8, am), BUF(9, mz)};
  double z[6] = {0, 2, 0, 3, 1, 0};
  int rc = run(GRAPH(TEN(1, "x", "fp32", "[2,3]", "input") ","
                     TEN(2, "s0", "fp32", "[1,3]", "output") "," TEN(3, "s1", "fp32", "[2,1]", "output")
                     "," TEN(4, "all", "fp32", "[1,1]", "output") ","
                     TEN(5, "mx", "fp32", "[2,1]", "output") "," TEN(6, "avg", "fp64", "[1,3]", "output")
                     "," TEN(7, "n2", "fp64", "[1,1]", "output") ","
                     TEN(8, "am", "fp32", "[1,1]", "output") "," TEN(9, "mz", "fp32", "[1,1]", "output"),
                     NODE("reduction", "'input':1", "'Y':2", "'mode':'add','dims':[1,3]") ","
                     NODE("reduction", "'X':1", "'Y':3", "'mode':'add'") ","
                     NODE("reduction", "'X':1", "'Y':4", "'mode':'add'") ","
                     NODE("reduction", "'X':1", "'Y':5", "'mode':'max'") ","
                     NODE("reduction", "'X':1", "'Y':6", "'mode':'avg'") ","
                     NODE("reduction", "'X':1", "'Y':7", "'mode':'norm2'") ","
                     NODE("reduction", "'X':1", "'Y':8", "'mode':'amax'") ","
                     NODE("reduction", "'X':1", "'Y':9", "'mode':'mul'")),
               b, 9);
  double w0[3] = {5, 3, -3}, w1[2] = {2, 3}, wmx[2] = {3, 5}, wavg[3] = {2.5, 1.5, -1.5};
  OK(rc == 0 && close_to(s0, w0, 3, 0), "reduction add over axis 0");
  OK(rc == 0 && close_to(s1, w1, 2, 0), "reduction add over axis 1");
  OK(rc == 0 && all[0] == 5, "reduction add over all axes");
  OK(rc == 0 && close_to(mx, wmx, 2, 0), "reduction max over axis 1");
  OK(rc == 0 && close_to(avg, wavg, 3, 0), "reduction avg over axis 0");
  OK(rc == 0 && fabs(n2[0] - sqrt(91.0)) < 1e-15, "reduction norm2 = sqrt(91)");
  OK(rc == 0 && am[0] == 6, "reduction amax = 6");
  OK(rc == 0 && mz[0] == 720, "reduction mul = 720");
  kiln_ref_buffer bz[] = {BUF(1, z), BUF(2, mz)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[2,3]", "input") "," TEN(2, "y", "fp32", "[1,1]", "output"),
                 NODE("reduction", "'X':1", "'Y':2", "'mode':'mul_no_zeros'")),
           bz, 2);
  OK(rc == 0 && mz[0] == 6, "reduction mul_no_zeros skips zeros");
}

static void test_norms(void) {
  double x[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, y[4], iv[1];
  kiln_ref_buffer b[] = {BUF(1, x), BUF(2, g), BUF(3, y), BUF(4, iv)};
  int rc = run(GRAPH(TEN(1, "x", "fp32", "[1,4]", "input") "," TEN(2, "g", "fp32", "[1,4]", "input")
                     "," TEN(3, "y", "fp64", "[1,4]", "output") ","
                     TEN(4, "iv", "fp64", "[1,1]", "output"),
                     NODE("rmsnorm", "'input':1,'scale':2", "'Y':3,'INV_VARIANCE':4",
                          "'phase':'training','epsilon':0")),
               b, 4);
  double r = 1 / sqrt(7.5), wy[4] = {1 * r, 2 * r, 3 * r, 4 * r};
  OK(rc == 0 && close_to(y, wy, 4, 1e-15), "rmsnorm [1,2,3,4] = x / sqrt(7.5)");
  OK(rc == 0 && close_to(iv, &r, 1, 1e-15), "rmsnorm INV_VARIANCE = 1/sqrt(7.5)");

  /* layernorm: mean 2.5, var 1.25, eps 0.75 (port) -> r = 1/sqrt(2) */
  double lg[4] = {1, 2, 1, 2}, lb[4] = {0, 0, 1, 1}, ly[4], lm[1], li[1];
  kiln_ref_buffer lbf[] = {BUF(1, x), BUF(2, lg), BUF(3, lb), BUF(5, ly), BUF(6, lm), BUF(7, li)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[1,4]", "input") "," TEN(2, "g", "fp32", "[1,4]", "input")
                 "," TEN(3, "b", "fp32", "[1,4]", "input") "," CONST(4, "eps", "0.75") ","
                 TEN(5, "y", "fp64", "[1,4]", "output") "," TEN(6, "mean", "fp32", "[1,1]", "output")
                 "," TEN(7, "iv", "fp64", "[1,1]", "output"),
                 NODE("layernorm", "'input':1,'scale':2,'bias':3,'epsilon':4",
                      "'Y':5,'MEAN':6,'INV_VARIANCE':7", "'phase':'training'")),
           lbf, 6);
  double s2 = sqrt(2.0);
  double lw[4] = {-1.5 / s2, 2 * -0.5 / s2, 0.5 / s2 + 1, 2 * 1.5 / s2 + 1}, li_w = 1 / s2;
  OK(rc == 0 && close_to(ly, lw, 4, 1e-15), "layernorm y = g (x - 2.5)/sqrt(1.25 + 0.75) + b");
  OK(rc == 0 && lm[0] == 2.5 && close_to(li, &li_w, 1, 1e-15), "layernorm MEAN, INV_VARIANCE");

  /* two rows, normalized over axis 1 only (scale [1,2]) */
  double x2[4] = {1, 3, 10, 20}, g2[2] = {1, 1}, y2[4];
  kiln_ref_buffer b2[] = {BUF(1, x2), BUF(2, g2), BUF(3, y2)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[2,2]", "input") "," TEN(2, "g", "fp32", "[1,2]", "input")
                 "," TEN(3, "y", "fp64", "[2,2]", "output"),
                 NODE("rmsnorm", "'input':1,'scale':2", "'Y':3",
                      "'phase':'inference','epsilon':0")),
           b2, 3);
  double w2[4] = {1 / sqrt(5), 3 / sqrt(5), 10 / sqrt(250), 20 / sqrt(250)};
  OK(rc == 0 && close_to(y2, w2, 4, 1e-15), "rmsnorm per row of [2,2]");

  /* rmsnorm_backward: one row x = [1,2,3,4], r = 1/sqrt(7.5), scale 1, dy = [1,0,0,0]:
   * xhat = x r, g = dy; dx = r (g - xhat <g xhat>), <g xhat> = xhat_0 / 4 = r/4 */
  double dy[4] = {1, 0, 0, 0}, dx[4], dg[4];
  kiln_ref_buffer bb[] = {BUF(1, dy), BUF(2, x), BUF(3, g), {4, &r, 1}, BUF(5, dx), BUF(6, dg)};
  rc = run(GRAPH(TEN(1, "dy", "fp64", "[1,4]", "input") "," TEN(2, "x", "fp64", "[1,4]", "input")
                 "," TEN(3, "g", "fp64", "[1,4]", "input") "," TEN(4, "iv", "fp64", "[1,1]", "input")
                 "," TEN(5, "dx", "fp64", "[1,4]", "output") ","
                 TEN(6, "dg", "fp64", "[1,4]", "output"),
                 NODE("rmsnorm_backward", "'grad':1,'input':2,'scale':3,'inv_variance':4",
                      "'DX':5,'DSCALE':6", "")),
           bb, 6);
  double wdx[4], wdg[4] = {r, 0, 0, 0};
  for (int i = 0; i < 4; i++) wdx[i] = r * ((i == 0) - x[i] * r * (r / 4));
  OK(rc == 0 && close_to(dx, wdx, 4, 1e-14), "rmsnorm_backward DX");
  OK(rc == 0 && close_to(dg, wdg, 4, 1e-15), "rmsnorm_backward DSCALE = dy xhat");

  /* layernorm_backward, same row: mean 2.5, r = 1/sqrt(1.25); dy = [1,0,0,0], scale 1:
   * dx = r (g - <g> - xhat <g xhat>), <g> = 1/4, <g xhat> = xhat_0/4 */
  double mu = 2.5, rl = 1 / sqrt(1.25), ldx[4], ldg[4], ldb[4];
  kiln_ref_buffer lb2[] = {BUF(1, dy), BUF(2, x), BUF(3, g), {4, &mu, 1}, {5, &rl, 1},
                           BUF(6, ldx), BUF(7, ldg), BUF(8, ldb)};
  rc = run(GRAPH(TEN(1, "dy", "fp64", "[1,4]", "input") "," TEN(2, "x", "fp64", "[1,4]", "input")
                 "," TEN(3, "g", "fp64", "[1,4]", "input") "," TEN(4, "m", "fp64", "[1,1]", "input")
                 "," TEN(5, "iv", "fp64", "[1,1]", "input") ","
                 TEN(6, "dx", "fp64", "[1,4]", "output") "," TEN(7, "dg", "fp64", "[1,4]", "output")
                 "," TEN(8, "db", "fp64", "[1,4]", "output"),
                 NODE("layernorm_backward",
                      "'grad':1,'input':2,'scale':3,'mean':4,'inv_variance':5",
                      "'DX':6,'DSCALE':7,'DBIAS':8", "")),
           lb2, 8);
  double x0h = (1 - 2.5) * rl, lwdx[4], lwdg[4] = {x0h, 0, 0, 0}, lwdb[4] = {1, 0, 0, 0};
  for (int i = 0; i < 4; i++) lwdx[i] = rl * ((i == 0) - 0.25 - (x[i] - 2.5) * rl * x0h / 4);
  OK(rc == 0 && close_to(ldx, lwdx, 4, 1e-14), "layernorm_backward DX");
  OK(rc == 0 && close_to(ldg, lwdg, 4, 1e-15) && close_to(ldb, lwdb, 4, 0),
     "layernorm_backward DSCALE, DBIAS");
}

static void test_softmax(void) {
  double x[3] = {1, 2, 3}, y[3], ly[3], st[1];
  kiln_ref_buffer b[] = {BUF(1, x), BUF(2, y), BUF(3, ly), BUF(4, st)};
  int rc = run(GRAPH(TEN(1, "x", "fp32", "[1,3]", "input") "," TEN(2, "y", "fp64", "[1,3]", "output")
                     "," TEN(3, "ly", "fp64", "[1,3]", "output") ","
                     TEN(4, "st", "fp64", "[1,1]", "output"),
                     NODE("softmax", "'P':1", "'S':2,'Stats':4", "'generate_stats':true") ","
                     NODE("log_softmax", "'input':1", "'OUT_0':3", "'axis':-1")),
               b, 4);
  double z = exp(1) + exp(2) + exp(3), wy[3] = {exp(1) / z, exp(2) / z, exp(3) / z};
  double wl[3] = {1 - log(z), 2 - log(z), 3 - log(z)}, lz = log(z);
  OK(rc == 0 && close_to(y, wy, 3, 1e-15), "softmax [1,2,3]");
  OK(rc == 0 && close_to(ly, wl, 3, 1e-15), "log_softmax [1,2,3]");
  OK(rc == 0 && close_to(st, &lz, 1, 1e-15), "softmax Stats = log sum exp");

  double xc[4] = {0, 5, 0, 5}, yc[4]; /* [2,2] over axis 0: columns (0,0) and (5,5) */
  kiln_ref_buffer bc[] = {BUF(1, xc), BUF(2, yc)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[2,2]", "input") "," TEN(2, "y", "fp64", "[2,2]", "output"),
                 NODE("softmax", "'input':1", "'OUT_0':2", "'axis':0")),
           bc, 2);
  double wc[4] = {0.5, 0.5, 0.5, 0.5};
  OK(rc == 0 && close_to(yc, wc, 4, 1e-15), "softmax over axis 0");

  double dy[3] = {1, 0, 0}, dx[3], ones[3] = {1, 1, 1}, ldx[3];
  kiln_ref_buffer bb[] = {BUF(1, dy), BUF(2, wy), BUF(3, dx), BUF(4, ones), BUF(5, wl),
                          BUF(6, ldx)};
  rc = run(GRAPH(TEN(1, "dy", "fp64", "[3]", "input") "," TEN(2, "y", "fp64", "[3]", "input") ","
                 TEN(3, "dx", "fp64", "[3]", "output") "," TEN(4, "dl", "fp64", "[3]", "input") ","
                 TEN(5, "l", "fp64", "[3]", "input") "," TEN(6, "ldx", "fp64", "[3]", "output"),
                 NODE("softmax_backward", "'grad':1,'output':2", "'DX':3", "") ","
                 NODE("log_softmax_backward", "'grad':4,'output':5", "'OUT_0':6", "")),
           bb, 6);
  double wdx[3], wldx[3];
  for (int j = 0; j < 3; j++) {
    wdx[j] = wy[j] * ((j == 0) - wy[0]);
    wldx[j] = 1 - 3 * wy[j];
  }
  OK(rc == 0 && close_to(dx, wdx, 3, 1e-15), "softmax_backward: y (dy - <dy, y>)");
  OK(rc == 0 && close_to(ldx, wldx, 3, 1e-14), "log_softmax_backward: dy - e^l sum dy");
}

static void test_matmul(void) {
  double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12}, c[4];
  kiln_ref_buffer bf[] = {BUF(1, a), BUF(2, b), BUF(3, c)};
  int rc = run(GRAPH(TEN(1, "A", "fp32", "[2,3]", "input") "," TEN(2, "B", "fp32", "[3,2]", "input")
                     "," TEN(3, "C", "fp32", "[2,2]", "output"),
                     NODE("matmul", "'A':1,'B':2", "'C':3", "")),
               bf, 3);
  double w[4] = {58, 64, 139, 154};
  OK(rc == 0 && close_to(c, w, 4, 0), "matmul 2x3 @ 3x2");
  double a2[12] = {1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0}, c2[8];
  kiln_ref_buffer bf2[] = {BUF(1, a2), BUF(2, b), BUF(3, c2)};
  rc = run(GRAPH(TEN(1, "A", "fp32", "[2,2,3]", "input") "," TEN(2, "B", "fp32", "[1,3,2]", "input")
                 "," TEN(3, "C", "fp32", "[2,2,2]", "output"),
                 NODE("matmul", "'A':1,'B':2", "'C':3", "")),
           bf2, 3);
  double w2[8] = {58, 64, 139, 154, 7, 8, 9, 10};
  OK(rc == 0 && close_to(c2, w2, 8, 0), "matmul batch broadcast [2,2,3] @ [1,3,2]");
  /* moe_grouped_matmul: 5 tokens, 3 experts starting at rows 1, 3, 3 (out of order: 2 -> 3,
   * the running maximum), so row 0 is 0, rows 1-2 expert 0, expert 1 empty, rows 3-4 expert 2 */
  double x[10] = {1, 1, 1, 2, 2, 1, 3, 0, 0, 3}, wt[12] = {1, 0, 0, 1, 2, 0, 0, 2, 0, 1, 1, 0}, off[3] = {1, 3, 2}, y[10];
  kiln_ref_buffer bg[] = {BUF(1, x), BUF(2, wt), BUF(3, off), BUF(4, y)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[5,2]", "input") "," TEN(2, "w", "fp32", "[3,2,2]", "input") ","
                 TEN(3, "off", "int32", "[3]", "input") "," TEN(4, "y", "fp32", "[5,2]", "output"),
                 NODE("moe_grouped_matmul", "'token':1,'weight':2,'first_token_offset':3", "'Y':4", "")),
           bg, 4);
  double wy[10] = {0, 0, 1, 2, 2, 1, 0, 3, 3, 0};
  OK(rc == 0 && close_to(y, wy, 10, 0), "moe_grouped_matmul: rows by expert, rows before the first expert's 0");
}

static void test_rounding_and_dims(void) {
  double x[1] = {1.0 / 3}, yb[1], yh[1], yf[1];
  kiln_ref_buffer b[] = {BUF(1, x), BUF(2, yb), BUF(4, yh), BUF(6, yf)};
  int rc = run(GRAPH(TEN(1, "x", "fp64", "[1]", "input") "," TEN(2, "yb", "bf16", "[1]", "output")
                     "," TEN(3, "vh", "fp16", "[1]", "virtual") ","
                     TEN(4, "yh", "fp64", "[1]", "output") "," TEN(5, "vf", "fp32", "[1]", "virtual")
                     "," TEN(6, "yf", "fp64", "[1]", "output"),
                     NODE("identity", "'input':1", "'OUT_0':2", "") ","
                     NODE("identity", "'input':1", "'OUT_0':3", "") ","
                     NODE("identity", "'input':3", "'OUT_0':4", "") ","
                     NODE("identity", "'input':1", "'OUT_0':5", "") ","
                     NODE("identity", "'input':5", "'OUT_0':6", "")),
               b, 4);
  OK(rc == 0 && yb[0] == 0.333984375, "bf16 output is rounded");
  OK(rc == 0 && yh[0] == 0.333251953125, "fp16 virtual tensor is rounded");
  OK(rc == 0 && yf[0] == 1.0 / 3, "fp32 virtual tensor keeps fp64");

  double cx[2] = {3, 5}, cy[2];
  kiln_ref_buffer cb[] = {BUF(1, cx), BUF(3, cy)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[2]", "input") "," CONST(2, "half", "0.5") ","
                 TEN(3, "y", "fp32", "[2]", "output"),
                 NODE("mul", "'a':1,'b':2", "'OUT_0':3", "")),
           cb, 2);
  double cw[2] = {1.5, 2.5};
  OK(rc == 0 && close_to(cy, cw, 2, 0), "mul by a constant");

  double dx[6] = {1, 2, 3, 4, 5, 6}, dy[6];
  kiln_ref_buffer db[] = {BUF(1, dx), BUF(2, dy)};
  kiln_ref_dim dims[] = {{"T", 3}};
  rc = run_dims(GRAPH(TEN(1, "x", "fp32", "['T',2]", "input") ","
                      TEN(2, "y", "fp32", "['T',2]", "output"),
                      NODE("neg", "'input':1", "'OUT_0':2", "")),
                dims, 1, db, 2);
  OK(rc == 0 && dy[5] == -6, "dynamic dim T=3 from kiln_ref_dim");
  OK(fails_with(GRAPH(TEN(1, "x", "fp32", "['T',2]", "input") ","
                      TEN(2, "y", "fp32", "['T',2]", "output"),
                      NODE("neg", "'input':1", "'OUT_0':2", "")),
                db, 2, "E_SPEC"),
     "dynamic dim without a value -> E_SPEC");
}

static void test_errors(void) {
  double x[2] = {1, 2}, y[2];
  kiln_ref_buffer b[] = {BUF(1, x), BUF(2, y)};
#define T12 TEN(1, "x", "fp32", "[2]", "input") "," TEN(2, "y", "fp32", "[2]", "output")
#define NEG NODE("neg", "'input':1", "'OUT_0':2", "")
  OK(fails_with("{'schema':'kiln.graph','version':2,'tensors':[],'nodes':[]}", b, 0,
                "E_JSON_VERSION"), "version 2 -> E_JSON_VERSION");
  OK(fails_with("{'schema':'other','version':1,'tensors':[],'nodes':[]}", b, 0, "E_JSON_VERSION"),
     "wrong schema -> E_JSON_VERSION");
  OK(fails_with("{'schema':'kiln.graph','version':1,'tensors':[", b, 0, "E_JSON"),
     "malformed text -> E_JSON");
  OK(fails_with(GRAPH(TEN(1, "x", "fp32", "[2]", "input") "," TEN(1, "y", "fp32", "[2]", "output"),
                      NEG), b, 2, "E_UID"), "duplicate uid -> E_UID");
  OK(fails_with(GRAPH(T12, NODE("neg", "'input':7", "'OUT_0':2", "")), b, 2, "E_DANGLING"),
     "dangling reference -> E_DANGLING");
  OK(fails_with(GRAPH(T12, NODE("frobnicate", "'input':1", "'OUT_0':2", "")), b, 2,
                "E_UNKNOWN_OP") && strstr(err.msg, "reference executor has no frobnicate"),
     "unknown op -> E_UNKNOWN_OP");
  OK(fails_with(GRAPH(T12, NODE("neg", "'x':1", "'OUT_0':2", "")), b, 2, "E_PORT"),
     "unknown port -> E_PORT");
  OK(fails_with(GRAPH(T12, NODE("neg", "'input':1", "'OUT_0':2", "'colour':1")), b, 2, "E_ATTR"),
     "unknown attribute -> E_ATTR");
  OK(fails_with(GRAPH(TEN(1, "x", "fp32", "[2]", "input") "," TEN(2, "y", "fp99", "[2]", "output"),
                      NEG), b, 2, "E_DTYPE"), "unknown dtype -> E_DTYPE");
  OK(fails_with(GRAPH(TEN(1, "x", "fp32", "[2]", "input") "," TEN(2, "y", "fp32", "[3]", "output"),
                      NEG), b, 2, "E_SHAPE"), "buffer size mismatch -> E_SHAPE");
  double y3[3];
  kiln_ref_buffer b3[] = {BUF(1, x), BUF(2, y3)};
  OK(fails_with(GRAPH(TEN(1, "x", "fp32", "[2]", "input") "," TEN(2, "y", "fp32", "[3]", "output"),
                      NEG), b3, 2, "E_SHAPE"), "bad broadcast -> E_SHAPE");
  OK(fails_with(GRAPH(T12 "," TEN(3, "v", "fp32", "[2]", "virtual"),
                      NODE("neg", "'input':3", "'OUT_0':2", "") ","
                      NODE("neg", "'input':1", "'OUT_0':3", "")), b, 2, "E_CYCLE"),
     "node reading a later node's output -> E_CYCLE");
  OK(fails_with(GRAPH(T12, NEG), b, 1, "E_SPEC"), "missing output buffer -> E_SPEC");
  OK(fails_with(GRAPH(T12, NODE("neg", "'input':1", "'OUT_0':2", "") ","
                      NODE("abs", "'input':1", "'OUT_0':2", "")), b, 2, "E_JSON"),
     "two producers -> E_JSON");
  OK(fails_with(GRAPH(T12 "," TEN(3, "v", "fp32", "[2]", "virtual"), NEG), b, 2, "E_DANGLING"),
     "virtual tensor without a producer -> E_DANGLING");
  OK(fails_with(GRAPH(TEN(1, "x", "fp32", "['Q',2]", "input") "," TEN(2, "y", "fp32", "[2]", "output"),
                      NEG), b, 2, "E_DANGLING"), "unknown dim name -> E_DANGLING");
  double q8[8] = {0}, o8[8], seed[1] = {0};
  kiln_ref_buffer sb[] = {BUF(1, q8), BUF(2, o8), BUF(3, seed)};
  OK(fails_with(GRAPH(TEN(1, "q", "fp32", "[1,1,1,8]", "input") ","
                      TEN(2, "o", "fp32", "[1,1,1,8]", "output") ","
                      TEN(3, "s", "int32", "[1,1,1,1]", "input"),
                      NODE("sdpa", "'q':1,'k':1,'v':1,'seed':3", "'O':2", "")), sb, 3,
                "E_UNKNOWN_OP") && strstr(err.msg, "reference executor has no sdpa with"),
     "an op feature the reference lacks -> E_UNKNOWN_OP");
}

/* forward loss sum(O * W) for the finite-difference check of sdpa_backward */
#define SDPA_T                                                                               \
  TEN(1, "q", "fp64", "[1,2,2,2]", "input") "," TEN(2, "k", "fp64", "[1,1,3,2]", "input") "," \
  TEN(3, "v", "fp64", "[1,1,3,2]", "input") "," TEN(4, "bias", "fp64", "[1,1,2,3]", "input")
#define SDPA_A "'softcap':0.8,'use_causal_mask_bottom_right':true,'attn_scale':0.7"
static double sdpa_loss(double *q, double *k, double *v, double *bias, const double *w) {
  double o[8], st[4];
  kiln_ref_buffer b[] = {{1, q, 8}, {2, k, 6}, {3, v, 6}, {4, bias, 6}, {5, o, 8}, {6, st, 4}};
  if (run(GRAPH(SDPA_T "," TEN(5, "o", "fp64", "[1,2,2,2]", "output") ","
                TEN(6, "st", "fp64", "[1,2,2,1]", "output"),
                NODE("sdpa", "'q':1,'k':2,'v':3,'bias':4", "'O':5,'Stats':6",
                     SDPA_A ",'generate_stats':true")),
          b, 6))
    return NAN;
  double l = 0;
  for (int i = 0; i < 8; i++) l += o[i] * w[i];
  return l;
}

static void test_sdpa_backward(void) {
  /* by hand: q = [1], k = [1, 0], v = [1, 3], dO = [1]: P = (p1, p0), p1 = e/(1+e);
   * O = p1 + 3 p0; dS = P (v - O) = (-2 p0 p1, 2 p0 p1); dQ = dS k; dK = dS q; dV = P dO */
  double e1 = exp(1.0), p0 = 1 / (1 + e1), p1 = e1 / (1 + e1);
  double q[1] = {1}, k[2] = {1, 0}, v[2] = {1, 3}, o[1] = {p1 + 3 * p0}, dO[1] = {1};
  double st[1] = {log(1 + e1)}, dq[1], dk[2], dv[2];
  kiln_ref_buffer b[] = {BUF(1, q), BUF(2, k), BUF(3, v), BUF(4, o), BUF(5, dO), BUF(6, st),
                         BUF(7, dq), BUF(8, dk), BUF(9, dv)};
  int rc = run(GRAPH(TEN(1, "q", "fp64", "[1,1,1,1]", "input") ","
                     TEN(2, "k", "fp64", "[1,1,2,1]", "input") ","
                     TEN(3, "v", "fp64", "[1,1,2,1]", "input") ","
                     TEN(4, "o", "fp64", "[1,1,1,1]", "input") ","
                     TEN(5, "dO", "fp64", "[1,1,1,1]", "input") ","
                     TEN(6, "st", "fp32", "[1,1,1,1]", "input") ","
                     TEN(7, "dq", "fp64", "[1,1,1,1]", "output") ","
                     TEN(8, "dk", "fp64", "[1,1,2,1]", "output") ","
                     TEN(9, "dv", "fp64", "[1,1,2,1]", "output"),
                     NODE("sdpa_backward", "'q':1,'k':2,'v':3,'o':4,'dO':5,'stats':6",
                          "'dQ':7,'dK':8,'dV':9", "'attn_scale':1.0")),
               b, 9);
  double wdq = -2 * p0 * p1, wdk[2] = {-2 * p0 * p1, 2 * p0 * p1}, wdv[2] = {p1, p0};
  OK(rc == 0 && close_to(dq, &wdq, 1, 1e-15) && close_to(dk, wdk, 2, 1e-15) &&
     close_to(dv, wdv, 2, 1e-15), "sdpa_backward by hand");

  /* GQA + bottom-right causal + softcap + bias: gradients match central differences of the
   * forward loss sum(O * W) */
  double Q[8] = {0.3, -0.2, 0.5, 0.1, -0.4, 0.8, 0.2, 0.6}, K[6] = {0.7, -0.1, 0.2, 0.9, -0.5, 0.4};
  double V[6] = {1, -2, 0.5, 3, -1, 0.25}, Bs[6] = {0.1, -0.3, 0.2, 0.05, 0.4, -0.2};
  double W[8] = {1, 0.5, -1, 2, 0.3, -0.7, 1.5, 0.2}, O[8], ST[4];
  double dQ[8], dK[6], dV[6], dB[6];
  kiln_ref_buffer fb[] = {{1, Q, 8}, {2, K, 6}, {3, V, 6}, {4, Bs, 6}, {5, O, 8}, {6, ST, 4}};
  rc = run(GRAPH(SDPA_T "," TEN(5, "o", "fp64", "[1,2,2,2]", "output") ","
                 TEN(6, "st", "fp32", "[1,2,2,1]", "output"),
                 NODE("sdpa", "'q':1,'k':2,'v':3,'bias':4", "'O':5,'Stats':6",
                      SDPA_A ",'generate_stats':true")),
           fb, 6);
  kiln_ref_buffer bb[] = {{1, Q, 8},  {2, K, 6},  {3, V, 6},  {4, Bs, 6}, {5, O, 8},
                          {6, W, 8},  {7, ST, 4}, {8, dQ, 8}, {9, dK, 6}, {10, dV, 6},
                          {11, dB, 6}};
  rc = rc || run(GRAPH(SDPA_T "," TEN(5, "o", "fp64", "[1,2,2,2]", "input") ","
                       TEN(6, "dO", "fp64", "[1,2,2,2]", "input") ","
                       TEN(7, "st", "fp32", "[1,2,2,1]", "input") ","
                       TEN(8, "dq", "fp64", "[1,2,2,2]", "output") ","
                       TEN(9, "dk", "fp64", "[1,1,3,2]", "output") ","
                       TEN(10, "dv", "fp64", "[1,1,3,2]", "output") ","
                       TEN(11, "db", "fp64", "[1,1,2,3]", "output"),
                       NODE("sdpa_backward", "'q':1,'k':2,'v':3,'bias':4,'o':5,'dO':6,'stats':7",
                            "'dQ':8,'dK':9,'dV':10,'dBias':11", SDPA_A ",'dBias':true")),
                 bb, 11);
  double *ins[4] = {Q, K, V, Bs}, *grads[4] = {dQ, dK, dV, dB};
  int sizes[4] = {8, 6, 6, 6}, good = rc == 0;
  for (int t = 0; good && t < 4; t++)
    for (int i = 0; good && i < sizes[t]; i++) {
      double keep = ins[t][i], h = 1e-5;
      ins[t][i] = keep + h;
      double lp = sdpa_loss(Q, K, V, Bs, W);
      ins[t][i] = keep - h;
      double lm = sdpa_loss(Q, K, V, Bs, W);
      ins[t][i] = keep;
      double fd = (lp - lm) / (2 * h);
      /* Stats went through fp32, so P carries ~1e-7 relative error */
      if (fabs(fd - grads[t][i]) > 1e-6 + 1e-6 * fabs(fd))
        good = 0, DIAG("tensor %d [%d]: fd %.10g analytic %.10g", t, i, fd, grads[t][i]);
    }
  OK(good, "sdpa_backward (GQA, causal bottom-right, softcap, bias) matches finite differences");
}

/* gdn with GVA (H=1, HV=2), K=V=2, T=3 in 2 sequences, l2 norm, beta sigmoid, safe gate,
 * initial state: loss = sum(O * W) + sum(final_state * WF) */
#define GDN_T                                                                              \
  TEN(1, "q", "fp64", "[3,1,2]", "input") "," TEN(2, "k", "fp64", "[3,1,2]", "input") ","   \
  TEN(3, "v", "fp64", "[3,2,2]", "input") "," TEN(4, "g", "fp64", "[3,2]", "input") ","     \
  TEN(5, "beta", "fp64", "[3,2]", "input") "," TEN(6, "cu", "int64", "[3]", "input") ","    \
  TEN(7, "h0", "fp64", "[2,2,2,2]", "input") "," TEN(8, "alog", "fp64", "[2]", "input") "," \
  TEN(9, "dtb", "fp64", "[2]", "input")
#define GDN_IN "'q':1,'k':2,'v':3,'g':4,'beta':5,'cu_seqlens':6,'initial_state':7,'a_log':8,'dt_bias':9"
#define GDN_A "'scale':0.6,'use_qk_l2norm':true,'use_beta_sigmoid':true,'safe_gate':true"
static double gdn_loss(double *const *in, const double *w, const double *wf) {
  static const int sizes[9] = {6, 6, 12, 6, 6, 3, 16, 2, 2};
  double o[12], hT[16];
  kiln_ref_buffer b[11];
  for (int i = 0; i < 9; i++) b[i] = (kiln_ref_buffer){i + 1, in[i], (size_t)sizes[i]};
  b[9] = (kiln_ref_buffer){10, o, 12};
  b[10] = (kiln_ref_buffer){11, hT, 16};
  if (run(GRAPH(GDN_T "," TEN(10, "o", "fp64", "[3,2,2]", "output") ","
                TEN(11, "hT", "fp64", "[2,2,2,2]", "output"),
                NODE("gdn", GDN_IN, "'O':10,'final_state':11", GDN_A ",'output_final_state':true")),
          b, 11))
    return NAN;
  double l = 0;
  for (int i = 0; i < 12; i++) l += o[i] * w[i];
  for (int i = 0; i < 16; i++) l += hT[i] * wf[i];
  return l;
}

static void test_gdn_backward(void) {
  /* by hand, T=1, K=V=1, no norm, S0=0, scale 1: o = q k beta v, so dq = k beta v,
   * dk = q beta v, dv = q k beta, dbeta = q k v, dg = 0 */
  double q[1] = {2}, k[1] = {3}, v[1] = {5}, g[1] = {-0.3}, be[1] = {0.5}, cu[2] = {0, 1};
  double dO[1] = {1}, dq[1], dk[1], dv[1], dg[1], db[1];
  kiln_ref_buffer hb[] = {BUF(1, q), BUF(2, k), BUF(3, v), BUF(4, g), BUF(5, be), BUF(6, cu),
                          BUF(7, dO), BUF(8, dq), BUF(9, dk), BUF(10, dv), BUF(11, dg),
                          BUF(12, db)};
  int rc = run(GRAPH(TEN(1, "q", "fp64", "[1,1,1]", "input") "," TEN(2, "k", "fp64", "[1,1,1]", "input")
                     "," TEN(3, "v", "fp64", "[1,1,1]", "input") ","
                     TEN(4, "g", "fp64", "[1,1]", "input") "," TEN(5, "b", "fp64", "[1,1]", "input")
                     "," TEN(6, "cu", "int32", "[2]", "input") ","
                     TEN(7, "dO", "fp64", "[1,1,1]", "input") ","
                     TEN(8, "dq", "fp64", "[1,1,1]", "output") ","
                     TEN(9, "dk", "fp64", "[1,1,1]", "output") ","
                     TEN(10, "dv", "fp64", "[1,1,1]", "output") ","
                     TEN(11, "dg", "fp64", "[1,1]", "output") ","
                     TEN(12, "db", "fp64", "[1,1]", "output"),
                     NODE("gdn_bwd", "'q':1,'k':2,'v':3,'g':4,'beta':5,'cu_seqlens':6,'dO':7",
                          "'dQ':8,'dK':9,'dV':10,'dG':11,'dBeta':12", "'scale':1.0")),
               hb, 12);
  OK(rc == 0 && dq[0] == 7.5 && dk[0] == 5 && dv[0] == 3 && db[0] == 30 && dg[0] == 0,
     "gdn_bwd by hand (T=1)");

  double Q[6] = {1, 2, 0.5, -1, 3, 1}, Kk[6] = {2, 1, 1, 1, -1, 2};
  double V[12] = {1, 0, 0, 1, 2, -1, 1, 1, 0.5, 0.5, -1, 2};
  double G[6] = {-0.1, -0.2, -0.3, 0.1, -0.5, -1}, Bt[6] = {0, 1, 2, -1, 0.5, 0};
  double CU[3] = {0, 1, 3}, H0[16] = {0.1, 0.2, 0.3, 0.4, -0.1, 0, 0, 0.1, 1, 0, 0, 1,
                                      0.5, 0.5, 0.5, 0.5};
  double AL[2] = {0.2, -0.4}, DT[2] = {0.3, -0.1};
  double W[12] = {1, -0.5, 0.3, 2, -1, 0.7, 0.2, 0.4, -0.6, 1.1, 0.9, -0.3};
  double WF[16] = {0.5, -1, 0.2, 0.3, 1, 0.1, -0.4, 0.6, -0.2, 0.8, 0.3, -0.5, 0.7, 0.2, -0.9, 0.4};
  double dQ[6], dK[6], dV[12], dG[6], dB[6], dH0[16], dAL[2], dDT[2];
  double *in[9] = {Q, Kk, V, G, Bt, CU, H0, AL, DT};
  kiln_ref_buffer bb[19];
  static const int sizes[9] = {6, 6, 12, 6, 6, 3, 16, 2, 2};
  for (int i = 0; i < 9; i++) bb[i] = (kiln_ref_buffer){i + 1, in[i], (size_t)sizes[i]};
  double *outs[8] = {dQ, dK, dV, dG, dB, dH0, dAL, dDT};
  static const int osizes[8] = {6, 6, 12, 6, 6, 16, 2, 2};
  for (int i = 0; i < 8; i++) bb[9 + i] = (kiln_ref_buffer){12 + i, outs[i], (size_t)osizes[i]};
  bb[17] = (kiln_ref_buffer){10, W, 12};
  bb[18] = (kiln_ref_buffer){11, WF, 16};
  rc = run(GRAPH(GDN_T "," TEN(10, "dO", "fp64", "[3,2,2]", "input") ","
                 TEN(11, "dhT", "fp64", "[2,2,2,2]", "input") ","
                 TEN(12, "dq", "fp64", "[3,1,2]", "output") ","
                 TEN(13, "dk", "fp64", "[3,1,2]", "output") ","
                 TEN(14, "dv", "fp64", "[3,2,2]", "output") ","
                 TEN(15, "dg", "fp64", "[3,2]", "output") ","
                 TEN(16, "db", "fp64", "[3,2]", "output") ","
                 TEN(17, "dh0", "fp64", "[2,2,2,2]", "output") ","
                 TEN(18, "dal", "fp64", "[2]", "output") "," TEN(19, "ddt", "fp64", "[2]", "output"),
                 NODE("gdn_bwd", GDN_IN ",'dO':10,'d_final_state':11",
                      "'dQ':12,'dK':13,'dV':14,'dG':15,'dBeta':16,'d_initial_state':17,"
                      "'d_a_log':18,'d_dt_bias':19", GDN_A)),
           bb, 19);
  int good = rc == 0;
  for (int t = 0; good && t < 9; t++) {
    if (t == 5) continue; /* cu_seqlens */
    double *grad = outs[t < 5 ? t : t - 1];
    for (int i = 0; good && i < sizes[t]; i++) {
      double keep = in[t][i], h = 1e-6;
      in[t][i] = keep + h;
      double lp = gdn_loss(in, W, WF);
      in[t][i] = keep - h;
      double lm = gdn_loss(in, W, WF);
      in[t][i] = keep;
      double fd = (lp - lm) / (2 * h);
      if (fabs(fd - grad[i]) > 1e-7 + 1e-7 * fabs(fd))
        good = 0, DIAG("input %d [%d]: fd %.10g analytic %.10g", t, i, fd, grad[i]);
    }
  }
  OK(good, "gdn_bwd (GVA, l2 norm, beta sigmoid, safe gate, states) matches finite differences");
}

static void test_more_norms(void) {
  /* batchnorm over N of x [N=2, C=2]: channel 0 {1,3} mean 2 var 1, channel 1 {10,20} mean 15
   * var 25; eps 0; running: momentum 0.1, unbiased var (x2) */
  double x[4] = {1, 10, 3, 20}, one[2] = {1, 1}, zero[2] = {0, 0}, pm[2] = {0, 0}, pv[2] = {1, 1};
  double y[4], mean[2], inv[2], nm[2], nv[2];
  kiln_ref_buffer b[] = {BUF(1, x), BUF(2, one), BUF(3, zero), BUF(4, pm), BUF(5, pv),
                         BUF(6, y), BUF(7, mean), BUF(8, inv), BUF(9, nm), BUF(10, nv)};
  int rc = run(GRAPH(TEN(1, "x", "fp32", "[2,2]", "input") "," TEN(2, "g", "fp32", "[1,2]", "input")
                     "," TEN(3, "b", "fp32", "[1,2]", "input") ","
                     TEN(4, "pm", "fp32", "[1,2]", "input") "," TEN(5, "pv", "fp32", "[1,2]", "input")
                     "," TEN(6, "y", "fp64", "[2,2]", "output") ","
                     TEN(7, "m", "fp64", "[1,2]", "output") "," TEN(8, "iv", "fp64", "[1,2]", "output")
                     "," TEN(9, "nm", "fp64", "[1,2]", "output") ","
                     TEN(10, "nv", "fp64", "[1,2]", "output"),
                     NODE("batchnorm",
                          "'input':1,'scale':2,'bias':3,'in_running_mean':4,'in_running_var':5",
                          "'Y':6,'MEAN':7,'INV_VARIANCE':8,'NEXT_RUNNING_MEAN':9,"
                          "'NEXT_RUNNING_VAR':10", "'epsilon':0,'momentum':0.1")),
               b, 10);
  double wy[4] = {-1, -1, 1, 1}, wm[2] = {2, 15}, wi[2] = {1, 0.2}, wnm[2] = {0.2, 1.5};
  double wnv[2] = {0.9 + 0.1 * 2, 0.9 + 0.1 * 50};
  OK(rc == 0 && close_to(y, wy, 4, 1e-15) && close_to(mean, wm, 2, 0) &&
     close_to(inv, wi, 2, 1e-15), "batchnorm Y, MEAN, INV_VARIANCE per channel");
  OK(rc == 0 && close_to(nm, wnm, 2, 1e-15) && close_to(nv, wnv, 2, 1e-15),
     "batchnorm running statistics (unbiased variance)");

  double bg[2] = {2, 1}, bb[2] = {1, 0}, by[4];
  kiln_ref_buffer bi[] = {BUF(1, x), BUF(2, wm), BUF(3, wi), BUF(4, bg), BUF(5, bb), BUF(6, by)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[2,2]", "input") "," TEN(2, "m", "fp64", "[1,2]", "input")
                 "," TEN(3, "iv", "fp64", "[1,2]", "input") "," TEN(4, "g", "fp32", "[1,2]", "input")
                 "," TEN(5, "b", "fp32", "[1,2]", "input") ","
                 TEN(6, "y", "fp64", "[2,2]", "output"),
                 NODE("batchnorm_inference", "'input':1,'mean':2,'inv_variance':3,'scale':4,'bias':5",
                      "'Y':6", "")),
           bi, 6);
  double wby[4] = {-1, -1, 3, 1};
  OK(rc == 0 && close_to(by, wby, 4, 1e-15), "batchnorm_inference");

  /* instancenorm of [1, 2, 2]: per (n, c) over the last axis */
  double ix[4] = {1, 3, 10, 20}, iy[4];
  kiln_ref_buffer ib[] = {BUF(1, ix), BUF(2, one), BUF(3, zero), BUF(4, iy)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[1,2,2]", "input") "," TEN(2, "g", "fp32", "[1,2,1]", "input")
                 "," TEN(3, "b", "fp32", "[1,2,1]", "input") ","
                 TEN(4, "y", "fp64", "[1,2,2]", "output"),
                 NODE("instancenorm", "'input':1,'scale':2,'bias':3", "'Y':4", "'epsilon':0")),
           ib, 4);
  double wiy[4] = {-1, 1, -1, 1};
  OK(rc == 0 && close_to(iy, wiy, 4, 1e-15), "instancenorm per (n, c)");
}

static void test_more_misc(void) {
  /* causal_conv1d_backward, W=3, w=[0.5,-1,2], init [10,20], dy at t=1, dfinal [5,7]:
   * dxbar[1+j] = w[j]; dx = dxbar[2..] + dfinal on the last two; dw = xbar[1..3] */
  double x[4] = {1, 2, 3, 4}, w[3] = {0.5, -1, 2}, init[2] = {10, 20}, dy[4] = {0, 1, 0, 0};
  double dfin[2] = {5, 7}, bias[1] = {0}, dx[4], dw[3], db[1], dinit[2];
  kiln_ref_buffer cb[] = {BUF(1, x), BUF(2, w), BUF(3, init), BUF(4, dy), BUF(5, dfin),
                          BUF(6, bias), BUF(7, dx), BUF(8, dw), BUF(9, db), BUF(10, dinit)};
  int rc = run(GRAPH(TEN(1, "x", "fp32", "[1,1,4]", "input") "," TEN(2, "w", "fp32", "[1,3]", "input")
                     "," TEN(3, "h0", "fp32", "[1,1,2]", "input") ","
                     TEN(4, "dy", "fp32", "[1,1,4]", "input") ","
                     TEN(5, "dfin", "fp32", "[1,1,2]", "input") "," TEN(6, "b", "fp32", "[1]", "input")
                     "," TEN(7, "dx", "fp64", "[1,1,4]", "output") ","
                     TEN(8, "dw", "fp64", "[1,3]", "output") "," TEN(9, "db", "fp64", "[1]", "output")
                     "," TEN(10, "dh0", "fp64", "[1,1,2]", "output"),
                     NODE("causal_conv1d_backward",
                          "'x':1,'weight':2,'initial_states':3,'dout':4,'dfinal_states':5,'bias':6",
                          "'dx':7,'dweight':8,'dbias':9,'dinitial_states':10",
                          "'return_dinitial_states':true")),
               cb, 10);
  double wdx[4] = {-1, 2, 5, 7}, wdw[3] = {20, 1, 2}, wdi[2] = {0, 0.5};
  OK(rc == 0 && close_to(dx, wdx, 4, 0) && close_to(dw, wdw, 3, 0) && db[0] == 1 &&
     close_to(dinit, wdi, 2, 0), "causal_conv1d_backward dx, dweight, dbias, dinitial_states");

  /* matmul with M_override 1, K_override 2, padding -1 */
  double a[6] = {1, 2, 3, 4, 5, 6}, bm[6] = {7, 8, 9, 10, 11, 12}, c[4];
  kiln_ref_buffer mb[] = {BUF(1, a), BUF(2, bm), BUF(5, c)};
  rc = run(GRAPH(TEN(1, "A", "fp32", "[2,3]", "input") "," TEN(2, "B", "fp32", "[3,2]", "input")
                 "," "{'uid':3,'name':'m','dtype':'int32','dims':[1],'role':'constant','value':1}"
                 "," "{'uid':4,'name':'k','dtype':'int32','dims':[1],'role':'constant','value':2}"
                 "," TEN(5, "C", "fp32", "[2,2]", "output"),
                 NODE("matmul", "'A':1,'B':2,'M_override':3,'K_override':4", "'C':5",
                      "'padding':-1")),
           mb, 3);
  double wc[4] = {25, 28, -1, -1};
  OK(rc == 0 && close_to(c, wc, 4, 0), "matmul M/K overrides with padding");

  /* block_scale_quantize with an e4m3 scale, rounded up: 129.92/448 = 0.29 -> 0.3125 (the
   * nearest e4m3, 0.28125, is below); 3/448 -> 4 * 2^-9 */
  double qx[8] = {129.92, -50, 0, 0, 3, 1, 0, 0}, qy[8], qs[2];
  kiln_ref_buffer qb[] = {BUF(1, qx), BUF(2, qy), BUF(3, qs)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[1,8]", "input") ","
                 TEN(2, "y", "fp8_e4m3", "[1,8]", "output") ","
                 TEN(3, "s", "fp8_e4m3", "[1,2]", "output"),
                 NODE("block_scale_quantize", "'input':1", "'Y':2,'scale':3", "'block_size':4")),
           qb, 3);
  double wqs[2] = {0.3125, 0.0078125}, wqy[8] = {416, -160, 0, 0, 384, 128, 0, 0};
  OK(rc == 0 && close_to(qs, wqs, 2, 0) && close_to(qy, wqy, 8, 0),
     "block_scale_quantize with an e4m3 scale");

  /* gdn with state_indices: sequence 0 starts from pool row 1 (S = 4) */
  double gq[2] = {1, 2}, gk[2] = {1, 1}, gv[2] = {2, 4}, gg[2] = {0, log(0.5)}, gb[2] = {0.5, 0.5};
  double cu[2] = {0, 2}, pool[2] = {100, 4}, sidx[1] = {1}, go[2], gs[1];
  kiln_ref_buffer gbf[] = {BUF(1, gq), BUF(2, gk), BUF(3, gv), BUF(4, gg), BUF(5, gb), BUF(6, cu),
                           BUF(7, pool), BUF(8, sidx), BUF(9, go), BUF(10, gs)};
  rc = run(GRAPH(TEN(1, "q", "fp32", "[2,1,1]", "input") "," TEN(2, "k", "fp32", "[2,1,1]", "input")
                 "," TEN(3, "v", "fp32", "[2,1,1]", "input") ","
                 TEN(4, "g", "fp64", "[2,1]", "input") "," TEN(5, "beta", "fp32", "[2,1]", "input")
                 "," TEN(6, "cu", "int32", "[2]", "input") ","
                 TEN(7, "h0", "fp32", "[2,1,1,1]", "input") "," TEN(8, "si", "int32", "[1]", "input")
                 "," TEN(9, "o", "fp64", "[2,1,1]", "output") ","
                 TEN(10, "hT", "fp64", "[1,1,1,1]", "output"),
                 NODE("gdn", "'q':1,'k':2,'v':3,'g':4,'beta':5,'cu_seqlens':6,'initial_state':7,"
                      "'state_indices':8", "'O':9,'final_state':10",
                      "'scale':1.0,'output_final_state':true")),
           gbf, 10);
  double wgo[2] = {3, 5.5}, wgs = 2.75;
  OK(rc == 0 && close_to(go, wgo, 2, 1e-15) && close_to(gs, &wgs, 1, 1e-15),
     "gdn state_indices picks the initial state row");
}

static void test_quant_conv(void) {
  double x[12] = {1, -2, 3, 0.5, 0, 0, 0, 0, 56, 7, -0.3, 0}, y[12], s[3], d[12];
  kiln_ref_buffer b[] = {BUF(1, x), BUF(2, y), BUF(3, s), BUF(4, d)};
  int rc = run(GRAPH(TEN(1, "x", "fp32", "[1,12]", "input") ","
                     TEN(2, "y", "fp8_e4m3", "[1,12]", "output") ","
                     TEN(3, "s", "fp8_e8m0", "[1,3]", "output") ","
                     TEN(4, "d", "fp32", "[1,12]", "output"),
                     NODE("block_scale_quantize", "'input':1", "'Y':2,'scale':3",
                          "'block_size':4,'axis':-1") ","
                     NODE("block_scale_dequantize", "'input':2,'descale':3", "'Y':4",
                          "'block_size':[1,4]")),
               b, 4);
  /* amax 3: 3/448 in (2^-8, 2^-7] -> 2^-7; amax 0 -> 2^-127; amax 56 = 448/8 -> 2^-3 exactly;
   * -0.3 * 8 = -2.4 -> e4m3 -2.5 */
  double ws[3] = {ldexp(1, -7), ldexp(1, -127), 0.125};
  double wy[12] = {128, -256, 384, 64, 0, 0, 0, 0, 448, 56, -2.5, 0};
  double wd[12] = {1, -2, 3, 0.5, 0, 0, 0, 0, 56, 7, -0.3125, 0};
  OK(rc == 0 && close_to(s, ws, 3, 0), "block_scale_quantize scales (e8m0, rounded up)");
  OK(rc == 0 && close_to(y, wy, 12, 0), "block_scale_quantize data (e4m3)");
  OK(rc == 0 && close_to(d, wd, 12, 0), "block_scale_dequantize");

  double cx[4] = {1, 2, 3, 4}, w[3] = {0.5, -1, 2}, bias[1] = {0.25}, init[2] = {10, 20};
  double cy[4], fs[2], cy2[4], cy3[4];
  kiln_ref_buffer cb[] = {BUF(1, cx), BUF(2, w), BUF(3, bias), BUF(4, init), BUF(5, cy),
                          BUF(6, fs), BUF(7, cy2), BUF(8, cy3)};
  rc = run(GRAPH(TEN(1, "x", "fp32", "[1,1,4]", "input") "," TEN(2, "w", "fp32", "[1,3]", "input")
                 "," TEN(3, "b", "fp32", "[1]", "input") ","
                 TEN(4, "h0", "fp32", "[1,1,2]", "input") "," TEN(5, "y", "fp32", "[1,1,4]", "output")
                 "," TEN(6, "hT", "fp32", "[1,1,2]", "output") ","
                 TEN(7, "y2", "fp32", "[1,1,4]", "output") ","
                 TEN(8, "y3", "fp64", "[1,1,4]", "output"),
                 NODE("causal_conv1d", "'x':1,'weight':2,'bias':3", "'y':5,'final_states':6",
                      "'activation':'identity'") ","
                 NODE("causal_conv1d", "'x':1,'weight':2,'bias':3,'initial_states':4", "'y':7",
                      "") ","
                 NODE("causal_conv1d", "'x':1,'weight':2,'bias':3", "'y':8",
                      "'activation':'silu'")),
           cb, 8);
  double wy1[4] = {2.25, 3.25, 4.75, 6.25}, wf[2] = {3, 4}, wy2[4] = {-12.75, 13.25, 4.75, 6.25};
  double wy3[4];
  for (int i = 0; i < 4; i++) wy3[i] = wy1[i] / (1 + exp(-wy1[i]));
  OK(rc == 0 && close_to(cy, wy1, 4, 0) && close_to(fs, wf, 2, 0),
     "causal_conv1d y and final_states");
  OK(rc == 0 && close_to(cy2, wy2, 4, 0), "causal_conv1d with initial_states");
  OK(rc == 0 && close_to(cy3, wy3, 4, 1e-15), "causal_conv1d silu");
}

static void test_sdpa_gdn(void) {
  double q[4] = {1, 0, 0, 1}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4};
  double o1[4], st1[2], o2[4], o3[4];
  kiln_ref_buffer b[] = {BUF(1, q), BUF(2, k), BUF(3, v), BUF(4, o1), BUF(5, st1), BUF(6, o2),
                         BUF(7, o3)};
  int rc = run(GRAPH(TEN(1, "q", "fp32", "[1,1,2,2]", "input") ","
                     TEN(2, "k", "fp32", "[1,1,2,2]", "input") ","
                     TEN(3, "v", "fp32", "[1,1,2,2]", "input") ","
                     TEN(4, "o1", "fp64", "[1,1,2,2]", "output") ","
                     TEN(5, "st", "fp64", "[1,1,2,1]", "output") ","
                     TEN(6, "o2", "fp64", "[1,1,2,2]", "output") ","
                     TEN(7, "o3", "fp64", "[1,1,2,2]", "output"),
                     NODE("sdpa", "'q':1,'k':2,'v':3", "'O':4,'Stats':5",
                          "'use_causal_mask':true,'attn_scale':1.0,'generate_stats':true") ","
                     NODE("sdpa", "'q':1,'k':2,'v':3", "'O':6", "'attn_scale':1.0") ","
                     NODE("sdpa", "'q':1,'k':2,'v':3", "'O':7",
                          "'sliding_window_length':1,'use_causal_mask':true")),
               b, 7);
  double e1 = exp(1.0), p0 = 1 / (1 + e1), p1 = e1 / (1 + e1);
  double wo1[4] = {1, 2, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4}, wst[2] = {1, log(1 + e1)};
  double wo2[4] = {p1 * 1 + p0 * 3, p1 * 2 + p0 * 4, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4};
  OK(rc == 0 && close_to(o1, wo1, 4, 1e-15), "sdpa causal O");
  OK(rc == 0 && close_to(st1, wst, 2, 1e-15), "sdpa causal Stats");
  OK(rc == 0 && close_to(o2, wo2, 4, 1e-15), "sdpa no mask O");
  OK(rc == 0 && close_to(o3, v, 4, 0), "sdpa sliding window 1 keeps the diagonal");

  /* bottom-right causal with S_q = 1, S_kv = 2: the one query sees both keys */
  double qb[2] = {1, 0}, ob[2], ot[2];
  kiln_ref_buffer bb[] = {BUF(1, qb), BUF(2, k), BUF(3, v), BUF(4, ob), BUF(5, ot)};
  rc = run(GRAPH(TEN(1, "q", "fp32", "[1,1,1,2]", "input") ","
                 TEN(2, "k", "fp32", "[1,1,2,2]", "input") ","
                 TEN(3, "v", "fp32", "[1,1,2,2]", "input") ","
                 TEN(4, "ob", "fp64", "[1,1,1,2]", "output") ","
                 TEN(5, "ot", "fp64", "[1,1,1,2]", "output"),
                 NODE("sdpa", "'q':1,'k':2,'v':3", "'O':4", "'use_causal_mask_bottom_right':true")
                 "," NODE("sdpa", "'q':1,'k':2,'v':3", "'O':5", "'use_causal_mask':true")),
           bb, 5);
  double wob[2] = {p1 * 1 + p0 * 3, p1 * 2 + p0 * 4}, wot[2] = {1, 2};
  OK(rc == 0 && close_to(ob, wob, 2, 1e-15) && close_to(ot, wot, 2, 0),
     "sdpa bottom-right vs top-left causal");

  /* GQA (2 q heads share one k/v head), padding mask, broadcast bias, softcap */
  double gq2[4] = {1, 0, 0, 1}, lq[1] = {1}, lk[1] = {1}, bias[2] = {0, 1};
  double og[4], op[4], obias[4], ocap[4];
  kiln_ref_buffer qb2[] = {BUF(1, gq2), BUF(2, k), BUF(3, v), BUF(4, lq), BUF(5, lk),
                           BUF(6, bias), BUF(7, og), BUF(8, op), BUF(9, obias), BUF(10, ocap)};
  rc = run(GRAPH(TEN(1, "q", "fp32", "[1,2,1,2]", "input") ","
                 TEN(2, "k", "fp32", "[1,1,2,2]", "input") ","
                 TEN(3, "v", "fp32", "[1,1,2,2]", "input") ","
                 TEN(4, "lq", "int32", "[1,1,1,1]", "input") ","
                 TEN(5, "lk", "int32", "[1,1,1,1]", "input") ","
                 TEN(6, "bias", "fp32", "[1,1,1,2]", "input") ","
                 TEN(7, "og", "fp64", "[1,2,1,2]", "output") ","
                 TEN(8, "op", "fp64", "[1,2,1,2]", "output") ","
                 TEN(9, "ob", "fp64", "[1,2,1,2]", "output") ","
                 TEN(10, "oc", "fp64", "[1,2,1,2]", "output"),
                 NODE("sdpa", "'q':1,'k':2,'v':3", "'O':7", "") ","
                 NODE("sdpa", "'q':1,'k':2,'v':3,'seq_len_q':4,'seq_len_kv':5", "'O':8",
                      "'use_padding_mask':true") ","
                 NODE("sdpa", "'q':1,'k':2,'v':3,'bias':6", "'O':9", "") ","
                 NODE("sdpa", "'q':1,'k':2,'v':3", "'O':10", "'softcap':0.5")),
           qb2, 10);
  double e2 = exp(2.0), pc = exp(0.5 * tanh(2.0)) / (exp(0.5 * tanh(2.0)) + 1);
  double wog[4] = {p1 * 1 + p0 * 3, p1 * 2 + p0 * 4, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4};
  double wop[4] = {1, 2, 1, 2};
  double wob2[4] = {2, 3, (1 + 3 * e2) / (1 + e2), (2 + 4 * e2) / (1 + e2)};
  double woc[4] = {pc * 1 + (1 - pc) * 3, pc * 2 + (1 - pc) * 4, (1 - pc) * 1 + pc * 3,
                   (1 - pc) * 2 + pc * 4};
  OK(rc == 0 && close_to(og, wog, 4, 1e-15), "sdpa GQA: q heads share the k/v head");
  OK(rc == 0 && close_to(op, wop, 4, 0), "sdpa padding mask seq_len_kv = 1");
  OK(rc == 0 && close_to(obias, wob2, 4, 1e-15), "sdpa bias broadcast over heads");
  OK(rc == 0 && close_to(ocap, woc, 4, 1e-15), "sdpa softcap c tanh(s/c)");

  /* gdn, T=2, one sequence, K=V=1, scale 1: S=2, o=2; then S=0.5*2=1, u=0.5*(4-1), S=2.5, o=5 */
  double gq[2] = {1, 2}, gk[2] = {1, 1}, gv[2] = {2, 4}, gg[2] = {0, log(0.5)}, gb[2] = {1, 0.5};
  double cu[2] = {0, 2}, go[2], gs[1];
  kiln_ref_buffer gbf[] = {BUF(1, gq), BUF(2, gk), BUF(3, gv), BUF(4, gg), BUF(5, gb),
                           BUF(6, cu), BUF(7, go), BUF(8, gs)};
  rc = run(GRAPH(TEN(1, "q", "fp32", "[2,1,1]", "input") "," TEN(2, "k", "fp32", "[2,1,1]", "input")
                 "," TEN(3, "v", "fp32", "[2,1,1]", "input") ","
                 TEN(4, "g", "fp64", "[2,1]", "input") "," TEN(5, "beta", "fp32", "[2,1]", "input")
                 "," TEN(6, "cu", "int32", "[2]", "input") ","
                 TEN(7, "o", "fp64", "[2,1,1]", "output") ","
                 TEN(8, "hT", "fp64", "[1,1,1,1]", "output"),
                 NODE("gdn", "'q':1,'k':2,'v':3,'g':4,'beta':5,'cu_seqlens':6",
                      "'O':7,'final_state':8", "'scale':1.0,'output_final_state':true")),
           gbf, 8);
  double wgo[2] = {2, 5}, wgs = 2.5;
  OK(rc == 0 && close_to(go, wgo, 2, 1e-15) && close_to(gs, &wgs, 1, 1e-15),
     "gdn token loop O and final_state");

  /* gdn GVA (H=1, HV=2), K=V=2, two sequences, l2 norm, beta sigmoid, initial state; expected
   * from the matrix form S_t = e^g (I - b k k^T) S + b k v^T, o = scale S^T q (K x V state) */
  enum { T = 3, HV = 2, K = 2, V = 2, N = 2 };
  double Q[T][K] = {{1, 2}, {0.5, -1}, {3, 1}}, Kk[T][K] = {{2, 1}, {1, 1}, {-1, 2}};
  double Vv[T][HV][V] = {{{1, 0}, {0, 1}}, {{2, -1}, {1, 1}}, {{0.5, 0.5}, {-1, 2}}};
  double G[T][HV] = {{-0.1, -0.2}, {-0.3, 0}, {-0.5, -1}}, Bt[T][HV] = {{0, 1}, {2, -1}, {0.5, 0}};
  double H0[N][HV][V][K] = {{{{0.1, 0.2}, {0.3, 0.4}}, {{-0.1, 0}, {0, 0.1}}},
                            {{{1, 0}, {0, 1}}, {{0.5, 0.5}, {0.5, 0.5}}}};
  double CU[N + 1] = {0, 1, 3}, O[T][HV][V], HT[N][HV][V][K], scale = 0.7;
  kiln_ref_buffer vb[] = {{1, &Q[0][0], T * K},      {2, &Kk[0][0], T * K},
                          {3, &Vv[0][0][0], T * HV * V}, {4, &G[0][0], T * HV},
                          {5, &Bt[0][0], T * HV},    {6, CU, N + 1},
                          {7, &H0[0][0][0][0], N * HV * V * K}, {8, &O[0][0][0], T * HV * V},
                          {9, &HT[0][0][0][0], N * HV * V * K}};
  rc = run(GRAPH(TEN(1, "q", "fp64", "[3,1,2]", "input") "," TEN(2, "k", "fp64", "[3,1,2]", "input")
                 "," TEN(3, "v", "fp64", "[3,2,2]", "input") ","
                 TEN(4, "g", "fp64", "[3,2]", "input") "," TEN(5, "beta", "fp64", "[3,2]", "input")
                 "," TEN(6, "cu", "int64", "[3]", "input") ","
                 TEN(7, "h0", "fp64", "[2,2,2,2]", "input") ","
                 TEN(8, "o", "fp64", "[3,2,2]", "output") ","
                 TEN(9, "hT", "fp64", "[2,2,2,2]", "output"),
                 NODE("gdn", "'q':1,'k':2,'v':3,'g':4,'beta':5,'cu_seqlens':6,'initial_state':7",
                      "'O':8,'final_state':9",
                      "'scale':0.7,'use_qk_l2norm':true,'use_beta_sigmoid':true")),
           vb, 9);
  double wO[T][HV][V], wHT[N][HV][V][K];
  for (int s = 0; s < N; s++)
    for (int j = 0; j < HV; j++) {
      double S[K][V];
      for (int a = 0; a < K; a++)
        for (int c = 0; c < V; c++) S[a][c] = H0[s][j][c][a];
      for (int t = (int)CU[s]; t < (int)CU[s + 1]; t++) {
        double qn = sqrt(Q[t][0] * Q[t][0] + Q[t][1] * Q[t][1] + 1e-6);
        double kn = sqrt(Kk[t][0] * Kk[t][0] + Kk[t][1] * Kk[t][1] + 1e-6);
        double qh[K] = {Q[t][0] / qn, Q[t][1] / qn}, kh[K] = {Kk[t][0] / kn, Kk[t][1] / kn};
        double al = exp(G[t][j]), be = 1 / (1 + exp(-Bt[t][j])), NS[K][V];
        for (int a = 0; a < K; a++)
          for (int c = 0; c < V; c++) {
            double m = 0; /* ((I - b k k^T) S)[a][c] */
            for (int d = 0; d < K; d++) m += ((a == d) - be * kh[a] * kh[d]) * S[d][c];
            NS[a][c] = al * m + be * kh[a] * Vv[t][j][c];
          }
        memcpy(S, NS, sizeof S);
        for (int c = 0; c < V; c++) wO[t][j][c] = scale * (S[0][c] * qh[0] + S[1][c] * qh[1]);
      }
      for (int a = 0; a < K; a++)
        for (int c = 0; c < V; c++) wHT[s][j][c][a] = S[a][c];
    }
  OK(rc == 0 && close_to(&O[0][0][0], &wO[0][0][0], T * HV * V, 1e-13),
     "gdn GVA, l2 norm, beta sigmoid, two sequences: O");
  OK(rc == 0 && close_to(&HT[0][0][0][0], &wHT[0][0][0][0], N * HV * V * K, 1e-13),
     "gdn final_state [N, HV, V, K]");
}

/* Paged K/V (OPS.md §7.4): blocks of 2 keys through page tables give what the dense sdpa
 * gives on the gathered keys; a table entry past a sequence's length is never read, and one
 * that names no block is an error. */
static void test_sdpa_paged(void) {
  double q[4] = {1, 0.5, -1, 2}, kc[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  double vc[12] = {-1, 2, -3, 4, -5, 6, -7, 8, -9, 10, -11, 12};
  double kt[4] = {2, 0, 1, 99}, vt[4] = {2, 0, 1, 99}, lq[2] = {1, 1}, lk[2] = {3, 2};
  /* dense: b0 keys = blocks 2, 0 (first key) -> (9,10) (11,12) (1,2); b1 = block 1 -> (5,6) (7,8) */
  double kd[12] = {9, 10, 11, 12, 1, 2, 5, 6, 7, 8, 0, 0}, vd[12] = {-9, 10, -11, 12, -1, 2, -5, 6, -7, 8, 0, 0};
  double op[4], od[4];
  kiln_ref_buffer b[] = {BUF(1, q), BUF(2, kc), BUF(3, vc), BUF(4, kt), BUF(5, vt), BUF(6, lq),
                         BUF(7, lk), BUF(8, kd), BUF(9, vd), BUF(10, op), BUF(11, od)};
  const char *g = GRAPH(TEN(1, "q", "fp32", "[2,1,1,2]", "input") ","
                        TEN(2, "kc", "fp32", "[3,1,2,2]", "input") ","
                        TEN(3, "vc", "fp32", "[3,1,2,2]", "input") ","
                        TEN(4, "kt", "int32", "[2,1,2,1]", "input") ","
                        TEN(5, "vt", "int32", "[2,1,2,1]", "input") ","
                        TEN(6, "lq", "int32", "[2,1,1,1]", "input") ","
                        TEN(7, "lk", "int32", "[2,1,1,1]", "input") ","
                        TEN(8, "kd", "fp32", "[2,1,3,2]", "input") ","
                        TEN(9, "vd", "fp32", "[2,1,3,2]", "input") ","
                        TEN(10, "op", "fp64", "[2,1,1,2]", "output") ","
                        TEN(11, "od", "fp64", "[2,1,1,2]", "output"),
                        NODE("sdpa", "'q':1,'k':2,'v':3,'paged_attention_k_table':4,'paged_attention_v_table':5,"
                             "'seq_len_q':6,'seq_len_kv':7", "'O':10",
                             "'paged_attention_max_seq_len_kv':3,'use_padding_mask':true,'attn_scale':0.3") ","
                        NODE("sdpa", "'q':1,'k':8,'v':9,'seq_len_q':6,'seq_len_kv':7", "'O':11",
                             "'use_padding_mask':true,'attn_scale':0.3"));
  int rc = run(g, b, 11);
  OK(rc == 0 && close_to(op, od, 4, 1e-15), "sdpa paged K/V equals dense on the gathered keys");
  kt[0] = 3;
  OK(fails_with(g, b, 11, "E_SHAPE") && strstr(err.msg, "not a block"), "a page table entry past the blocks is E_SHAPE");
}

/* gdn's states are checked at the io dtype's tolerance (a chunked kernel's bf16 products); its
 * O, and every other op's outputs, at their own */
static void test_check_dtype(void) {
  const char *g = "{\"tensors\": [{\"uid\": 1, \"dtype\": \"bf16\"}, {\"uid\": 5, \"dtype\": \"fp32\"}],"
                  " \"nodes\": [{\"op\": \"gdn\", \"inputs\": {\"q\": 1}, \"outputs\": {\"O\": 2, \"final_state\": 3}},"
                  " {\"op\": \"matmul\", \"inputs\": {\"A\": 5}, \"outputs\": {\"C\": 4}}]}";
  const char *fs = kiln_ref_check_dtype(g, 3);
  OK(fs && strcmp(fs, "bf16") == 0, "check dtype: gdn's final_state at q's bf16");
  OK(kiln_ref_check_dtype(g, 2) == NULL, "check dtype: gdn's O at its own");
  OK(kiln_ref_check_dtype(g, 4) == NULL, "check dtype: a matmul's output at its own");
  OK(kiln_ref_check_dtype("not json", 3) == NULL, "check dtype: a malformed graph: none");
}

/* block_scale_quantize with fp32 scales (OPS.md §10.2): scale = amax / 448, y = v * (448 / amax)
 * in fp32; an all-zero block gets scale 1; a multiplier past fp32's range is FLT_MAX. */
static void test_quant_fp32(void) {
  float tiny = 1e-37f;
  double x[20] = {3.5, -1, 0.1, 0, 0, 0, 0, 0, 896, 448, 224, 1e-3,
                  3, 1, -2, 1.5, tiny, 0, -0.5 * tiny, 0};
  double y[20], s[5], d[20];
  kiln_ref_buffer b[] = {BUF(1, x), BUF(2, y), BUF(3, s), BUF(4, d)};
  int rc = run(GRAPH(TEN(1, "x", "fp32", "[1,20]", "input") ","
                     TEN(2, "y", "fp8_e4m3", "[1,20]", "output") ","
                     TEN(3, "s", "fp32", "[1,5]", "output") ","
                     TEN(4, "d", "fp32", "[1,20]", "output"),
                     NODE("block_scale_quantize", "'input':1", "'Y':2,'scale':3", "'block_size':4") ","
                     NODE("block_scale_dequantize", "'input':2,'descale':3", "'Y':4",
                          "'block_size':[1,4]")),
               b, 4);
  /* 0.1 * 128 = 12.8 -> 13; 3 * fl(448/3) rounds to 448; 1 * 149.33 -> 144; the tiny block:
   * 1e-37 * FLT_MAX = 34.03 -> 36 */
  double ws[5] = {1.0 / 128, 1, 2, (double)(3.0f / 448.0f), (double)(tiny / 448.0f)};
  double wy[20] = {448, -128, 13, 0, 0, 0, 0, 0, 448, 224, 112, 0,
                   448, 144, -288, 224, 36, 0, -18, 0};
  OK(rc == 0 && close_to(s, ws, 5, 0), "block_scale_quantize fp32 scales (amax / 448; 1 for zeros)");
  OK(rc == 0 && close_to(y, wy, 20, 0), "block_scale_quantize data with fp32 scales");
  OK(rc == 0 && d[0] == 3.5 && d[9] == 448 && d[2] == 13.0 / 128, "block_scale_dequantize with fp32 scales");

  double ex[4] = {1, 2, 3, 4}, ey[4], es[1];
  kiln_ref_buffer eb[] = {BUF(1, ex), BUF(2, ey), BUF(3, es)};
  OK(fails_with(GRAPH(TEN(1, "x", "fp32", "[1,4]", "input") ","
                      TEN(2, "y", "fp8_e4m3", "[1,4]", "output") ","
                      TEN(3, "s", "fp16", "[1,1]", "output"),
                      NODE("block_scale_quantize", "'input':1", "'Y':2,'scale':3", "'block_size':4")),
                eb, 3, "E_DTYPE"),
     "block_scale_quantize: an fp16 scale is E_DTYPE");
}

int main(void) {
  test_check_dtype();
  test_pointwise();
  test_reduction();
  test_norms();
  test_softmax();
  test_matmul();
  test_rounding_and_dims();
  test_errors();
  test_quant_conv();
  test_quant_fp32();
  test_sdpa_gdn();
  test_sdpa_paged();
  test_more_norms();
  test_more_misc();
  test_sdpa_backward();
  test_gdn_backward();
  TAP_PLAN(tap_n);
  return TAP_DONE();
}
