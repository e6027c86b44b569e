// kiln: GEMM operand tiles in shared memory, shared by both GEMM paths. A tile is LINES lines
// of 128 bytes along the operand's contiguous axis. K-major: line L holds row mn0 + L (LE = 128
// / ESZ consecutive k). MN-major: line L holds k-row k0 + L % LE of the LE-wide MN block L / LE.
// Line L keeps its 16-byte chunk c at byte L * 128 + ((c ^ (L % 8)) << 4): wgmma's 128-byte
// swizzle (its tiles start on 1024-byte boundaries) and conflict-free rows for ldmatrix.
// Thread t of THREADS (a multiple of 64) copies chunk t % 8 of lines t / 8 + (THREADS / 8) j,
// so L % 8 is (t / 8) % 8 for all of them; chunks outside the tensor are zero-filled.
// DUAL (a dual GEMM's B tile on the mma path: 192 lines): two operands of the same layout
// interleaved in 16-column groups, group q of the tile holding columns mn0 + 16 (q / 2) .. + 15
// of src (q even) or src2 (q odd), so a warp's 32 columns are 16 of each at the same n; every
// chunk a thread copies comes from one operand. K-major: line L = STEP j + r is row
// mn0 + 16 j + r % 16 of operand r / 16. MN-major: chunk c of block blk (8 columns) is columns
// mn0 + 32 blk + 16 (c / 4) + 8 (c % 2) of operand (c / 2) % 2.
template <bool KMAJOR, int LINES, int THREADS, int ESZ, bool DUAL = false>
__device__ __forceinline__ void kiln_gemm_load_async(kiln_u32 dst, const kiln_u8 *src, kiln_i64 ld, kiln_i64 mn0,
                                                     kiln_i64 mn_ext, kiln_i64 k0, kiln_i64 k_ext, int t,
                                                     const kiln_u8 *src2 = nullptr) {
  constexpr int CE = 16 / ESZ, LE = 128 / ESZ, STEP = THREADS / 8, JPB = LE / STEP;
  static_assert(!DUAL || (STEP == 32 && LE == 64), "the dual tile's mapping: 32-line steps, 64-column blocks");
  const int c = t & 7, r = t >> 3;
  const kiln_u32 d0 = dst + (kiln_u32)r * 128u + (kiln_u32)((c ^ (r & 7)) << 4);
  // the line addresses are derived from one pointer made opaque per call, so the compiler
  // cannot hoist LINES / STEP 64-bit addresses out of the k loop (the producer has few registers)
  if (KMAJOR) {
    constexpr int ROWS = DUAL ? 16 : STEP;  // operand rows between a thread's lines
    if (DUAL && r >= 16) src = src2;
    const kiln_i64 mn = mn0 + (DUAL ? (r & 15) : r), k = k0 + c * CE;
    const kiln_u8 *g = kiln_opaque(src + mn * ld + k * ESZ);
    const bool kok = k < k_ext;
    kiln_i64 left = mn_ext - mn;
#pragma unroll
    for (int j = 0; j < LINES / STEP; j++) {
      const bool ok = kok && left > 0;
      kiln_cp_async16(d0 + (kiln_u32)(STEP * j * 128), ok ? g : src, ok ? 16u : 0u);
      g += ROWS * ld;
      left -= ROWS;
    }
  } else {
    constexpr int BLK = DUAL ? LE / 2 : LE;  // operand columns per block of the tile
    if (DUAL && ((c >> 1) & 1)) src = src2;
    const kiln_i64 k = k0 + r, mn = mn0 + (DUAL ? 16 * (c >> 2) + 8 * (c & 1) : c * CE);
    const kiln_u8 *g = kiln_opaque(src + k * ld + mn * ESZ);
#pragma unroll
    for (int j = 0; j < LINES / STEP; j++) {
      const int kr = STEP * (j % JPB), blk = j / JPB;
      const bool ok = k + kr < k_ext && mn + blk * BLK < mn_ext;
      kiln_cp_async16(d0 + (kiln_u32)(STEP * j * 128), ok ? g + (kiln_i64)kr * ld + blk * BLK * ESZ : src, ok ? 16u : 0u);
    }
  }
}

