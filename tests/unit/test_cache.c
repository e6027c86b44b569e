/* Unit tests for compiler/cache.c: keys, entries, corruption, LRU bound, maintenance,
 * and many processes writing the same keys at once. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "scratch_dir.h"
#include "tap.h"

static char root[256];

static const char *opts2[] = {"--std=c++17", "-default-device"};
static kiln_cache_keyparts base_parts(void) {
  kiln_cache_keyparts kp = {"0.1.0", "13.0", "sm_90a", "kiln_k", "extern \"C\" __global__ void kiln_k() {}",
                            opts2, 2};
  return kp;
}

/* Deterministic payload for key index i. */
static size_t payload(int i, unsigned char *buf, size_t cap) {
  size_t n = 1000 + (size_t)i * 997 % 30000;
  if (n > cap) n = cap;
  unsigned x = 2166136261u ^ (unsigned)i;
  for (size_t k = 0; k < n; k++) buf[k] = (unsigned char)((x = x * 16777619u + 1u) >> 24);
  return n;
}

static void key_for(int i, char key[33]) {
  char sym[32];
  snprintf(sym, sizeof sym, "kiln_mp_%d", i);
  kiln_cache_keyparts kp = base_parts();
  kp.symbol = sym;
  kiln_cache_key(&kp, key);
}

static void test_keys(void) {
  kiln_cache_keyparts kp = base_parts();
  char k0[33], k1[33];
  kiln_cache_key(&kp, k0);
  kiln_cache_key(&kp, k1);
  OK(strlen(k0) == 32 && strcmp(k0, k1) == 0, "key is stable and 32 hex chars (%s)", k0);
  /* a fixed value: keys must not drift between builds, machines or xxhash releases */
  OK(strcmp(k0, "e031ebaec04ca53fd3d7c15a74d24967") == 0, "key has its known value");

  const char *o_reordered[] = {"-default-device", "--std=c++17"};
  const char *o_joined[] = {"--std=c++17-default-device"};
  const char *o_more[] = {"--std=c++17", "-default-device", "-lineinfo"};
  struct {
    const char *what;
    kiln_cache_keyparts kp;
  } variants[] = {
      {"kiln version", {"0.1.1", "13.0", "sm_90a", "kiln_k", kp.source, opts2, 2}},
      {"nvrtc version", {"0.1.0", "12.8", "sm_90a", "kiln_k", kp.source, opts2, 2}},
      {"arch", {"0.1.0", "13.0", "sm_90", "kiln_k", kp.source, opts2, 2}},
      {"symbol", {"0.1.0", "13.0", "sm_90a", "kiln_j", kp.source, opts2, 2}},
      {"source", {"0.1.0", "13.0", "sm_90a", "kiln_k", "extern \"C\" __global__ void kiln_k() { }", opts2, 2}},
      {"option order", {"0.1.0", "13.0", "sm_90a", "kiln_k", kp.source, o_reordered, 2}},
      {"option split", {"0.1.0", "13.0", "sm_90a", "kiln_k", kp.source, o_joined, 1}},
      {"extra option", {"0.1.0", "13.0", "sm_90a", "kiln_k", kp.source, o_more, 3}},
      {"no options", {"0.1.0", "13.0", "sm_90a", "kiln_k", kp.source, NULL, 0}},
      /* parts are length-prefixed: moving bytes between neighbours changes the key */
      {"part boundary", {"0.1.013.0", "", "sm_90a", "kiln_k", kp.source, opts2, 2}},
  };
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    char kv[33];
    kiln_cache_key(&variants[i].kp, kv);
    OK(strcmp(kv, k0) != 0, "key changes with %s", variants[i].what);
  }
}

static void test_roundtrip(kiln_cache *c) {
  kiln_err e;
  kiln_cache_keyparts kp = base_parts();
  char key[33];
  kiln_cache_key(&kp, key);
  void *data = NULL;
  size_t size = 0;
  OK(kiln_cache_get(c, key, &data, &size, &e) == 0 && !data, "empty cache misses");
  unsigned char buf[40000];
  size_t n = payload(7, buf, sizeof buf);
  OK(kiln_cache_put(c, key, &kp, buf, n, &e) == 0, "put");
  int hit = kiln_cache_get(c, key, &data, &size, &e);
  OK(hit == 1 && size == n && memcmp(data, buf, n) == 0, "get returns the bytes put");
  free(data);
  OK(kiln_cache_get(c, "not-a-key", &data, &size, &e) == -1 && !strcmp(e.code, "E_CACHE"),
     "malformed key is E_CACHE");
  char path[4096];
  struct stat st;
  OK(kiln_cache_entry_path(c, key, path, sizeof path, &e) == 0 && stat(path, &st) == 0 &&
         (st.st_mode & 0777) == 0644,
     "entry file exists, mode 0644");
  OK(kiln_cache_put(c, key, &kp, NULL, 0, &e) == 0 && kiln_cache_get(c, key, &data, &size, &e) == 1 &&
         size == 0,
     "empty payload roundtrips");
  free(data);
}

