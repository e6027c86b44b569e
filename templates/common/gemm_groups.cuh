// Grouped GEMM (moe_grouped_matmul): the groups' rows and tiles, in shared memory.
// Group 0 is the rows before the first expert's (their output is the epilogue of 0), group
// j >= 1 expert j - 1's rows: from first_token_offset[j - 1], taken as a running maximum
// clamped to [0, T], to the next expert's first row (T for the last). tab[j] is group j's first
// row (tab[groups] = T), tab[groups + 1 + j] the tiles before group j (groups x n_tiles tiles
// of 128 rows each), tab[2 groups + 1] all tiles. One warp fills it; the CTA syncs after.
__device__ __forceinline__ void kiln_gemm_groups(int *tab, const int *off, int groups, kiln_i64 T, int n_tiles) {
  const int lane = threadIdx.x & 31;
  int *const tiles = tab + groups + 1;
  int carry = 0;  // the running maximum before this chunk of offsets
  if (lane == 0) tab[0] = 0;
  for (int base = 0; base < groups - 1; base += 32) {
    const int e = base + lane;
    int v = e < groups - 1 ? off[e] : (int)T;
    v = v < 0 ? 0 : (v > T ? (int)T : v);
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int u = __shfl_up_sync(0xffffffffu, v, d);
      if (lane >= d && u > v) v = u;
    }
    v = v > carry ? v : carry;
    if (e < groups - 1) tab[e + 1] = v;
    carry = __shfl_sync(0xffffffffu, v, 31);
  }
  if (lane == 0) tab[groups] = (int)T;
  __syncwarp();
  int done = 0;  // the tiles before this chunk of groups
  if (lane == 0) tiles[0] = 0;
  for (int base = 0; base < groups; base += 32) {
    const int j = base + lane;
    int t = j < groups ? (tab[j + 1] - tab[j] + 127) / 128 * n_tiles : 0;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int u = __shfl_up_sync(0xffffffffu, t, d);
      if (lane >= d) t += u;
    }
    if (j < groups) tiles[j + 1] = done + t;
    done += __shfl_sync(0xffffffffu, t, 31);
  }
  __syncwarp();
}

// Tile `tile` of the grouped schedule: its group j (the last whose first tile is at or before
// it), m0, the group's end row and n0; within a group the m tiles of one n tile are adjacent
// (they share the expert's weight panel).
__device__ __forceinline__ int kiln_gemm_group_tile(const int *tab, int groups, kiln_i64 tile, int bno, kiln_i64 &m0,
                                                    kiln_i64 &m_end, kiln_i64 &n0) {
  const int *const tiles = tab + groups + 1;
  int lo = 0, hi = groups;  // tiles[lo] <= tile < tiles[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (tiles[mid] <= tile) lo = mid;
    else hi = mid;
  }
  const kiln_i64 units = (tab[lo + 1] - tab[lo] + 127) / 128, r = tile - tiles[lo];
  m0 = tab[lo] + (r % units) * 128;
  m_end = tab[lo + 1];
  n0 = (r / units) * bno;
  return lo;
}
