// kiln: attention's tile loads (sm_80+). Rows [r0, r0 + ROWS) of a (batch, head) slice (COLS
// 16-bit elements, row stride ss) into shared rows PITCH bytes apart by cp.async, by NT threads
// (t: this one's index among them); rows at or past `valid` are zero-filled unread.
template <int ROWS, int COLS, int PITCH, int NT = 128>
__device__ __forceinline__ void kiln_sdpa_load_rows(kiln_u32 dst, const kiln_u16 *src, kiln_i64 ss, int r0, int valid,
                                                    int t) {
  constexpr int CH = COLS / 8, N = ROWS * CH;
  asm volatile("" : "+r"(t));  // addresses computed here, not hoisted into registers the mma warps hold
#pragma unroll
  for (int i = 0; i < (N + NT - 1) / NT; i++) {
    const int c = t + NT * i;
    if (N % NT == 0 || c < N) {
      const int r = c / CH, k = c % CH;
      const bool in = r0 + r < valid;
      kiln_cp_async16(dst + (kiln_u32)(r * PITCH + k * 16), src + (in ? (kiln_i64)(r0 + r) * ss : 0) + k * 8,
                      in ? 16u : 0u);
    }
  }
}
