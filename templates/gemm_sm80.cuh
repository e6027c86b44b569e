// kiln gemm engine, portable path (sm_80 and later): ${what}.
// Persistent: each CTA takes 128 x 192 tiles of C[b] = A[b] B[b] round-robin (groups of 8 m
// tiles per column of n tiles, so neighbouring CTAs share operands in L2) and computes them in
// fp32 over a ${STAGES}-stage ring of k-blocks 64 deep: 12 warps of 64 x 32 (mma.sync m16n8k16,
// ldmatrix). Its launch (384 threads, grid, shared memory) and parameters are the sm_90a plan's,
// so one pack plan serves every SM (it ignores the tensor maps and the stream-K workspace).
// Threads 0-255 copy operands with cp.async (ASYNC) or element by element, converted to the
// mma type (no 16-byte alignment, fp8), into the gemm_tile layout. Block-scaled fp8 adds each
// k16 step's products into acc with their scales (BSCALE).

// One k-block of an operand tile, element by element, stored K-major (line L = row mn0 + L).
template <int LINES, int THREADS, int ESZ, bool IS_A>
__device__ __forceinline__ void kiln_gemm_load_elems(kiln_u32 dst, const kiln_u8 *src, kiln_i64 smn, kiln_i64 sk,
                                                     kiln_i64 mn0, kiln_i64 mn_ext, kiln_i64 k0, kiln_i64 k_ext, int t) {
  const int c = t & 7, r = t >> 3;
  const kiln_u32 d0 = dst + (kiln_u32)r * 128u + (kiln_u32)((c ^ (r & 7)) << 4);
  const kiln_i64 k = k0 + c * 8;
#pragma unroll 1
  for (int j = 0; j < LINES / (THREADS / 8); j++) {
    const kiln_i64 mn = mn0 + r + (THREADS / 8) * j;
    kiln_u32 w[4];
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      kiln_u32 lo = 0, hi = 0;
      if (mn < mn_ext && k + e < k_ext) {
        const kiln_u8 *p = src + (mn * smn + (k + e) * sk) * ESZ;
        lo = IS_A ? kiln_gemm_elem_a(p) : kiln_gemm_elem_b(p);
      }
      if (mn < mn_ext && k + e + 1 < k_ext) {
        const kiln_u8 *p = src + (mn * smn + (k + e + 1) * sk) * ESZ;
        hi = IS_A ? kiln_gemm_elem_a(p) : kiln_gemm_elem_b(p);
      }
      w[e / 2] = lo | (hi << 16);
    }
    kiln_st_shared_v4(d0 + (kiln_u32)((THREADS / 8) * j * 128), w[0], w[1], w[2], w[3]);
  }
}

