/* A cache entry seed for fuzz_cache: copies entry IN to OUT with its manifest's key set to
 * KEY (the harness's, so that verify accepts it) and its payload cut to at most MAX bytes,
 * the payload length and XXH3-64 updated. See seeds.sh.
 *   cache_entry IN OUT KEY MAX */
#define _GNU_SOURCE
#define XXH_INLINE_ALL
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static unsigned char b[1 << 24];

int main(int argc, char **argv) {
  if (argc != 5 || strlen(argv[3]) != 32) return fprintf(stderr, "usage: cache_entry IN OUT KEY MAX\n"), 2;
  FILE *f = fopen(argv[1], "rb");
  if (!f) return perror(argv[1]), 1;
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  if (n < 32) return fprintf(stderr, "%s: not an entry\n", argv[1]), 1;
  uint32_t mlen = b[12] | b[13] << 8 | b[14] << 16 | (uint32_t)b[15] << 24;
  uint64_t plen = 0;
  for (int i = 7; i >= 0; i--) plen = plen << 8 | b[16 + i];
  if (32 + (uint64_t)mlen + plen != n) return fprintf(stderr, "%s: sizes do not match\n", argv[1]), 1;
  char *m = (char *)b + 32, *k = memmem(m, mlen, "\"key\":\"", 7);
  if (k && k + 39 <= m + mlen) memcpy(k + 7, argv[3], 32);
  uint64_t max = strtoull(argv[4], NULL, 10);
  if (plen > max) plen = max;
  for (int i = 0; i < 8; i++) b[16 + i] = (unsigned char)(plen >> (8 * i));
  uint64_t h = XXH3_64bits(b + 32, mlen + plen);
  for (int i = 0; i < 8; i++) b[24 + i] = (unsigned char)(h >> (8 * i));
  f = fopen(argv[2], "wb");
  if (!f || fwrite(b, 1, 32 + mlen + plen, f) != 32 + mlen + plen || fclose(f)) return perror(argv[2]), 1;
  return 0;
}
