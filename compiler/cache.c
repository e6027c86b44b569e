/* kiln compiler: content-addressed disk cache of cubins (layout in cache.h). */
#include "cache.h"
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define CACHE_MAGIC "KILNCE01"
#define CACHE_HEADER 32
#define CACHE_SUBDIR "v1"
#define CACHE_SCHEMA "kiln.cache.entry"
#define KEY_SCHEMA "kiln.cache.key/1"
#define TEMP_PREFIX ".tmp."
#define TEMP_STALE_S 3600 /* a writer that held a temp file this long has died */
#define TEMP_DEAD_S 60    /* a temp file this old whose writer's pid is gone is garbage */
#define SIZE_FILE "size"  /* ROOT/v1/size: the running total of entry bytes (cache.h) */
#define SIZE_MAGIC "KILNSZ01"
#define SIZE_BYTES 24
#define COLLECT_TO(max) ((max) - (max) / 10) /* a collection frees down to 90% of the bound */

struct kiln_cache {
  char root[PATH_MAX];
  unsigned long long maxsize;
  kiln_cache_warn_fn warn;
  void *warn_ctx;
  atomic_int unwritable;  /* a write was refused: warned once, no more tries */
  atomic_int lock_warned; /* a lock could not be taken: warned once */
};

/* ---- small helpers ---- */

static const char *env_nonempty(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

__attribute__((format(printf, 2, 3))) static void cache_warn(kiln_cache *c, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->warn)
    c->warn(c->warn_ctx, msg);
  else
    (void)fprintf(stderr, "kiln: warning: %s\n", msg); /* nothing to do if stderr fails */
}

/* errno values by which a file system refuses writes: the cache is full or read-only. */
static int write_refused(int err) {
  return err == ENOSPC || err == EDQUOT || err == EROFS || err == EACCES || err == EPERM ||
         err == EFBIG;
}

/* The cache could not store an entry (full, read-only, ...). A cache only saves time, so the
 * build goes on compiling without it: one warning per handle, and no more writes tried.
 * Returns 0, for kiln_cache_put and kiln_cache_lock to return. */
