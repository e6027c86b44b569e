/* kiln as a library: kiln_jit_build JIT-compiles a spec through the cache into a pack that
 * libkilnrt opens from memory; a second build is served by the cache; bad specs give the
 * spec's typed error. Needs NVRTC (skips without it). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jit.h"
#include "kiln.h"
#include "tap.h"

int main(void) {
  if (access("/usr/local/cuda/lib64/libnvrtc.so.13", R_OK) != 0 && !getenv("KILN_NVRTC_PATH"))
    return TAP_SKIP_ALL("NVRTC not installed");
  TAP_PLAN(7);
  char dir[] = "/tmp/kiln-jit-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("KILN_CACHE_DIR", dir, 1);
  const char *archs[] = {"sm_90a", "sm_80"}, *sets[] = {"H=4096"};
  void *pack = NULL;
  size_t size = 0;
  kiln_err e = {0};
  int rc = kiln_jit_build("specs/swiglu.lua", archs, 2, sets, 1, &pack, &size, &e);
  OK(rc == 0 && pack && size > 0, "kiln_jit_build returns a pack (%zu bytes)%s%s", size, rc ? ": " : "", rc ? e.msg : "");
  kiln_rt *rt = NULL;
  kiln_pack *p = NULL;
  kiln_plan *plan = NULL;
  OK(kiln_rt_create(&rt) == KILN_OK && kiln_pack_open_memory(rt, pack, size, &p) == KILN_OK,
     "libkilnrt opens it from memory");
  OK(p && kiln_plan_get(p, "swiglu", "H=4096", &plan) == KILN_OK, "the plan swiglu [H=4096] is in it");
  if (p) kiln_pack_close(p);
  kiln_rt_destroy(rt);
  free(pack);
  pack = NULL;
  setenv("KILN_JIT", "strict", 1); /* a second build must not compile: strict proves the cache serves it */
  rc = kiln_jit_build("specs/swiglu.lua", archs, 2, sets, 1, &pack, &size, &e);
  OK(rc == 0 && pack, "a second build is served by the cache (KILN_JIT=strict)%s%s", rc ? ": " : "", rc ? e.msg : "");
  free(pack);
  unsetenv("KILN_JIT");
  rc = kiln_jit_build("tests/specs/bad/shape_mismatch.lua", archs, 1, NULL, 0, &pack, &size, &e);
  OK(rc == -1 && e.code && !strcmp(e.code, "E_SHAPE") && strstr(e.msg, "shape_mismatch.lua:4"),
     "a bad spec gives its typed error with the spec line (%s: %s)", e.code ? e.code : "?", e.msg);
  rc = kiln_jit_build("tests/specs/bad/os_execute.lua", archs, 1, NULL, 0, &pack, &size, &e);
  OK(rc == -1 && e.code && !strcmp(e.code, "E_SANDBOX"), "the sandbox holds in the library too");
  rc = kiln_jit_build("specs/swiglu.lua", archs, 1, (const char *[]){"H"}, 1, &pack, &size, &e);
  OK(rc == -1 && e.code && !strcmp(e.code, "E_USAGE"), "a malformed dim setting is E_USAGE");
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) DIAG("could not remove %s", dir);
  return TAP_DONE();
}
