/* kiln compiler: content-addressed disk cache of cubins.
 *
 * Root: the explicit argument, else $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
 * $HOME/.cache/kiln. One file per entry, ROOT/v1/<first 2 hex>/<key>.kc: a 32-byte header
 * (magic "KILNCE01", u32 format version, u32 manifest length, u64 payload length, u64
 * XXH3-64 of manifest+payload; little-endian), a JSON manifest of the key parts, then
 * the payload. Entries appear by rename only, so no reader sees a partial file; a bad
 * entry is a miss, is removed and is warned about. Writers name temp files
 * ".tmp.<key>.<pid>.XXXXXX"; gc and verify remove those of dead writers.
 *
 * ROOT/v1/size holds the running total of entry bytes (magic "KILNSZ01", u64 total, u64
 * XXH3-64 of the first 16 bytes), changed under an flock on itself by every put, removal,
 * gc and clear; a missing or corrupt one is rebuilt by one walk. The mtime is the LRU
 * clock (a hit refreshes it); $KILN_CACHE_MAXSIZE (bytes, K/M/G suffix) bounds the total:
 * a put that takes it over the bound collects least recently used entries down to 90% of
 * it (one walk, which also recounts the total exactly), so writes cost no walk otherwise.
 *
 * A cache that cannot be written (full disk, read-only) is not an error: lookups still
 * hit, lock and put return 0 without storing, and the handle warns once. Handles hold no
 * open files: they are safe to share between threads and across fork(). */
#ifndef KILN_CACHE_H
#define KILN_CACHE_H

#include <stddef.h>

#include "err.h"

#define KILN_CACHE_FORMAT 1

typedef struct kiln_cache kiln_cache;

/* Everything that changes the compiled bytes. NULL strings count as "". */
typedef struct {
  const char *kiln_version, *nvrtc_version, *arch, *symbol, *source;
  const char *const *opts;
  int nopts;
} kiln_cache_keyparts;

/* XXH3-128 (32 lowercase hex + NUL) over the length-prefixed key parts. */
void kiln_cache_key(const kiln_cache_keyparts *kp, char hex[33]);

/* Opens (creating directories) the cache at root, NULL for the default. E_CACHE when it
 * cannot be created (a file system that refuses writes opens a cache that stores nothing),
 * E_USAGE for a malformed $KILN_CACHE_MAXSIZE. */
int kiln_cache_open(const char *root, kiln_cache **out, kiln_err *e);
void kiln_cache_close(kiln_cache *c);

/* Receives the handle's warnings, one line each (no prefix, no newline): a cache that
 * cannot be written, a bad entry found and removed. Without one (fn NULL), a warning is
 * written to stderr as "kiln: warning: ...". */
typedef void (*kiln_cache_warn_fn)(void *ctx, const char *msg);
void kiln_cache_set_warn(kiln_cache *c, kiln_cache_warn_fn fn, void *ctx);
const char *kiln_cache_root(const kiln_cache *c);
/* The byte bound from $KILN_CACHE_MAXSIZE at open time; 0 = unbounded. */
unsigned long long kiln_cache_maxsize(const kiln_cache *c);
/* The file that holds (or would hold) key's entry; -1 (E_CACHE) for a malformed key. */
int kiln_cache_entry_path(const kiln_cache *c, const char *key, char *buf, size_t n,
                          kiln_err *e);

/* "1234", "64K", "512M", "2G" (also "2GB", "2GiB"; powers of 1024) → bytes > 0. 0 or -1. */
int kiln_cache_parse_size(const char *text, unsigned long long *bytes);

/* 1 hit (*data malloc'ed, caller frees), 0 miss, -1 error (E_CACHE: a malformed key, out
 * of memory). A truncated, corrupt or unreadable entry is a miss (removed where it can be,
 * with a warning). A hit refreshes the entry's mtime. */
int kiln_cache_get(kiln_cache *c, const char *key, void **data, size_t *size, kiln_err *e);

/* Stores data under key with a manifest of kp (which may be NULL): temp file in the same
 * directory, write, fsync, add its size to the running total (collecting when that goes
 * over the bound; never this key), rename, fsync the directory. 0, also when the cache
 * refused the write (warned once; later puts on the handle store nothing), or -1 (E_CACHE:
 * a malformed key, out of memory). */
int kiln_cache_put(kiln_cache *c, const char *key, const kiln_cache_keyparts *kp,
                   const void *data, size_t size, kiln_err *e);

/* Exclusive flock on key's lock file. Writers: lock, get again, compile, put, unlock.
 * Readers never lock. When the lock cannot be taken (the cache cannot be written, or flock
 * fails) *fd is -1 and 0 is returned with a warning: the caller compiles unlocked, at worst
 * twice. -1 (E_CACHE) only for a malformed key. */
int kiln_cache_lock(kiln_cache *c, const char *key, int *fd, kiln_err *e);
void kiln_cache_unlock(int fd);

typedef struct {
  long entries;
  unsigned long long bytes; /* file sizes, headers and manifests included */
} kiln_cache_stats;
int kiln_cache_stat(kiln_cache *c, kiln_cache_stats *st, kiln_err *e);

/* Called for each bad entry verify finds: its path and what is wrong with it. */
typedef void (*kiln_cache_report_fn)(void *ctx, const char *path, const char *problem);
/* Checks every entry (header, sizes, checksum, manifest, file name); reports each bad
 * one to fn (may be NULL) and removes it when remove_bad (and then also the temp files of
 * dead writers). Returns the number of bad entries, or -1. */
int kiln_cache_verify(kiln_cache *c, int remove_bad, kiln_cache_report_fn fn, void *ctx,
                      kiln_err *e);

/* Removes every entry, lock file and temporary file and zeroes the running size; returns
 * how many entries, or -1. */
int kiln_cache_clear(kiln_cache *c, kiln_err *e);

/* Evicts least recently used entries until the total is at most maxsize bytes, removes
 * temporary files abandoned (an hour old, or a minute old and their writer dead) and
 * recounts the running size. Returns entries evicted or -1; *freed (may be NULL) gets the
 * bytes freed. */
int kiln_cache_gc(kiln_cache *c, unsigned long long maxsize, unsigned long long *freed,
                  kiln_err *e);

/* Explains a lookup: compares kp with the manifests of cached entries of the same
 * symbol (same arch first) and says which key parts differ. *report is malloc'ed text
 * (one finding per line, no trailing newline). Returns 0 or -1. */
int kiln_cache_why(kiln_cache *c, const kiln_cache_keyparts *kp, char **report, kiln_err *e);

#endif