__attribute__((format(printf, 2, 3))) static int store_refused(kiln_cache *c, const char *fmt, ...) {
  char why[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (atomic_exchange(&c->unwritable, 1) == 0)
    cache_warn(c, "cache %s cannot be written (%s); compiling without storing kernels in it",
               c->root, why);
  return 0;
}

static int write_all(int fd, const void *buf, size_t len) {
  const unsigned char *p = buf;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Reads exactly len bytes at offset; 1 done, 0 the file is shorter, -1 error. */
static int read_at(int fd, void *buf, size_t len, off_t off) {
  unsigned char *p = buf;
  while (len) {
    ssize_t r = pread(fd, p, len, off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return 0;
    p += r;
    len -= (size_t)r;
    off += r;
  }
  return 1;
}

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static int key_valid(const char *key) {
  if (!key) return 0;
  for (int i = 0; i < 32; i++)
    if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f'))) return 0;
  return key[32] == '\0';
}

static void hex128(XXH128_hash_t h, char hex[33]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
}

/* A growable string for reports. */
typedef struct {
  char *s;
  size_t len, cap;
  int oom;
} strbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(strbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if (b->s && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = (b->cap ? b->cap * 2 : 256) + (size_t)n;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

/* ---- keys ---- */

static void hash_part(XXH3_state_t *st, const void *data, size_t len) {
  unsigned char prefix[8];
  put_u64(prefix, (uint64_t)len);
  XXH3_128bits_update(st, prefix, sizeof prefix);
  if (len) XXH3_128bits_update(st, data, len);
}

static void hash_str(XXH3_state_t *st, const char *s) { hash_part(st, s ? s : "", s ? strlen(s) : 0); }

void kiln_cache_key(const kiln_cache_keyparts *kp, char hex[33]) {
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset(&st);
  hash_str(&st, KEY_SCHEMA);
  hash_str(&st, kp->kiln_version);
  hash_str(&st, kp->nvrtc_version);
  hash_str(&st, kp->arch);
  unsigned char n[8];
  put_u64(n, (uint64_t)(kp->nopts > 0 ? kp->nopts : 0));
  hash_part(&st, n, sizeof n);
  for (int i = 0; i < kp->nopts; i++) hash_str(&st, kp->opts[i]);
  hash_str(&st, kp->symbol);
  hash_str(&st, kp->source);
  hex128(XXH3_128bits_digest(&st), hex);
}

static void source_hash(const char *source, char hex[33]) {
  hex128(XXH3_128bits(source ? source : "", source ? strlen(source) : 0), hex);
}

/* ---- open ---- */

int kiln_cache_parse_size(const char *text, unsigned long long *bytes) {
  if (!text || *text < '0' || *text > '9') return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno) return -1;
  unsigned shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
  }
  if (shift && *end == 'i') end++;
  if ((shift && *end == 'B') || (!shift && (*end == 'B' || *end == 'b'))) end++;
  if (*end || v == 0 || v > (ULLONG_MAX >> shift)) return -1;
  *bytes = v << shift;
  return 0;
}

int kiln_cache_open(const char *root, kiln_cache **out, kiln_err *e) {
  *out = NULL;
  char dir[PATH_MAX];
  const char *base;
  int len;
  if (root && *root)
    len = snprintf(dir, sizeof dir, "%s", root);
  else if ((base = env_nonempty("KILN_CACHE_DIR")))
    len = snprintf(dir, sizeof dir, "%s", base);
  else if ((base = env_nonempty("XDG_CACHE_HOME")))
    len = snprintf(dir, sizeof dir, "%s/kiln", base);
  else if ((base = env_nonempty("HOME")))
    len = snprintf(dir, sizeof dir, "%s/.cache/kiln", base);
  else
    return kiln_err_set(e, "E_CACHE", "no cache directory: set KILN_CACHE_DIR or HOME");
  if (len < 0 || len >= (int)sizeof dir - 64)
    return kiln_err_set(e, "E_CACHE", "cache directory path too long");
  while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';

  unsigned long long maxsize = 0;
  const char *max = env_nonempty("KILN_CACHE_MAXSIZE");
  if (max && kiln_cache_parse_size(max, &maxsize) != 0)
    return kiln_err_set(e, "E_USAGE",
                        "KILN_CACHE_MAXSIZE must be a positive byte count with an optional "
                        "K, M or G suffix (got '%s')", max);

  char v1[PATH_MAX];
  if (snprintf(v1, sizeof v1, "%s/" CACHE_SUBDIR, dir) >= (int)sizeof v1)
    return kiln_err_set(e, "E_CACHE", "cache directory path too long");
  /* A cache the file system will not let us create still opens: lookups miss, and the first
   * write says why it cannot store (store_refused). */
  if (kiln_mkdir_p(v1) != 0 && !write_refused(errno))
    return kiln_err_set(e, "E_CACHE", "creating cache directory %s: %s", v1, strerror(errno));
  kiln_cache *c = calloc(1, sizeof *c);
  if (!c) return kiln_err_set(e, "E_CACHE", "out of memory opening the cache");
  snprintf(c->root, sizeof c->root, "%s", dir);
  c->maxsize = maxsize;
  atomic_init(&c->unwritable, 0);
  atomic_init(&c->lock_warned, 0);
  *out = c;
  return 0;
}

void kiln_cache_close(kiln_cache *c) { free(c); }

void kiln_cache_set_warn(kiln_cache *c, kiln_cache_warn_fn fn, void *ctx) {
  c->warn = fn;
  c->warn_ctx = ctx;
}

const char *kiln_cache_root(const kiln_cache *c) { return c->root; }

unsigned long long kiln_cache_maxsize(const kiln_cache *c) { return c->maxsize; }

static int key_path(const kiln_cache *c, const char *key, const char *suffix, char *buf,
                    size_t n, kiln_err *e) {
  if (!key_valid(key))
    return kiln_err_set(e, "E_CACHE", "malformed cache key '%.40s'", key ? key : "(null)");
  int len = snprintf(buf, n, "%s/" CACHE_SUBDIR "/%.2s/%s%s", c->root, key, key, suffix);
  if (len < 0 || (size_t)len >= n) return kiln_err_set(e, "E_CACHE", "cache path too long");
  return 0;
}

static int shard_dir(const kiln_cache *c, const char *key, char *buf, size_t n, kiln_err *e) {
  int len = snprintf(buf, n, "%s/" CACHE_SUBDIR "/%.2s", c->root, key);
  if (len < 0 || (size_t)len >= n) return kiln_err_set(e, "E_CACHE", "cache path too long");
  return 0;
}

int kiln_cache_entry_path(const kiln_cache *c, const char *key, char *buf, size_t n,
                          kiln_err *e) {
  return key_path(c, key, ".kc", buf, n, e);
}

/* ---- reading entries ---- */

enum { LOAD_OK, LOAD_MISSING, LOAD_BAD, LOAD_ERROR };

typedef struct {
  unsigned char *buf; /* manifest (NUL-terminated) then payload */
  size_t manifest_len, payload_len;
  struct stat st;
} entry;

/* Loads and checks the entry at path: with the payload (size and checksum verified), or
 * just the manifest. LOAD_BAD fills problem; LOAD_ERROR fills e. */
static int entry_load(const char *path, int with_payload, entry *en, char *problem, size_t pn,
                      kiln_err *e) {
  memset(en, 0, sizeof *en);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return LOAD_MISSING;
    return kiln_err_set(e, "E_CACHE", "opening %s: %s", path, strerror(errno)), LOAD_ERROR;
  }
  int rc = LOAD_BAD;
  unsigned char head[CACHE_HEADER];
  int r;
  if (fstat(fd, &en->st) != 0) {
    kiln_err_set(e, "E_CACHE", "stat %s: %s", path, strerror(errno));
    rc = LOAD_ERROR;
    goto done;
  }
  if ((r = read_at(fd, head, sizeof head, 0)) <= 0) {
    if (r < 0) {
      kiln_err_set(e, "E_CACHE", "reading %s: %s", path, strerror(errno));
      rc = LOAD_ERROR;
    } else {
      snprintf(problem, pn, "truncated header (%lld bytes)", (long long)en->st.st_size);
    }
    goto done;
  }
  if (memcmp(head, CACHE_MAGIC, 8) != 0) {
    snprintf(problem, pn, "bad magic");
    goto done;
  }
  if (get_u32(head + 8) != KILN_CACHE_FORMAT) {
    snprintf(problem, pn, "unknown format version %u", (unsigned)get_u32(head + 8));
    goto done;
  }
  uint64_t mlen = get_u32(head + 12), plen = get_u64(head + 16);
  uint64_t sum = get_u64(head + 24);
  if ((uint64_t)en->st.st_size != CACHE_HEADER + mlen + plen || plen > (uint64_t)en->st.st_size) {
    snprintf(problem, pn, "size %lld does not match header (%llu + %llu + %llu)",
             (long long)en->st.st_size, (unsigned long long)CACHE_HEADER,
             (unsigned long long)mlen, (unsigned long long)plen);
    goto done;
  }
  size_t body = (size_t)mlen + (with_payload ? (size_t)plen : 0);
  if (!(en->buf = malloc(body + 1))) {
    kiln_err_set(e, "E_CACHE", "out of memory reading %s", path);
    rc = LOAD_ERROR;
    goto done;
  }
  if ((r = read_at(fd, en->buf, body, CACHE_HEADER)) <= 0) {
    if (r < 0) {
      kiln_err_set(e, "E_CACHE", "reading %s: %s", path, strerror(errno));
      rc = LOAD_ERROR;
    } else {
      snprintf(problem, pn, "truncated");
    }
    goto done;
  }
  if (with_payload && XXH3_64bits(en->buf, body) != sum) {
    snprintf(problem, pn, "checksum mismatch");
    goto done;
  }
  en->manifest_len = (size_t)mlen;
  en->payload_len = (size_t)plen;
  if (!with_payload) en->buf[mlen] = '\0';
  rc = LOAD_OK;
done:
  (void)close(fd); /* read-only descriptor: nothing to flush */
  if (rc != LOAD_OK) {
    free(en->buf);
    en->buf = NULL;
  }
  return rc;
}

/* Removes path if it is still the file we read (a writer may have replaced it since): 1
 * removed, 0 not (gone, replaced, or the file system refused). */
static int remove_if_same(const char *path, const struct stat *seen) {
  struct stat now;
  if (lstat(path, &now) != 0 || now.st_dev != seen->st_dev || now.st_ino != seen->st_ino)
    return 0;
  return unlink(path) == 0;
}

static int size_adjust(kiln_cache *c, long long delta, int on_disk, const char *keep,
                       kiln_err *e);

/* A bad entry (torn, corrupt) found by a lookup: removed, said, and compiled again. */
static void drop_bad(kiln_cache *c, const char *path, const entry *en, const char *problem) {
  int removed = remove_if_same(path, &en->st);
  cache_warn(c, "cache entry %s is bad (%s); %s, compiling it again", path, problem,
             removed ? "removed it" : "could not remove it");
  /* an overcount left by a failed adjust only brings the next collection forward */
  if (removed) (void)size_adjust(c, -(long long)en->st.st_size, 1, NULL, NULL);
}

int kiln_cache_get(kiln_cache *c, const char *key, void **data, size_t *size, kiln_err *e) {
  *data = NULL;
  *size = 0;
  char path[PATH_MAX], problem[256];
  if (key_path(c, key, ".kc", path, sizeof path, e) != 0) return -1;
  entry en;
  kiln_err lerr;
  switch (entry_load(path, 1, &en, problem, sizeof problem, &lerr)) {
    case LOAD_MISSING: return 0;
    case LOAD_BAD: drop_bad(c, path, &en, problem); return 0;
    case LOAD_ERROR: /* an unreadable entry costs a compile, not the build */
      cache_warn(c, "%s; compiling it instead", lerr.msg);
      return 0;
    default: break;
  }
  void *out = malloc(en.payload_len ? en.payload_len : 1);
  if (!out) {
    free(en.buf);
    return kiln_err_set(e, "E_CACHE", "out of memory reading %s", path);
  }
  memcpy(out, en.buf + en.manifest_len, en.payload_len);
  free(en.buf);
  /* LRU clock. A read-only cache still serves hits, so a refused touch is not an error. */
  (void)utimensat(AT_FDCWD, path, NULL, 0);
  *data = out;
  *size = en.payload_len;
  return 1;
}

/* ---- writing entries ---- */

static char *manifest_text(const char *key, const kiln_cache_keyparts *kp) {
  json_t *m = json_object();
  if (!m) return NULL;
  int bad = json_object_set_new(m, "schema", json_string(CACHE_SCHEMA));
  bad |= json_object_set_new(m, "version", json_integer(KILN_CACHE_FORMAT));
  bad |= json_object_set_new(m, "key", json_string(key));
  bad |= json_object_set_new(m, "created", json_integer((json_int_t)time(NULL)));
  if (kp) {
    char src[33];
    source_hash(kp->source, src);
    json_t *opts = json_array();
    for (int i = 0; opts && i < kp->nopts; i++)
      bad |= json_array_append_new(opts, json_string(kp->opts[i] ? kp->opts[i] : ""));
    bad |= !opts;
    bad |= json_object_set_new(m, "options", opts);
    bad |= json_object_set_new(m, "kiln_version", json_string(kp->kiln_version ? kp->kiln_version : ""));
    bad |= json_object_set_new(m, "nvrtc_version", json_string(kp->nvrtc_version ? kp->nvrtc_version : ""));
    bad |= json_object_set_new(m, "arch", json_string(kp->arch ? kp->arch : ""));
    bad |= json_object_set_new(m, "symbol", json_string(kp->symbol ? kp->symbol : ""));
    bad |= json_object_set_new(m, "source_xxh3", json_string(src));
    bad |= json_object_set_new(m, "source_bytes",
                               json_integer((json_int_t)(kp->source ? strlen(kp->source) : 0)));
  }
  char *text = bad ? NULL : json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(m);
  return text;
}

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  int err = errno;
  (void)close(fd); /* read-only descriptor: nothing to flush */
  if (rc != 0 && err != EINVAL) { /* some file systems cannot sync a directory */
    errno = err;
    return -1;
  }
  return 0;
}

/* Removes a temp file we made. Nothing better to do on failure: its name marks it as ours,
 * and gc and verify remove it once we are gone. */
static void temp_remove(const char *tmp) { (void)unlink(tmp); }

int kiln_cache_put(kiln_cache *c, const char *key, const kiln_cache_keyparts *kp,
                   const void *data, size_t size, kiln_err *e) {
  char path[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX];
  if (key_path(c, key, ".kc", path, sizeof path, e) != 0) return -1;
  if (shard_dir(c, key, dir, sizeof dir, e) != 0) return -1;
  if (atomic_load(&c->unwritable)) return 0; /* said once already */
  char *manifest = manifest_text(key, kp);
  if (!manifest) return kiln_err_set(e, "E_CACHE", "out of memory writing cache entry %s", key);
  size_t mlen = strlen(manifest);

  unsigned char head[CACHE_HEADER];
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, manifest, mlen);
  if (size) XXH3_64bits_update(&st, data, size);
  memcpy(head, CACHE_MAGIC, 8);
  put_u32(head + 8, KILN_CACHE_FORMAT);
  put_u32(head + 12, (uint32_t)mlen);
  put_u64(head + 16, (uint64_t)size);
  put_u64(head + 24, XXH3_64bits_digest(&st));

  /* The writer's pid in the name lets gc tell a dead writer's temp file (cache.h). A clear
   * may remove the shard directory between our mkdir and mkstemp: try again. */
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 3; tries++) {
    if (kiln_mkdir_p(dir) != 0) {
      int err = errno;
      free(manifest);
      return store_refused(c, "creating %s: %s", dir, strerror(err));
    }
    if (snprintf(tmp, sizeof tmp, "%s/" TEMP_PREFIX "%s.%ld.XXXXXX", dir, key, (long)getpid()) >=
        (int)sizeof tmp) {
      free(manifest);
      return kiln_err_set(e, "E_CACHE", "cache path too long");
    }
    fd = mkstemp(tmp);
    if (fd < 0 && errno != ENOENT) break;
  }
  if (fd < 0) {
    int err = errno;
    free(manifest);
    return store_refused(c, "creating %s: %s", tmp, strerror(err));
  }
  const char *step = "writing";
  int ok = write_all(fd, head, sizeof head) == 0 && write_all(fd, manifest, mlen) == 0 &&
           (size == 0 || write_all(fd, data, size) == 0);
  if (ok && !(ok = fsync(fd) == 0)) step = "syncing";
  if (ok && !(ok = fchmod(fd, 0644) == 0)) step = "setting the mode of";
  int err = errno;
  free(manifest);
  if (close(fd) != 0 && ok) {
    ok = 0;
    err = errno;
    step = "closing";
  }
  if (!ok) {
    temp_remove(tmp);
    return store_refused(c, "%s %s: %s", step, tmp, err ? strerror(err) : "short write");
  }
  /* The running size counts the entry before it appears: a writer killed in between leaves
   * an overcount, which only brings the next collection (and its exact recount) forward. */
  struct stat old;
  long long delta = (long long)(CACHE_HEADER + mlen + size);
  if (lstat(path, &old) == 0 && S_ISREG(old.st_mode)) delta -= (long long)old.st_size;
  kiln_err serr;
  if (size_adjust(c, delta, 0, key, &serr) != 0) {
    temp_remove(tmp);
    return store_refused(c, "%s", serr.msg);
  }
  if (rename(tmp, path) != 0) {
    err = errno;
    temp_remove(tmp);
    (void)size_adjust(c, -delta, 1, NULL, NULL); /* an overcount is harmless (above) */
    return store_refused(c, "renaming %s: %s", tmp, strerror(err));
  }
  if (fsync_dir(dir) != 0) /* stored, though a power cut may lose it: say so, go on */
    cache_warn(c, "syncing %s: %s (cache entry %s stored, may not survive a crash)", dir,
               strerror(errno), key);
  return 0;
}

