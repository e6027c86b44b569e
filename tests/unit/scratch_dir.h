/* Helpers of the unit tests that work in scratch directories: removing one, short sleeps. */
#ifndef KILN_TEST_SCRATCH_DIR_H
#define KILN_TEST_SCRATCH_DIR_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tap.h"

static inline void rm_rf(const char *path) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) DIAG("could not remove %s", path);
}

static inline void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

#endif
