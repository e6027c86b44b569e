/* Unit tests for compiler/cache.c's running size (ROOT/v1/size) and its collection, and for a
 * cache that cannot be written (put and lock return 0 and warn once). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "scratch_dir.h"
#include "tap.h"

static char root[256];

static void key_for(int i, char key[33]) {
  char sym[32];
  snprintf(sym, sizeof sym, "kiln_size_%d", i);
  kiln_cache_keyparts kp = {"0.1.0", "13.0", "sm_90a", sym, "src", NULL, 0};
  kiln_cache_key(&kp, key);
}

/* The running total in dir's size file, or -1 when it is missing or not 24 bytes. */
static long long tracked(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/v1/size", dir);
  unsigned char b[24];
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, b, sizeof b);
  close(fd);
  if (n != 24 || memcmp(b, "KILNSZ01", 8) != 0) return -1;
  unsigned long long v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | b[8 + i];
  return (long long)v;
}

static long long walked(kiln_cache *c) {
  kiln_cache_stats st;
  kiln_err e;
  return kiln_cache_stat(c, &st, &e) == 0 ? (long long)st.bytes : -2;
}

static int nwarn;
static char last_warn[1024];
static void on_warn(void *ctx, const char *msg) {
  (void)ctx;
  nwarn++;
  snprintf(last_warn, sizeof last_warn, "%s", msg);
}

static void test_running_size(void) {
  char dir[300];
  snprintf(dir, sizeof dir, "%s/size", root);
  kiln_cache *c = NULL;
  kiln_err e;
  unsetenv("KILN_CACHE_MAXSIZE");
  if (kiln_cache_open(dir, &c, &e) != 0) {
    OK(0, "open: %s", e.msg);
    return;
  }
  unsigned char buf[4000];
  memset(buf, 'x', sizeof buf);
  char key[33];
  for (int i = 0; i < 10; i++) {
    key_for(i, key);
    kiln_cache_put(c, key, NULL, buf, 1000 + 300 * (size_t)i, &e);
  }
  OK(tracked(dir) == walked(c), "the size file tracks 10 puts (%lld = %lld)", tracked(dir), walked(c));
  key_for(3, key);
  kiln_cache_put(c, key, NULL, buf, 4000, &e);
  OK(tracked(dir) == walked(c), "and a put that replaces an entry (%lld = %lld)", tracked(dir), walked(c));

  char path[512];
  snprintf(path, sizeof path, "%s/v1/size", dir);
  unlink(path);
  key_for(10, key);
  kiln_cache_put(c, key, NULL, buf, 500, &e);
  OK(tracked(dir) == walked(c), "a missing size file is rebuilt by a walk (%lld = %lld)", tracked(dir), walked(c));
  int fd = open(path, O_WRONLY);
  OK(fd >= 0 && pwrite(fd, "\x7f", 1, 12) == 1, "corrupt the size file");
  close(fd);
  key_for(11, key);
  kiln_cache_put(c, key, NULL, buf, 600, &e);
  OK(tracked(dir) == walked(c), "a corrupt size file is rebuilt (%lld = %lld)", tracked(dir), walked(c));

  /* a bad entry a lookup drops comes off the total */
  key_for(0, key);
  kiln_cache_entry_path(c, key, path, sizeof path, &e);
  fd = open(path, O_WRONLY);
  OK(fd >= 0 && pwrite(fd, "z", 1, 200) == 1, "damage an entry");
  close(fd);
  kiln_cache_set_warn(c, on_warn, NULL);
  void *data = NULL;
  size_t size = 0;
  nwarn = 0;
  OK(kiln_cache_get(c, key, &data, &size, &e) == 0 && nwarn == 1 && strstr(last_warn, "is bad"),
     "a bad entry is a miss, with a warning (%s)", last_warn);
  OK(tracked(dir) == walked(c), "and leaves the total (%lld = %lld)", tracked(dir), walked(c));
  OK(kiln_cache_clear(c, &e) == 11 && tracked(dir) == 0, "clear zeroes the running size");
  kiln_cache_close(c);
}

static void test_collection(void) {
  char dir[300];
  snprintf(dir, sizeof dir, "%s/bound", root);
  kiln_cache *c = NULL;
  kiln_err e;
  setenv("KILN_CACHE_MAXSIZE", "100K", 1);
  int opened = kiln_cache_open(dir, &c, &e) == 0;
  unsetenv("KILN_CACHE_MAXSIZE");
  if (!opened) {
    OK(0, "open: %s", e.msg);
    return;
  }
  unsigned char buf[10000];
  memset(buf, 'y', sizeof buf);
  char key[33];
  long long peak = 0, prev = 0;
  int over = 0, collections = 0, unbatched = 0;
  for (int i = 0; i < 40; i++) {
    key_for(100 + i, key);
    if (kiln_cache_put(c, key, NULL, buf, sizeof buf, &e) != 0) over++;
    kiln_cache_stats st;
    if (kiln_cache_stat(c, &st, &e) != 0) over++;
    long long w = (long long)st.bytes;
    if (w > peak) peak = w;
    if (w > 102400 || tracked(dir) != w) over++;
    if (w < prev + 10000) { /* this put collected: down to 90% of the bound, a batch */
      collections++;
      if (w > 92160 || w >= prev) unbatched++;
    }
    prev = w;
    sleep_ms(2);
  }
  OK(over == 0 && peak <= 102400, "40 puts of 10K stay within 100K (peak %lld), the total exact", peak);
  OK(collections > 0 && collections <= 16 && unbatched == 0,
     "a put over the bound collects down to 90%% of it, several entries at once (%d collections)",
     collections);
  void *data = NULL;
  size_t size = 0;
  OK(kiln_cache_get(c, key, &data, &size, &e) == 1, "the newest entry stays");
  free(data);
  kiln_cache_close(c);
}

static void test_unwritable(void) {
  char dir[300], shard[400];
  snprintf(dir, sizeof dir, "%s/unwritable", root);
  kiln_cache *c = NULL;
  kiln_err e;
  if (kiln_cache_open(dir, &c, &e) != 0) {
    OK(0, "open: %s", e.msg);
    return;
  }
  kiln_cache_set_warn(c, on_warn, NULL);
  char key[33];
  key_for(7, key);
  /* a file where the key's shard directory should be: every write there fails */
  snprintf(shard, sizeof shard, "%s/v1/%.2s", dir, key);
  FILE *f = fopen(shard, "w");
  OK(f && fclose(f) == 0, "block the shard directory %s", shard);
  nwarn = 0;
  int fd = 0;
  unsigned char buf[100] = {0};
  OK(kiln_cache_lock(c, key, &fd, &e) == 0 && fd == -1 && nwarn == 1,
     "lock on an unwritable shard: 0, no lock, a warning (%s)", last_warn);
  nwarn = 0;
  OK(kiln_cache_put(c, key, NULL, buf, sizeof buf, &e) == 0 && nwarn == 1 &&
         strstr(last_warn, "cannot be written"),
     "put stores nothing, returns 0 and warns (%s)", last_warn);
  char other[33];
  key_for(8, other);
  OK(kiln_cache_put(c, other, NULL, buf, sizeof buf, &e) == 0 && nwarn == 1,
     "later puts on the handle try nothing and stay quiet");
  void *data = NULL;
  size_t size = 0;
  OK(kiln_cache_get(c, key, &data, &size, &e) == 0, "lookups still work (a miss)");
  kiln_cache_close(c);
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/kiln_test_cache_size.%d", (int)getpid());
  TAP_PLAN(17);
  test_running_size();
  test_collection();
  test_unwritable();
  rm_rf(root);
  return TAP_DONE();
}