/* ---- locks ---- */

int kiln_cache_lock(kiln_cache *c, const char *key, int *fd, kiln_err *e) {
  *fd = -1;
  char path[PATH_MAX], dir[PATH_MAX];
  if (key_path(c, key, ".lock", path, sizeof path, e) != 0) return -1;
  if (shard_dir(c, key, dir, sizeof dir, e) != 0) return -1;
  if (atomic_load(&c->unwritable)) return 0; /* nothing will be written: no lock needed */
  int f = -1;
  for (int tries = 0; f < 0 && tries < 3; tries++) { /* a clear may remove the shard meanwhile */
    if (kiln_mkdir_p(dir) != 0) {
      int err = errno;
      if (write_refused(err)) return store_refused(c, "creating %s: %s", dir, strerror(err));
      break;
    }
    f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0 && errno != ENOENT) break;
  }
  int err = errno;
  if (f < 0 && write_refused(err))
    return store_refused(c, "opening lock %s: %s", path, strerror(err));
  int rc = -1;
  if (f >= 0)
    while ((rc = flock(f, LOCK_EX)) != 0 && (err = errno) == EINTR) {
    }
  if (rc != 0) {
    /* The lock only saves a second compile of the same kernel; entries appear by rename. */
    if (f >= 0) (void)close(f);
    if (atomic_exchange(&c->lock_warned, 1) == 0)
      cache_warn(c, "locking %s: %s; compiling without the lock (another process may compile "
                 "the same kernel)", path, strerror(err));
    return 0;
  }
  *fd = f;
  return 0;
}

