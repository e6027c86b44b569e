/* libFuzzer harness: the cache entry reader (compiler/cache.c: entry_load and the manifest
 * readers behind the public API). The input is the bytes of the one entry file of a
 * temporary cache (in /dev/shm where there is one); the harness looks it up
 * (kiln_cache_get), verifies the cache (kiln_cache_verify: manifest JSON, schema, key) and
 * explains a miss (kiln_cache_why: every manifest field), for the symbol the manifest names.
 *
 * Each input is tried twice: as it is, and with the header's payload length and XXH3-64
 * made to match the file (keeping its manifest length), so that mutations reach the
 * manifest readers behind the size and checksum checks. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache.h"

#define KEY "0123456789abcdef0123456789abcdef"
#define HEADER 32

static kiln_cache *cache;
static char entry_path[4096], root[4096];

static void quiet_warn(void *ctx, const char *msg) { (void)ctx, (void)msg; }
static void quiet_report(void *ctx, const char *path, const char *problem) {
  (void)ctx, (void)path, (void)problem;
}

static void cleanup(void) {
  if (!root[0]) return;
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "fuzz_cache: could not remove %s\n", root);
}

static void setup(void) {
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/kiln-fuzz-cache.XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(root)) {
    perror("fuzz_cache: mkdtemp");
    abort();
  }
  atexit(cleanup);
  unsetenv("KILN_CACHE_MAXSIZE");
  kiln_err e = {0};
  if (kiln_cache_open(root, &cache, &e) != 0) {
    fprintf(stderr, "fuzz_cache: %s\n", e.msg);
    abort();
  }
  kiln_cache_set_warn(cache, quiet_warn, NULL);
  if (kiln_cache_entry_path(cache, KEY, entry_path, sizeof entry_path, &e) != 0) abort();
  char shard[4200];
  snprintf(shard, sizeof shard, "%s/v1/01", root);
  if (mkdir(shard, 0777) != 0 && errno != EEXIST) abort();
}

static void put_file(const uint8_t *data, size_t size) {
  int fd = open(entry_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) abort();
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, data + done, size - done);
    if (w <= 0) abort();
    done += (size_t)w;
  }
  close(fd);
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put_le(uint8_t *p, int n, uint64_t v) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void lookups(const uint8_t *data, size_t size) {
  kiln_err e = {0};
  void *out = NULL;
  size_t n = 0;
  put_file(data, size);
  (void)kiln_cache_get(cache, KEY, &out, &n, &e);
  free(out);

  /* the symbol the manifest names (if it can be read), so that why compares its fields */
  char symbol[256] = "kiln_fuzz_symbol";
  if (size >= HEADER) {
    uint64_t mlen = get_le(data + 12, 4);
    if (mlen <= size - HEADER) {
      json_t *m = json_loadb((const char *)data + HEADER, (size_t)mlen, 0, NULL);
      const char *s = json_string_value(json_object_get(m, "symbol"));
      if (s) snprintf(symbol, sizeof symbol, "%s", s);
      json_decref(m);
    }
  }
  put_file(data, size);
  (void)kiln_cache_verify(cache, 0, quiet_report, NULL, &e);
  const char *opts[] = {"-arch=sm_80", "--std=c++17"};
  kiln_cache_keyparts kp = {"0.1.0", "13.0", "sm_80", symbol, "source", opts, 2};
  char *report = NULL;
  if (kiln_cache_why(cache, &kp, &report, &e) == 0) free(report);
  (void)kiln_cache_verify(cache, 1, quiet_report, NULL, &e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!cache) setup();
  lookups(data, size);
  if (size >= HEADER && memcmp(data, "KILNCE01", 8) == 0) {
    uint8_t *fixed = malloc(size);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    uint64_t mlen = get_le(fixed + 12, 4);
    if (mlen <= size - HEADER) {
      put_le(fixed + 16, 8, size - HEADER - mlen);
      put_le(fixed + 24, 8, XXH3_64bits(fixed + HEADER, size - HEADER));
      if (memcmp(fixed, data, size) != 0) lookups(fixed, size);
    }
    free(fixed);
  }
  unlink(entry_path);
  return 0;
}
