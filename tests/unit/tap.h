/* Minimal TAP producer for kiln's C unit tests (run by prove). */
#ifndef KILN_TAP_H
#define KILN_TAP_H

#include <stdio.h>

static int tap_n, tap_failed;

#define TAP_PLAN(n) printf("1..%d\n", (n))
#define TAP_SKIP_ALL(why) (printf("1..0 # SKIP %s\n", (why)), 0)
#define OK(cond, ...)                                                   \
  do {                                                                  \
    int ok_ = !!(cond);                                                 \
    tap_failed += !ok_;                                                 \
    printf("%sok %d - ", ok_ ? "" : "not ", ++tap_n);                   \
    printf(__VA_ARGS__);                                                \
    printf("\n");                                                       \
    if (!ok_) printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
    fflush(stdout);                                                     \
  } while (0)
#define DIAG(...) (printf("# "), printf(__VA_ARGS__), printf("\n"))
#define TAP_DONE() (tap_failed ? 1 : 0)

#endif