void kiln_cache_unlock(int fd) {
  if (fd < 0) return;
  (void)close(fd); /* closing releases the flock; the file was never written */
}

/* ---- walking the cache ---- */

enum { FILE_ENTRY, FILE_LOCK, FILE_TEMP, FILE_OTHER };

static int file_kind(const char *name, char key[33]) {
  size_t n = strlen(name);
  if (strncmp(name, TEMP_PREFIX, strlen(TEMP_PREFIX)) == 0) return FILE_TEMP;
  if (n == 35 && strcmp(name + 32, ".kc") == 0) {
    memcpy(key, name, 32);
    key[32] = '\0';
    return key_valid(key) ? FILE_ENTRY : FILE_OTHER;
  }
  if (n == 37 && strcmp(name + 32, ".lock") == 0) return FILE_LOCK;
  return FILE_OTHER;
}

/* Calls fn for each file in each shard directory (fn returns -1 to stop with error). */
typedef int (*walk_fn)(void *ctx, const char *path, const char *key, int kind,
                       const struct stat *st, kiln_err *e);

static int is_shard(const char *name) {
  return strlen(name) == 2 &&
         ((name[0] >= '0' && name[0] <= '9') || (name[0] >= 'a' && name[0] <= 'f')) &&
         ((name[1] >= '0' && name[1] <= '9') || (name[1] >= 'a' && name[1] <= 'f'));
}

