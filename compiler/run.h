/* kiln compiler: `kiln run` — launch a plan on the GPU with fresh random inputs, compare
 * every output with the reference executor, and optionally time it. */
#ifndef KILN_RUN_H
#define KILN_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

/* An integer input drawn from [lo, hi] instead of small random integers: the lengths and
 * page tables of attention, which must lie within their tensors (kind UNIFORM); sequence
 * boundaries, sorted from lo to hi (BOUNDS: gdn's cu_seqlens); distinct rows (DISTINCT: gdn's
 * state_indices into a pool). */
enum { KILN_RANGE_UNIFORM = 0, KILN_RANGE_BOUNDS = 1, KILN_RANGE_DISTINCT = 2 };
typedef struct kiln_run_range {
  int64_t uid, lo, hi;
  int kind;
} kiln_run_range;

typedef struct kiln_run_opts {
  const void *const *packs; /* npacks packs, each holding a candidate plan of one graph instance */
  const size_t *pack_sizes;
  int npacks;
  const char *graph, *instance;
  const char *const *dim_names; /* values of the plan's dynamic dims */
  const int64_t *dim_values;
  int ndims;
  int check;               /* compare with the reference executor */
  int bench;               /* time the launch */
  int iters;               /* timed samples (default 100) */
  int quiet;               /* report mismatched outputs only */
  uint64_t seed;           /* 0: fresh from the clock */
  const kiln_run_range *ranges; /* integer inputs with a range of their own */
  int nranges;
  FILE *out;               /* report lines */
} kiln_run_opts;

typedef struct kiln_run_result {
  int mismatched_outputs;  /* outputs outside tolerance */
  double median_ms;        /* bench: median time per launch */
  int samples;             /* bench: timed samples */
  int replays;             /* bench: launches per CUDA graph replay (0: launches timed one by one) */
  double bytes;            /* minimal bytes the plan moves (inputs read + outputs written once) */
} kiln_run_result;

/* CLOCK_MONOTONIC ms at the start of main (set by the kiln executable), so kiln run can
 * report kiln's own part of start-up to first launch. */
extern double kiln_main_start_ms;
double kiln_now_ms(void);

/* The arch string of device 0 ("sm_90a" for compute capability 9.0); E_CUDA without one. */
int kiln_run_device_arch(char *arch, size_t n, char *name, size_t name_n, kiln_err *e);

/* Runs each of o's packs on the same random inputs (the reference executor runs once): 0 with
 * r[0 .. npacks-1] filled (check mismatches are reported in r, not as an error), -1 with e on
 * a failure to run at all. */
int kiln_run(const kiln_run_opts *o, kiln_run_result *r, kiln_err *e);

#endif