${tmaps}
extern "C" __global__ void __launch_bounds__(384, 1) ${symbol}(${params}) {
  constexpr int BM = 128, BN = 192, STAGES = ${STAGES}, ESZ = ${ESZ};
  constexpr int BK = 64;                       // k per block (smem elements are 16-bit)
  constexpr kiln_i64 N = ${N}, K = ${K};
  constexpr int KB = (int)((K + BK - 1) / BK);
  // DUAL: a dual GEMM, B and B2 interleaved in 16-column groups of the tile
  // (kiln_gemm_load_async's DUAL): a warp's acc[i][0..1] are B's products, acc[i][2..3] B2's at
  // the same columns; the output tile is BNO wide
  constexpr bool DUAL = ${DUAL};
  constexpr int BNO = DUAL ? BN / 2 : BN;
  constexpr int NT = (int)((N + BNO - 1) / BNO);
  constexpr kiln_u32 A_BYTES = BM * 128, STAGE = (BM + BN) * 128;
  constexpr bool A_KMAJOR = ${A_KMAJOR}, B_KMAJOR = ${B_KMAJOR}, ASYNC = ${ASYNC};
  // BSCALE: block-scaled fp8 (kiln_gemm_scale_a/b): each k16 step's products go to fresh
  // registers and into acc times their rows' and columns' scales, which change every SCALE_K
  constexpr bool BSCALE = ${BSCALE};
  constexpr int SCALE_K = ${SCALE_K};
  static_assert(!BSCALE || (SCALE_K % 16 == 0 && !DUAL), "block scales: whole k16 steps, one product");
  // GROUPED (moe_grouped_matmul): GROUPS row groups, each against its expert's B (the sm90
  // kernel's; their table, kiln_gemm_groups, lies past the stages)
  constexpr bool GROUPED = ${GROUPED};
  constexpr int GROUPS = ${GROUPS};
  static_assert(!GROUPED || !DUAL, "grouped: one product");
  extern __shared__ __align__(128) kiln_u8 kiln_smem[];
  const kiln_u32 sbase = kiln_smem_u32(kiln_smem);
  int *const gtab = reinterpret_cast<int *>(kiln_smem + STAGES * STAGE);
${setup}
  if (GROUPED) {
    if (threadIdx.x < 32) kiln_gemm_groups(gtab, g_offsets, GROUPS, M, NT);
    __syncthreads();
  }
${amax_decl}
${epilogue}
  const kiln_i64 tiles_m = (M + BM - 1) / BM, per_batch = tiles_m * NT;
  const kiln_i64 tiles = GROUPED ? gtab[2 * GROUPS + 1] : per_batch * batches;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, wm = warp / 6, wn = warp % 6;
  // byte offset of 16-byte chunk c of line L in a tile
  auto chunk = [](int L, int c) { return (kiln_u32)(L * 128 + ((c ^ (L & 7)) << 4)); };
#pragma unroll 1
  for (kiln_i64 tile = blockIdx.x * gridDim.y + blockIdx.y; tile < tiles; tile += gridDim.x * gridDim.y) {
    // (bt: the batch of A and C; eb: of B, the expert of a grouped tile, -1 for group 0)
    kiln_i64 bt, eb, m0, m_end, n0;
    if (GROUPED) {
      bt = 0, eb = kiln_gemm_group_tile(gtab, GROUPS, tile, BNO, m0, m_end, n0) - 1;
    } else {
      bt = tile / per_batch, eb = bt, m_end = M;
      const kiln_i64 r = tile - bt * per_batch, grp = r / (8 * NT), first = grp * 8;
      const kiln_i64 gsz = tiles_m - first < 8 ? tiles_m - first : 8, rem = r - grp * 8 * NT;
      m0 = (first + rem % gsz) * BM, n0 = (rem / gsz) * BNO;
    }
    const int kbs = GROUPED && eb < 0 ? 0 : KB;  // group 0: no products, the epilogue of 0
    const kiln_u8 *a = gA + bt * a_bs, *b = gB + eb * b_bs, *b2 = gB2 + eb * b_bs;
    auto load_stage = [&](int s, int kb) {
      if (t >= 256) return;
      const kiln_u32 sa = sbase + (kiln_u32)s * STAGE, sb = sa + A_BYTES;
      const kiln_i64 k0 = (kiln_i64)kb * BK;
      if (ASYNC) {
        kiln_gemm_load_async<A_KMAJOR, BM, 256, ESZ>(sa, a, lda, m0, M, k0, K, t);
        kiln_gemm_load_async<B_KMAJOR, BN, 256, ESZ, DUAL>(sb, b, ldb, n0, N, k0, K, t, b2);
      } else {
        kiln_gemm_load_elems<BM, 256, ESZ, true>(sa, a, a_smn, a_sk, m0, M, k0, K, t);
        kiln_gemm_load_elems<BN, 256, ESZ, false>(sb, b, b_smn, b_sk, n0, N, k0, K, t);
      }
    };
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int n = 0; n < 4; n++)
#pragma unroll
        for (int v = 0; v < 4; v++) acc[i][n][v] = 0.0f;
    // BSCALE: the scales of the thread's rows (scale_a[i][h]: rows + 8 h) and columns
    // (scale_b[n][j]: columns + j) for the range of k from k on
    float scale_a[4][2], scale_b[4][2];
    auto load_scales = [&](int k) {
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const kiln_i64 row = m0 + wm * 64 + i * 16 + (lane >> 2) + h * 8;
          const kiln_i64 col = n0 + wn * 32 + i * 8 + (lane & 3) * 2 + h;
          scale_a[i][h] = kiln_gemm_scale_a(a_sc, row < M ? row : M - 1, k, a_sc_mn, a_sc_k);
          scale_b[i][h] = kiln_gemm_scale_b(b_sc, col < N ? col : N - 1, k, b_sc_mn, b_sc_k);
        }
    };
    __syncthreads();  // the previous tile's last stages are no longer read
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
      if (s < kbs) load_stage(s, s);
      kiln_cp_async_commit();
    }