static int shard_order(const void *a, const void *b) { return strcmp(a, b); }

static int walk(kiln_cache *c, walk_fn fn, void *ctx, int remove_shards, kiln_err *e) {
  char top[PATH_MAX];
  if (snprintf(top, sizeof top, "%s/" CACHE_SUBDIR, c->root) >= (int)sizeof top)
    return kiln_err_set(e, "E_CACHE", "cache path too long");
  DIR *d = opendir(top);
  if (!d) {
    if (errno == ENOENT) return 0;
    return kiln_err_set(e, "E_CACHE", "opening %s: %s", top, strerror(errno));
  }
  /* Shards in name order so that every walk (and gc's tie-breaking) is deterministic. */
  char shards[256][3];
  int nshards = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (is_shard(de->d_name) && nshards < 256) memcpy(shards[nshards++], de->d_name, 3);
  (void)closedir(d); /* read-only: nothing to report */
  qsort(shards, (size_t)nshards, sizeof shards[0], shard_order);
  for (int s = 0; s < nshards; s++) {
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/%.2s", top, shards[s]) >= (int)sizeof dir) continue;
    DIR *sd = opendir(dir);
    if (!sd) {
      if (errno == ENOENT) continue;
      return kiln_err_set(e, "E_CACHE", "opening %s: %s", dir, strerror(errno));
    }
    int rc = 0;
    while (rc == 0 && (de = readdir(sd)) != NULL) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char key[33] = "", path[PATH_MAX];
      int kind = file_kind(de->d_name, key);
      if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
      struct stat st;
      if (lstat(path, &st) != 0) {
        if (errno == ENOENT) continue; /* removed by another process meanwhile */
        rc = kiln_err_set(e, "E_CACHE", "stat %s: %s", path, strerror(errno));
        break;
      }
      if (!S_ISREG(st.st_mode)) continue;
      rc = fn(ctx, path, key, kind, &st, e);
    }
    (void)closedir(sd);
    if (rc != 0) return -1;
    if (remove_shards) (void)rmdir(dir); /* fails harmlessly while another writer uses it */
  }
  return 0;
}

static int unlink_quiet(const char *path, kiln_err *e) {
  if (unlink(path) != 0 && errno != ENOENT)
    return kiln_err_set(e, "E_CACHE", "removing %s: %s", path, strerror(errno));
  return 0;
}

/* A temp file no writer will rename: older than an hour, or older than a minute with its
 * writer's pid (".tmp.KEY.PID.XXXXXX") gone from this machine. */
