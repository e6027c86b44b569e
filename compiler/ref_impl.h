/* kiln reference executor, private: the parsed graph, the op table entry, and the helpers
 * (ports, attributes, broadcasting iterator) shared by the op family files ref_*.c. */
#ifndef KILN_REF_IMPL_H
#define KILN_REF_IMPL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define KILN_REF_MAXRANK 8
#define KILN_REF_MAXPORTS 32

typedef enum { REF_INPUT, REF_OUTPUT, REF_VIRTUAL, REF_CONSTANT, REF_SCALAR } ref_role;

typedef struct {
  int64_t uid;
  const char *name, *dtype;
  ref_role role;
  int rank;
  int64_t dims[KILN_REF_MAXRANK];
  size_t numel;
  double *data; /* caller's buffer (input/output/scalar) or owned (virtual/constant) */
  int owned;
  int producer; /* index of the producing node, -1 if none */
} ref_tensor;

typedef struct {
  const char *port;
  ref_tensor *t;
} ref_port;

typedef struct {
  const char *op, *name, *compute_dtype;
  json_t *attrs; /* a JSON object, never NULL */
  int nin, nout;
  ref_port in[KILN_REF_MAXPORTS], out[KILN_REF_MAXPORTS];
} ref_node;

typedef struct ref_op ref_op;

/* Evaluates node n in fp64 into its output tensors' data (rounding is the driver's job). */
typedef int (*ref_eval_fn)(const ref_op *op, const ref_node *n, kiln_err *e);

/* One op the reference knows. Port names list alternatives as "python_name|CPP_NAME". */
struct ref_op {
  const char *name;
  const char *const *inputs;  /* NULL-terminated */
  const char *const *outputs; /* NULL-terminated */
  const char *const *attrs;   /* NULL-terminated known attribute names */
  ref_eval_fn eval;
  const void *impl; /* family-private data (e.g. the pointwise formula) */
};

/* Op families: each returns its entry for name, or NULL. */
const ref_op *kiln__ref_pointwise_op(const char *name);
const ref_op *kiln__ref_reduce_op(const char *name);
const ref_op *kiln__ref_norm_op(const char *name);
const ref_op *kiln__ref_softmax_op(const char *name);
const ref_op *kiln__ref_matmul_op(const char *name);
const ref_op *kiln__ref_quant_op(const char *name);
const ref_op *kiln__ref_conv_op(const char *name);
const ref_op *kiln__ref_attention_op(const char *name);
const ref_op *kiln__ref_gdn_op(const char *name);

/* Does the port name match the alternatives "a|B"? */
int kiln__ref_port_match(const char *alts, const char *port);

/* The tensor bound to input/output port alts, or NULL when absent. */
ref_tensor *kiln__ref_in(const ref_node *n, const char *alts);
ref_tensor *kiln__ref_out(const ref_node *n, const char *alts);
/* Same, but an absent port is an E_PORT error. */
int kiln__ref_need_in(const ref_node *n, const char *alts, ref_tensor **t, kiln_err *e);
int kiln__ref_need_out(const ref_node *n, const char *alts, ref_tensor **t, kiln_err *e);

/* A feature of the op that the reference does not evaluate: E_UNKNOWN_OP "reference executor
 * has no <op> with <what>", so callers can tell "cannot check" from a wrong graph. */
int kiln__ref_unsupported(const ref_node *n, const char *what, kiln_err *e);
/* kiln__ref_unsupported for the first of ports (NULL-terminated) that the node binds. */
int kiln__ref_reject_ports(const ref_node *n, const char *const *ports, kiln_err *e);

/* Attributes: absent or JSON null gives the default; a wrong type is E_ATTR. Numbers also
 * accept the strings "inf", "-inf", "nan". */
int kiln__ref_attr_has(const ref_node *n, const char *name);
int kiln__ref_attr_num(const ref_node *n, const char *name, double def, double *v, kiln_err *e);
int kiln__ref_attr_int(const ref_node *n, const char *name, int64_t def, int64_t *v, kiln_err *e);
int kiln__ref_attr_bool(const ref_node *n, const char *name, int def, int *v, kiln_err *e);
int kiln__ref_attr_str(const ref_node *n, const char *name, const char *def, const char **v,
                       kiln_err *e);

/* The value of a one-element tensor (scalar, constant, [1,1,..]); E_SHAPE otherwise. */
int kiln__ref_scalar(const ref_tensor *t, double *v, kiln_err *e);

/* E_SHAPE unless t has exactly these dims. */
int kiln__ref_check_dims(const ref_tensor *t, int rank, const int64_t *dims, const char *what,
                         kiln_err *e);

/* The last n dims of t into dims; leading extents beyond n must be 1 (else E_SHAPE). */
int kiln__ref_tail_dims(const ref_tensor *t, int n, int64_t *dims, const char *what,
                        kiln_err *e);

/* calloc of n doubles; NULL with E_LIMIT when out of memory. */
double *kiln__ref_alloc(size_t n, kiln_err *e);

/* Row-major walk over dims carrying the matching linear offset of up to eight other tensors,
 * broadcast right-aligned (extent equal, or 1 which repeats; extra leading dims of 1). */
#define KILN_REF_ITER_MAX 8
typedef struct {
  int rank, nt;
  int64_t dims[KILN_REF_MAXRANK], coord[KILN_REF_MAXRANK];
  int64_t stride[KILN_REF_ITER_MAX][KILN_REF_MAXRANK];
  size_t off[KILN_REF_ITER_MAX];
} ref_iter;

void kiln__ref_iter_init(ref_iter *it, int rank, const int64_t *dims);
/* Adds a tensor of dims tdims; returns its slot, or -1 with E_SHAPE naming what. */
int kiln__ref_iter_add(ref_iter *it, int trank, const int64_t *tdims, const char *what,
                       kiln_err *e);
void kiln__ref_iter_next(ref_iter *it);

/* Formats dims as "[2,3]" into buf (for messages). */
const char *kiln__ref_dims_str(int rank, const int64_t *dims, char *buf, size_t len);

#endif