#pragma unroll 1
    for (int kb = 0; kb < kbs; kb++) {
      kiln_cp_async_wait<STAGES - 2>();
      __syncthreads();  // stage kb landed for everyone; stage kb - 1 is no longer read
      if (kb + STAGES - 1 < kbs) load_stage((kb + STAGES - 1) % STAGES, kb + STAGES - 1);
      kiln_cp_async_commit();
      const kiln_u32 sa = sbase + (kiln_u32)(kb % STAGES) * STAGE, sb = sa + A_BYTES;
#pragma unroll(BSCALE ? 1 : BK / 16)  // (BSCALE: one step's fragments live at a time; no spills)
      for (int ks = 0; ks < BK / 16; ks++) {
        kiln_u32 af[4][4], bf[4][2];
        // the A fragment of rows wm * 64 + i * 16 .. + 15
        auto load_a = [&](int i, kiln_u32 (&f)[4]) {
          const int m = wm * 64 + i * 16;
          if (A_KMAJOR) {  // 8x8 tiles (m 0-7 | 8-15) x (k 0-7 | 8-15), rows = m
            const int L = m + (lane & 7) + ((lane >> 3) & 1) * 8;
            kiln_ldmatrix_x4(f, sa + chunk(L, ks * 2 + (lane >> 4)));
          } else {         // stored k-rows of m: transposed tiles, rows = k
            const int mm = m + ((lane >> 3) & 1) * 8, k = ks * 16 + (lane >> 4) * 8 + (lane & 7);
            kiln_ldmatrix_x4_trans(f, sa + chunk((mm / 64) * 64 + k, (mm % 64) / 8));
          }
        };
        if (!BSCALE) {
#pragma unroll
          for (int i = 0; i < 4; i++) load_a(i, af[i]);
        }
#pragma unroll
        for (int p = 0; p < 2; p++) {
          const int n = wn * 32 + p * 16;
          kiln_u32 q[4];
          if (B_KMAJOR) {  // rows = n: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
            const int L = n + (lane >> 4) * 8 + (lane & 7);
            kiln_ldmatrix_x4(q, sb + chunk(L, ks * 2 + ((lane >> 3) & 1)));
          } else {         // rows = k: the same four tiles, transposed
            const int nn = n + (lane >> 4) * 8, k = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
            kiln_ldmatrix_x4_trans(q, sb + chunk((nn / 64) * 64 + k, (nn % 64) / 8));
          }
          bf[2 * p][0] = q[0]; bf[2 * p][1] = q[1]; bf[2 * p + 1][0] = q[2]; bf[2 * p + 1][1] = q[3];
        }
        if (BSCALE) {  // each k16 step's products into fresh registers, added with their scales
          const int k = kb * BK + ks * 16;  // (K is a compile-time int)
          if (k % SCALE_K == 0) load_scales(k);
#pragma unroll
          for (int i = 0; i < 4; i++) {  // (one row block's A fragment at a time: registers are short)
            load_a(i, af[0]);
#pragma unroll
            for (int n = 0; n < 4; n++) {
              float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              kiln_mma_${MMA_T}(part, af[0], bf[n][0], bf[n][1]);
#pragma unroll
              for (int v = 0; v < 4; v++) acc[i][n][v] = fmaf(part[v], scale_a[i][v >> 1] * scale_b[n][v & 1], acc[i][n][v]);
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < 4; i++)
#pragma unroll
            for (int n = 0; n < 4; n++) kiln_mma_${MMA_T}(acc[i][n], af[i], bf[n][0], bf[n][1]);
        }
      }
    }
    kiln_cp_async_wait<0>();
    // epilogue from the accumulators: c0, c1 at (row g, cols 2q, 2q+1), c2, c3 at row g + 8
    // (DUAL: blocks n and n + 2 are B's and B2's products at one column pair)
    constexpr int NW = DUAL ? 16 : 32;  // output columns per warp
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int n = 0; n < NW / 8; n++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const kiln_i64 row = m0 + wm * 64 + i * 16 + (lane >> 2) + h * 8;
          const kiln_i64 col = n0 + wn * NW + n * 8 + (lane & 3) * 2;
          const int n2 = DUAL ? n + 2 : n;
          if (row < m_end && col < N)
            kiln_epilogue(acc[i][n][2 * h], acc[i][n][2 * h + 1], bt, row, col, 0u, true, acc[i][n2][2 * h], acc[i][n2][2 * h + 1]);
        }
  }
${amax_publish}
}