static int temp_stale(const char *path, const struct stat *st, time_t now) {
  double age = difftime(now, st->st_mtime);
  if (age > TEMP_STALE_S) return 1;
  if (age < TEMP_DEAD_S) return 0;
  const char *name = strrchr(path, '/');
  name = name ? name + 1 : path;
  const char *p = name + strlen(TEMP_PREFIX);
  if (strlen(p) < 34 || p[32] != '.') return 0;
  char *end;
  errno = 0;
  long pid = strtol(p + 33, &end, 10);
  if (errno || end == p + 33 || *end != '.' || pid <= 0 || pid > INT_MAX) return 0;
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* ---- the running size ---- */

/* ROOT/v1/size, opened and locked (flock, exclusive): the lock every size change, collection
 * and clear takes. 0, or -1 (E_CACHE). */
static int size_lock(kiln_cache *c, int *fd, kiln_err *e) {
  char path[PATH_MAX];
  *fd = -1;
  if (snprintf(path, sizeof path, "%s/" CACHE_SUBDIR "/" SIZE_FILE, c->root) >= (int)sizeof path)
    return kiln_err_set(e, "E_CACHE", "cache path too long");
  int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (f < 0) return kiln_err_set(e, "E_CACHE", "opening %s: %s", path, strerror(errno));
  int rc;
  while ((rc = flock(f, LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    int err = errno;
    (void)close(f);
    return kiln_err_set(e, "E_CACHE", "locking %s: %s", path, strerror(err));
  }
  *fd = f;
  return 0;
}

/* The total the size file holds: 0, or -1 when it is missing, short or corrupt. */
static int size_read(int fd, unsigned long long *total) {
  unsigned char b[SIZE_BYTES];
  if (read_at(fd, b, sizeof b, 0) != 1 || memcmp(b, SIZE_MAGIC, 8) != 0 ||
      get_u64(b + 16) != XXH3_64bits(b, 16))
    return -1;
  *total = get_u64(b + 8);
  return 0;
}

/* One pwrite of 24 bytes: a killed process leaves the old or the new total, and a torn one
 * (power cut) fails its checksum and is recounted. Not synced: the file is only a hint. */
static int size_write(kiln_cache *c, int fd, unsigned long long total, kiln_err *e) {
  unsigned char b[SIZE_BYTES];
  memcpy(b, SIZE_MAGIC, 8);
  put_u64(b + 8, total);
  put_u64(b + 16, XXH3_64bits(b, 16));
  ssize_t w;
  while ((w = pwrite(fd, b, sizeof b, 0)) < 0 && errno == EINTR) {
  }
  if (w != (ssize_t)sizeof b)
    return kiln_err_set(e, "E_CACHE", "writing %s/" CACHE_SUBDIR "/" SIZE_FILE ": %s", c->root,
                        w < 0 ? strerror(errno) : "short write");
  return 0;
}

static int stat_one(void *ctx, const char *path, const char *key, int kind,
                    const struct stat *st, kiln_err *e);
static int collect(kiln_cache *c, unsigned long long target, const char *keep, long long pending,
                   unsigned long long *left, unsigned long long *freed, kiln_err *e);

/* Adds delta to the running total, under the size lock. on_disk: the change has happened
 * already (a removal), so a recount by walking includes it; else it is pending (an entry
 * about to be renamed in). A missing or corrupt size file is rebuilt by one walk. Over the
 * bound, collects least recently used entries (never keep) down to 90% of it, which also
 * recounts exactly. 0 or -1 (E_CACHE). */
static int size_adjust(kiln_cache *c, long long delta, int on_disk, const char *keep,
                       kiln_err *e) {
  int fd;
  if (size_lock(c, &fd, e) != 0) return -1;
  unsigned long long total = 0;
  int rc = 0;
  if (size_read(fd, &total) != 0) {
    kiln_cache_stats st = {0, 0};
    rc = walk(c, stat_one, &st, 0, e);
    total = st.bytes;
    if (on_disk) delta = 0;
  }
  if (rc == 0) {
    if (delta < 0)
      total = (unsigned long long)-delta > total ? 0 : total - (unsigned long long)-delta;
    else
      total += (unsigned long long)delta;
    if (c->maxsize && total > c->maxsize &&
        collect(c, COLLECT_TO(c->maxsize), keep, on_disk ? 0 : delta, &total, NULL, e) < 0)
      rc = -1;
  }
  if (rc == 0) rc = size_write(c, fd, total, e);
  (void)close(fd); /* releases the lock; the write above has been checked */
  return rc;
}

/* ---- stat, clear ---- */

static int stat_one(void *ctx, const char *path, const char *key, int kind,
                    const struct stat *st, kiln_err *e) {
  (void)path, (void)key, (void)e;
  kiln_cache_stats *s = ctx;
  if (kind == FILE_ENTRY) {
    s->entries++;
    s->bytes += (unsigned long long)st->st_size;
  }
  return 0;
}

int kiln_cache_stat(kiln_cache *c, kiln_cache_stats *st, kiln_err *e) {
  memset(st, 0, sizeof *st);
  return walk(c, stat_one, st, 0, e);
}

static int clear_one(void *ctx, const char *path, const char *key, int kind,
                     const struct stat *st, kiln_err *e) {
  (void)key, (void)st;
  if (kind == FILE_OTHER) return 0;
  if (unlink_quiet(path, e) != 0) return -1;
  if (kind == FILE_ENTRY) ++*(int *)ctx;
  return 0;
}

int kiln_cache_clear(kiln_cache *c, kiln_err *e) {
  int removed = 0, fd;
  if (size_lock(c, &fd, e) != 0) return -1;
  int rc = walk(c, clear_one, &removed, 1, e);
  if (rc == 0) rc = size_write(c, fd, 0, e);
  (void)close(fd); /* releases the lock */
  return rc == 0 ? removed : -1;
}

/* ---- verify ---- */

typedef struct {
  kiln_cache *c;
  int remove_bad, bad;
  kiln_cache_report_fn fn;
  void *ctx;
  time_t now;
} verify_ctx;

static int verify_one(void *ctx, const char *path, const char *key, int kind,
                      const struct stat *st, kiln_err *e) {
  verify_ctx *v = ctx;
  if (kind == FILE_TEMP && v->remove_bad && temp_stale(path, st, v->now))
    return unlink_quiet(path, e);
  if (kind != FILE_ENTRY) return 0;
  char problem[512] = "";
  entry en;
  int rc = entry_load(path, 1, &en, problem, sizeof problem, e);
  if (rc == LOAD_ERROR) return -1;
  if (rc == LOAD_MISSING) return 0;
  if (rc == LOAD_OK) {
    json_error_t jerr;
    json_t *m = json_loadb((const char *)en.buf, en.manifest_len, 0, &jerr);
    const char *schema = json_string_value(json_object_get(m, "schema"));
    const char *mkey = json_string_value(json_object_get(m, "key"));
    if (!m)
      snprintf(problem, sizeof problem, "manifest is not JSON: %s", jerr.text);
    else if (!schema || strcmp(schema, CACHE_SCHEMA) != 0)
      snprintf(problem, sizeof problem, "manifest schema is not %s", CACHE_SCHEMA);
    else if (!mkey || strcmp(mkey, key) != 0)
      snprintf(problem, sizeof problem, "manifest key %.40s does not match the file name",
               mkey ? mkey : "(none)");
    json_decref(m);
    free(en.buf);
    if (!problem[0]) return 0;
  }
  v->bad++;
  if (v->fn) v->fn(v->ctx, path, problem);
  /* an overcount left by a failed adjust only brings the next collection forward */
  if (v->remove_bad && remove_if_same(path, &en.st))
    (void)size_adjust(v->c, -(long long)en.st.st_size, 1, NULL, NULL);
  return 0;
}

int kiln_cache_verify(kiln_cache *c, int remove_bad, kiln_cache_report_fn fn, void *ctx,
                      kiln_err *e) {
  verify_ctx v = {c, remove_bad, 0, fn, ctx, time(NULL)};
  if (walk(c, verify_one, &v, 0, e) != 0) return -1;
  return v.bad;
}

/* ---- gc ---- */

typedef struct {
  char key[33];
  char path[PATH_MAX];
  unsigned long long size;
  struct timespec mtime;
} gc_item;

typedef struct {
  gc_item *items;
  size_t n, cap;
  unsigned long long total;
  time_t now;
} gc_ctx;

static int gc_one(void *ctx, const char *path, const char *key, int kind,
                  const struct stat *st, kiln_err *e) {
  gc_ctx *g = ctx;
  if (kind == FILE_TEMP) return temp_stale(path, st, g->now) ? unlink_quiet(path, e) : 0;
  if (kind != FILE_ENTRY) return 0;
  if (g->n == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 64;
    gc_item *items = realloc(g->items, cap * sizeof *items);
    if (!items) return kiln_err_set(e, "E_CACHE", "out of memory collecting cache entries");
    g->items = items;
    g->cap = cap;
  }
  gc_item *it = &g->items[g->n++];
  snprintf(it->key, sizeof it->key, "%s", key);
  snprintf(it->path, sizeof it->path, "%s", path);
  it->size = (unsigned long long)st->st_size;
  it->mtime = st->st_mtim;
  g->total += it->size;
  return 0;
}

static int gc_older_first(const void *a, const void *b) {
  const gc_item *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->key, y->key);
}

/* Under the size lock: one walk (removing stale temp files), then evicts least recently used
 * entries (never keep) until the entries' total plus pending (an entry about to appear, or
 * one being replaced: its size difference) is at most target. *left gets that total. Returns
 * entries evicted or -1. */
static int collect(kiln_cache *c, unsigned long long target, const char *keep, long long pending,
                   unsigned long long *left, unsigned long long *freed, kiln_err *e) {
  if (freed) *freed = 0;
  gc_ctx g = {NULL, 0, 0, 0, time(NULL)};
  if (walk(c, gc_one, &g, 0, e) != 0) {
    free(g.items);
    return -1;
  }
  unsigned long long total = g.total;
  if (pending < 0)
    total = (unsigned long long)-pending > total ? 0 : total - (unsigned long long)-pending;
  else
    total += (unsigned long long)pending;
  int evicted = 0;
  if (total > target) qsort(g.items, g.n, sizeof *g.items, gc_older_first);
  for (size_t i = 0; i < g.n && total > target; i++) {
    gc_item *it = &g.items[i];
    if (keep && strcmp(it->key, keep) == 0) continue;
    char lock[PATH_MAX];
    if (unlink(it->path) != 0) {
      if (errno == ENOENT) continue; /* removed meanwhile (a bad entry a reader dropped) */
      int err = errno;
      free(g.items);
      return kiln_err_set(e, "E_CACHE", "removing %s: %s", it->path, strerror(err));
    }
    /* Its lock file goes too: at worst a writer holding it compiles once more. */
    if (key_path(c, it->key, ".lock", lock, sizeof lock, NULL) == 0 &&
        unlink_quiet(lock, e) != 0) {
      free(g.items);
      return -1;
    }
    total -= it->size;
    if (freed) *freed += it->size;
    evicted++;
  }
  free(g.items);
  *left = total;
  return evicted;
}

int kiln_cache_gc(kiln_cache *c, unsigned long long maxsize, unsigned long long *freed,
                  kiln_err *e) {
  int fd;
  if (size_lock(c, &fd, e) != 0) return -1;
  unsigned long long left = 0;
  int n = collect(c, maxsize, NULL, 0, &left, freed, e);
  if (n >= 0 && size_write(c, fd, left, e) != 0) n = -1;
  (void)close(fd); /* releases the lock */
  return n;
}

/* ---- why ---- */

typedef struct {
  char key[33];
  char arch[32];
  long long created;
  int ndiff;
  char *diffs;
} why_item;

typedef struct {
  const kiln_cache_keyparts *kp;
  char want_src[33];
  long total;
  why_item *items;
  size_t n, cap;
} why_ctx;

static const char *str_or_empty(const char *s) { return s ? s : ""; }

/* "[a, b]" of the wanted options, for a report. */
static void opts_text(strbuf *b, const char *const *opts, int nopts) {
  sb_printf(b, "[");
  for (int i = 0; i < nopts; i++) sb_printf(b, "%s%s", i ? " " : "", str_or_empty(opts[i]));
  sb_printf(b, "]");
}

static void json_opts_text(strbuf *b, json_t *arr) {
  sb_printf(b, "[");
  for (size_t i = 0; i < json_array_size(arr); i++)
    sb_printf(b, "%s%s", i ? " " : "", str_or_empty(json_string_value(json_array_get(arr, i))));
  sb_printf(b, "]");
}

static int same_opts(json_t *arr, const char *const *opts, int nopts) {
  if (!json_is_array(arr) || json_array_size(arr) != (size_t)(nopts > 0 ? nopts : 0)) return 0;
  for (int i = 0; i < nopts; i++) {
    const char *s = json_string_value(json_array_get(arr, (size_t)i));
    if (!s || strcmp(s, str_or_empty(opts[i])) != 0) return 0;
  }
  return 1;
}

static void diff_str(strbuf *b, int *n, const char *what, const char *cached, const char *want) {
  if (strcmp(str_or_empty(cached), str_or_empty(want)) == 0) return;
  sb_printf(b, "%s%s (cached '%s', now '%s')", (*n)++ ? "; " : "", what, str_or_empty(cached),
            str_or_empty(want));
}

static int why_one(void *ctx, const char *path, const char *key, int kind,
                   const struct stat *st, kiln_err *e) {
  (void)st;
  why_ctx *w = ctx;
  if (kind != FILE_ENTRY) return 0;
  w->total++;
  char problem[256];
  entry en;
  int rc = entry_load(path, 0, &en, problem, sizeof problem, e);
  if (rc == LOAD_ERROR) return -1;
  if (rc != LOAD_OK) return 0; /* bad entries are verify's business */
  json_t *m = json_loadb((const char *)en.buf, en.manifest_len, 0, NULL);
  free(en.buf);
  const char *symbol = json_string_value(json_object_get(m, "symbol"));
  if (!symbol || strcmp(symbol, str_or_empty(w->kp->symbol)) != 0) {
    json_decref(m);
    return 0;
  }
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 16;
    why_item *items = realloc(w->items, cap * sizeof *items);
    if (!items) {
      json_decref(m);
      return kiln_err_set(e, "E_CACHE", "out of memory explaining a cache miss");
    }
    w->items = items;
    w->cap = cap;
  }
  why_item *it = &w->items[w->n];
  memset(it, 0, sizeof *it);
  snprintf(it->key, sizeof it->key, "%s", key);
  snprintf(it->arch, sizeof it->arch, "%s",
           str_or_empty(json_string_value(json_object_get(m, "arch"))));
  it->created = (long long)json_integer_value(json_object_get(m, "created"));

  const kiln_cache_keyparts *kp = w->kp;
  strbuf b = {0};
  diff_str(&b, &it->ndiff, "arch", it->arch, kp->arch);
  diff_str(&b, &it->ndiff, "kiln version", json_string_value(json_object_get(m, "kiln_version")),
           kp->kiln_version);
  diff_str(&b, &it->ndiff, "NVRTC version",
           json_string_value(json_object_get(m, "nvrtc_version")), kp->nvrtc_version);
  json_t *opts = json_object_get(m, "options");
  if (!same_opts(opts, kp->opts, kp->nopts)) {
    sb_printf(&b, "%soptions (cached ", it->ndiff++ ? "; " : "");
    json_opts_text(&b, opts);
    sb_printf(&b, ", now ");
    opts_text(&b, kp->opts, kp->nopts);
    sb_printf(&b, ")");
  }
  const char *src = json_string_value(json_object_get(m, "source_xxh3"));
  if (!src || strcmp(src, w->want_src) != 0)
    sb_printf(&b, "%ssource (cached xxh3 %.12s, %lld bytes; now %.12s, %zu bytes)",
              it->ndiff++ ? "; " : "", str_or_empty(src),
              (long long)json_integer_value(json_object_get(m, "source_bytes")), w->want_src,
              strlen(str_or_empty(kp->source)));
  if (!it->ndiff) sb_printf(&b, "no recorded key part (the key schema changed)");
  json_decref(m);
  if (b.oom) {
    free(b.s);
    return kiln_err_set(e, "E_CACHE", "out of memory explaining a cache miss");
  }
  it->diffs = b.s;
  w->n++;
  return 0;
}

static int why_closest_first(const void *a, const void *b) {
  const why_item *x = a, *y = b;
  if (x->ndiff != y->ndiff) return x->ndiff - y->ndiff;
  if (x->created != y->created) return x->created > y->created ? -1 : 1;
  return strcmp(x->key, y->key);
}

int kiln_cache_why(kiln_cache *c, const kiln_cache_keyparts *kp, char **report, kiln_err *e) {
  *report = NULL;
  char want[33], path[PATH_MAX];
  kiln_cache_key(kp, want);
  why_ctx w = {kp, "", 0, NULL, 0, 0};
  source_hash(kp->source, w.want_src);
  if (walk(c, why_one, &w, 0, e) != 0) {
    for (size_t i = 0; i < w.n; i++) free(w.items[i].diffs);
    free(w.items);
    return -1;
  }
  if (w.n) qsort(w.items, w.n, sizeof *w.items, why_closest_first);

  const char *sym = str_or_empty(kp->symbol), *arch = str_or_empty(kp->arch);
  strbuf b = {0};
  struct stat st;
  size_t same_arch = 0;
  for (size_t i = 0; i < w.n; i++) same_arch += strcmp(w.items[i].arch, arch) == 0;
  if (kiln_cache_entry_path(c, want, path, sizeof path, NULL) == 0 && stat(path, &st) == 0)
    sb_printf(&b, "entry %s for %s on %s is cached (a lookup hits)", want, sym, arch);
  else if (w.n == 0)
    sb_printf(&b, "no cached entry for symbol %s on any arch (%ld entries in %s)", sym, w.total,
              c->root);
  else if (same_arch == 0) {
    sb_printf(&b, "symbol %s is cached only for other archs:", sym);
    for (size_t i = 0; i < w.n; i++) {
      int seen = 0;
      for (size_t j = 0; j < i; j++) seen |= strcmp(w.items[j].arch, w.items[i].arch) == 0;
      if (!seen) sb_printf(&b, " %s", w.items[i].arch);
    }
  } else {
    sb_printf(&b, "%zu cached entr%s for %s on %s, none with key %s; closest:", same_arch,
              same_arch == 1 ? "y" : "ies", sym, arch, want);
    size_t shown = 0;
    for (size_t i = 0; i < w.n && shown < 3; i++) {
      if (strcmp(w.items[i].arch, arch) != 0) continue;
      char when[32] = "?";
      time_t t = (time_t)w.items[i].created;
      struct tm tm;
      if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
      sb_printf(&b, "\n  %s (created %s) differs in: %s", w.items[i].key, when,
                w.items[i].diffs);
      shown++;
    }
  }
  for (size_t i = 0; i < w.n; i++) free(w.items[i].diffs);
  free(w.items);
  if (b.oom || !b.s) {
    free(b.s);
    return kiln_err_set(e, "E_CACHE", "out of memory explaining a cache miss");
  }
  *report = b.s;
  return 0;
}