/* Writes the entry for key, then lets damage() change its file; a get must miss and
 * remove the file. */
static void check_damage(kiln_cache *c, const char *what, int how) {
  kiln_err e;
  kiln_cache_keyparts kp = base_parts();
  kp.symbol = what;
  char key[33], path[4096];
  kiln_cache_key(&kp, key);
  unsigned char buf[5000];
  size_t n = payload(3, buf, sizeof buf);
  kiln_cache_put(c, key, &kp, buf, n, &e);
  kiln_cache_entry_path(c, key, path, sizeof path, &e);
  struct stat st;
  stat(path, &st);
  int fd = open(path, O_RDWR);
  if (how == 0) {
    if (ftruncate(fd, st.st_size - 100) != 0) DIAG("ftruncate failed");
  } else {
    off_t at = how == 1 ? st.st_size - 10 : 0; /* a payload byte, or the magic */
    unsigned char b;
    if (pread(fd, &b, 1, at) != 1) DIAG("pread failed");
    b ^= 0x40;
    if (pwrite(fd, &b, 1, at) != 1) DIAG("pwrite failed");
  }
  close(fd);
  void *data = NULL;
  size_t size = 0;
  int rc = kiln_cache_get(c, key, &data, &size, &e);
  OK(rc == 0 && !data && access(path, F_OK) != 0 && errno == ENOENT,
     "%s entry is a miss and is removed", what);
  OK(kiln_cache_put(c, key, &kp, buf, n, &e) == 0 && kiln_cache_get(c, key, &data, &size, &e) == 1 &&
         size == n && !memcmp(data, buf, n),
     "%s entry can be written again", what);
  free(data);
}

static void test_damage(kiln_cache *c) {
  check_damage(c, "truncated", 0);
  check_damage(c, "flipped_payload", 1);
  check_damage(c, "flipped_magic", 2);
}

static void report_bad(void *ctx, const char *path, const char *problem) {
  (void)path;
  snprintf(ctx, 256, "%s", problem);
}

static void test_maintenance(kiln_cache *c) {
  kiln_err e;
  kiln_cache_stats st;
  OK(kiln_cache_stat(c, &st, &e) == 0 && st.entries == 4 && st.bytes > 3 * 3991,
     "stat counts 4 entries, %llu bytes", st.bytes);
  char problem[256] = "";
  OK(kiln_cache_verify(c, 0, report_bad, problem, &e) == 0, "verify finds nothing wrong");

  /* damage one entry behind the cache's back: verify reports it and removes it */
  kiln_cache_keyparts kp = base_parts();
  char key[33], path[4096];
  kiln_cache_key(&kp, key);
  kiln_cache_entry_path(c, key, path, sizeof path, &e);
  int fd = open(path, O_WRONLY | O_APPEND);
  OK(fd >= 0 && write(fd, "x", 1) == 1, "append a byte to an entry");
  close(fd);
  OK(kiln_cache_verify(c, 0, report_bad, problem, &e) == 1 && strstr(problem, "size") &&
         access(path, F_OK) == 0,
     "verify reports the bad entry (%s) and keeps it when asked", problem);
  OK(kiln_cache_verify(c, 1, NULL, NULL, &e) == 1 && access(path, F_OK) != 0,
     "verify removes the bad entry");
  OK(kiln_cache_verify(c, 1, NULL, NULL, &e) == 0, "verify is clean afterwards");

  /* why: explain a miss by the entries of the same symbol */
  kiln_cache_keyparts want = base_parts();
  want.symbol = "truncated";
  char *why = NULL;
  OK(kiln_cache_why(c, &want, &why, &e) == 0 && why && strstr(why, "is cached"),
     "why says an existing key hits");
  free(why);
  const char *o3[] = {"--std=c++17", "-default-device", "-lineinfo"};
  want.opts = o3;
  want.nopts = 3;
  want.source = "extern \"C\" __global__ void kiln_k() { /* changed */ }";
  OK(kiln_cache_why(c, &want, &why, &e) == 0 && why && strstr(why, "options") &&
         strstr(why, "source") && !strstr(why, "arch ("),
     "why names the differing options and source");
  for (char *line = why ? strtok(why, "\n") : NULL; line; line = strtok(NULL, "\n"))
    DIAG("why: %s", line);
  free(why);
  want = base_parts();
  want.symbol = "truncated";
  want.arch = "sm_100a";
  OK(kiln_cache_why(c, &want, &why, &e) == 0 && why && strstr(why, "only for other archs") &&
         strstr(why, "sm_90a"),
     "why lists the archs a symbol is cached for");
  free(why);
  want.symbol = "nothing_like_it";
  OK(kiln_cache_why(c, &want, &why, &e) == 0 && why && strstr(why, "no cached entry"),
     "why says when the symbol is not cached at all");
  free(why);

  OK(kiln_cache_clear(c, &e) == 3 && kiln_cache_stat(c, &st, &e) == 0 && st.entries == 0 &&
         st.bytes == 0,
     "clear removes every entry");
}

