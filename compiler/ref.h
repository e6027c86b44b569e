/* kiln reference executor: evaluates a graph JSON (docs/INTERNALS.md) on the CPU in fp64.
 * It is the oracle every GPU kernel is checked against; the math is docs/OPS.md.
 * Ops: the 50 pointwise modes + atan2 (and the aliases bias, scale, leaky_relu,
 * leaky_relu_backward), reduction, layernorm, rmsnorm, adalayernorm, instancenorm,
 * batchnorm, batchnorm_inference and their *_backward, softmax, log_softmax and their
 * *_backward, matmul, block_scale_quantize, block_scale_dequantize, causal_conv1d(_backward),
 * sdpa, sdpa_backward, gdn, gdn_bwd. An op, port or attribute value it cannot evaluate
 * (sdpa dropout/paging/ragged, sdpa_fp8, ...) is E_UNKNOWN_OP "reference executor has no ...",
 * never a guess. */
#ifndef KILN_REF_H
#define KILN_REF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* The value of one dynamic dim of the graph. */
typedef struct {
  const char *name;
  int64_t value;
} kiln_ref_dim;

/* One non-virtual tensor (input, output, scalar): logical row-major contiguous fp64 values,
 * already decoded and de-strided by the caller. Inputs are read, outputs are written (rounded
 * to the tensor's dtype). numel must equal the product of the tensor's dims. */
typedef struct {
  int64_t uid;
  double *data;
  size_t numel;
} kiln_ref_buffer;

/* Parses and validates graph_json (typed errors E_JSON, E_JSON_VERSION, E_UID, E_DANGLING,
 * E_CYCLE, E_SPEC, E_DTYPE, E_SHAPE, E_PORT, E_ATTR, E_UNKNOWN_OP), resolves the dynamic dims
 * from dims[0..ndims), binds bufs by uid and evaluates every node in order in fp64.
 * Returns 0, or -1 with e set; on error the output buffers may be partly written. */
int kiln_ref_eval(const char *graph_json, const kiln_ref_dim *dims, int ndims,
                  kiln_ref_buffer *bufs, int nbufs, kiln_err *e);

/* The dtype whose tolerance output `uid` of graph_json is checked at, when its op's kernels may
 * legitimately compute it through narrower operands than it is stored in (gdn's fp32 states
 * from a chunked kernel's bf16/fp16 products, as FLA and cuDNN check them): the io dtype of the
 * node that produces it, as a static name ("bf16"); NULL: the tensor's own dtype. */
const char *kiln_ref_check_dtype(const char *graph_json, int64_t uid);

#endif