static void test_lru(void) {
  kiln_err e;
  kiln_cache *c = NULL;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/lru", root);
  unsigned long long sz;
  OK(kiln_cache_parse_size("35K", &sz) == 0 && sz == 35 * 1024 &&
         kiln_cache_parse_size("2GiB", &sz) == 0 && sz == 2ull << 30 &&
         kiln_cache_parse_size("512m", &sz) == 0 && sz == 512ull << 20 &&
         kiln_cache_parse_size("12345", &sz) == 0 && sz == 12345 &&
         kiln_cache_parse_size("0", &sz) != 0 && kiln_cache_parse_size("1X", &sz) != 0 &&
         kiln_cache_parse_size("", &sz) != 0,
     "size parsing");
  setenv("KILN_CACHE_MAXSIZE", "lots", 1);
  OK(kiln_cache_open(dir, &c, &e) == -1 && !strcmp(e.code, "E_USAGE"),
     "bad KILN_CACHE_MAXSIZE is E_USAGE");
  setenv("KILN_CACHE_MAXSIZE", "35K", 1);
  OK(kiln_cache_open(dir, &c, &e) == 0 && kiln_cache_maxsize(c) == 35840, "open with a 35K bound");
  unsetenv("KILN_CACHE_MAXSIZE");
  if (!c) return;
  /* 10000-byte payloads: three entries fit in 35K, four do not */
  unsigned char buf[10000];
  char keys[5][33];
  for (int i = 0; i < 3; i++) {
    key_for(100 + i, keys[i]);
    memset(buf, 'a' + i, sizeof buf);
    kiln_cache_put(c, keys[i], NULL, buf, sizeof buf, &e);
    sleep_ms(15); /* file times tick in jiffies */
  }
  void *data = NULL;
  size_t size;
  OK(kiln_cache_get(c, keys[0], &data, &size, &e) == 1, "hit the oldest entry (refreshes it)");
  free(data);
  sleep_ms(15);
  key_for(103, keys[3]);
  memset(buf, 'd', sizeof buf);
  OK(kiln_cache_put(c, keys[3], NULL, buf, sizeof buf, &e) == 0, "a fourth put");
  int present[4];
  for (int i = 0; i < 4; i++) {
    present[i] = kiln_cache_get(c, keys[i], &data, &size, &e);
    free(data);
  }
  OK(present[0] == 1 && present[1] == 0 && present[2] == 1 && present[3] == 1,
     "the least recently used entry was evicted (%d %d %d %d)", present[0], present[1],
     present[2], present[3]);
  kiln_cache_stats st;
  OK(kiln_cache_stat(c, &st, &e) == 0 && st.entries == 3 && st.bytes <= 35840,
     "the cache stays within its bound (%llu bytes)", st.bytes);
  unsigned long long freed = 0;
  OK(kiln_cache_gc(c, 20000, &freed, &e) == 2 && freed > 20000 && kiln_cache_stat(c, &st, &e) == 0 &&
         st.entries == 1,
     "gc to 20000 bytes evicts two entries");
  kiln_cache_close(c);
}

/* Each child: for 20 keys (in its own order), lock, re-check, put if missing, unlock,
 * read back without a lock. Exits with the number of wrong answers. */
static int child(kiln_cache *c, int id) {
  int wrong = 0;
  unsigned char want[40000];
  for (int n = 0; n < 20; n++) {
    int i = (n + id * 7) % 20;
    char key[33];
    key_for(i, key);
    size_t len = payload(i, want, sizeof want);
    kiln_err e;
    int fd;
    void *data = NULL;
    size_t size = 0;
    if (kiln_cache_lock(c, key, &fd, &e) != 0) {
      wrong++;
      continue;
    }
    int hit = kiln_cache_get(c, key, &data, &size, &e);
    if (hit == 0) {
      char sym[32];
      snprintf(sym, sizeof sym, "kiln_mp_%d", i);
      kiln_cache_keyparts kp = base_parts();
      kp.symbol = sym;
      if (kiln_cache_put(c, key, &kp, want, len, &e) != 0) wrong++;
    } else if (hit < 0 || size != len || memcmp(data, want, len) != 0) {
      wrong++;
    }
    free(data);
    kiln_cache_unlock(fd);
    /* readers take no lock */
    for (int r = 0; r < 20; r++) {
      char other[33];
      key_for(r, other);
      size_t olen = payload(r, want, sizeof want);
      int h = kiln_cache_get(c, other, &data, &size, &e);
      if (h < 0 || (h == 1 && (size != olen || memcmp(data, want, olen) != 0))) wrong++;
      free(data);
      data = NULL;
    }
  }
  return wrong;
}

static void test_processes(void) {
  kiln_err e;
  kiln_cache *c = NULL;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/mp", root);
  if (kiln_cache_open(dir, &c, &e) != 0) {
    OK(0, "open the shared cache: %s", e.msg);
    return;
  }
  pid_t pids[8];
  fflush(stdout);
  for (int p = 0; p < 8; p++) {
    pids[p] = fork();
    if (pids[p] == 0) {
      int w = child(c, p);
      _exit(w > 255 ? 255 : w);
    }
  }
  int wrong = 0, died = 0;
  for (int p = 0; p < 8; p++) {
    int status = 0;
    if (pids[p] < 0 || waitpid(pids[p], &status, 0) != pids[p] || !WIFEXITED(status))
      died++;
    else
      wrong += WEXITSTATUS(status);
  }
  OK(died == 0 && wrong == 0, "8 processes lock/re-check/put/get 20 keys: %d wrong, %d died",
     wrong, died);
  OK(kiln_cache_verify(c, 0, NULL, NULL, &e) == 0, "verify finds no bad entry afterwards");
  kiln_cache_stats st;
  OK(kiln_cache_stat(c, &st, &e) == 0 && st.entries == 20, "exactly 20 entries");
  int good = 0;
  unsigned char want[40000];
  for (int i = 0; i < 20; i++) {
    char key[33];
    key_for(i, key);
    size_t len = payload(i, want, sizeof want), size = 0;
    void *data = NULL;
    good += kiln_cache_get(c, key, &data, &size, &e) == 1 && size == len && !memcmp(data, want, len);
    free(data);
  }
  OK(good == 20, "all 20 hits return the right bytes");
  kiln_cache_close(c);
}

static void test_default_root(void) {
  kiln_err e;
  kiln_cache *c = NULL;
  char dir[300], want[320];
  unsetenv("KILN_CACHE_MAXSIZE");
  snprintf(dir, sizeof dir, "%s/xdg", root);
  unsetenv("KILN_CACHE_DIR");
  setenv("XDG_CACHE_HOME", dir, 1);
  snprintf(want, sizeof want, "%s/kiln", dir);
  OK(kiln_cache_open(NULL, &c, &e) == 0 && !strcmp(kiln_cache_root(c), want),
     "root defaults to $XDG_CACHE_HOME/kiln");
  kiln_cache_close(c);
  snprintf(dir, sizeof dir, "%s/env/", root);
  setenv("KILN_CACHE_DIR", dir, 1);
  snprintf(want, sizeof want, "%s/env", root);
  OK(kiln_cache_open(NULL, &c, &e) == 0 && !strcmp(kiln_cache_root(c), want),
     "$KILN_CACHE_DIR wins");
  kiln_cache_close(c);
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/kiln_test_cache.%d", (int)getpid());
  TAP_PLAN(50);
  test_keys();
  kiln_cache *c = NULL;
  kiln_err e;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/main", root);
  unsetenv("KILN_CACHE_MAXSIZE");
  OK(kiln_cache_open(dir, &c, &e) == 0 && !strcmp(kiln_cache_root(c), dir), "open %s", dir);
  if (!c) return 1;
  test_roundtrip(c);
  test_damage(c);
  test_maintenance(c);
  kiln_cache_close(c);
  test_lru();
  test_processes();
  test_default_root();
  rm_rf(root);
  return TAP_DONE();
}
