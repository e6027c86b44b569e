// kiln gemm engine, sm_90a path: ${what}.
// Persistent and warp-specialized, 384 threads: warpgroup 0 (${REG_PRODUCER} registers) copies k-blocks of
// A (128 lines) and B (${BN} lines) with cp.async into a ring of ${STAGES} stages; warpgroups 1 and 2
// (${REG_CONSUMER} registers) each multiply a 64 x ${BN} half of the 128 x ${BN} tile with wgmma from
// shared memory (128-byte swizzle, descriptors of common/wgmma) and run the fused epilogue on
// their fp32 accumulators. Stage handover: full[s] (128 producer arrivals) and empty[s] (8
// consumer warps). The producer signals k-block i once its own copies of k-block i are done
// and fenced for the async proxy (cp.async.wait_group, fence.proxy.async), LAG = STAGES - 2
// k-blocks behind its issue point so copies stay in flight. Tiles go round-robin over the CTAs
// in groups of 8 m tiles per column of n tiles (operands shared in L2).
extern "C" __global__ void __launch_bounds__(384, 1) ${symbol}(${params}) {
  constexpr int BM = 128, BN = ${BN}, STAGES = ${STAGES}, ESZ = ${ESZ}, LAG = STAGES - 2;
  constexpr int BK = 128 / ESZ;                // k per block: one 128-byte line
  constexpr kiln_i64 N = ${N}, K = ${K};
  constexpr int KB = (int)((K + BK - 1) / BK);
  constexpr int NT = (int)((N + BN - 1) / BN);
  constexpr kiln_u32 A_BYTES = BM * 128, STAGE = (BM + BN) * 128;
  constexpr bool A_KMAJOR = ${A_KMAJOR}, B_KMAJOR = ${B_KMAJOR}, PROMOTE = ${PROMOTE};
  extern __shared__ __align__(1024) kiln_u8 kiln_smem[];
  const kiln_u32 sbase = (kiln_smem_u32(kiln_smem) + 1023u) & ~1023u;
  const kiln_u32 bars = sbase + STAGES * STAGE;  // full[s] at bars + 8 s, empty[s] at bars + 8 (STAGES + s)
${setup}
${amax_decl}
  const kiln_i64 tiles_m = (M + BM - 1) / BM, per_batch = tiles_m * NT, tiles = per_batch * batches;
  // tile index -> (batch, m0, n0)
  auto tile_of = [&](kiln_i64 tile, kiln_i64 &bt, kiln_i64 &m0, kiln_i64 &n0) {
    bt = tile / per_batch;
    const kiln_i64 r = tile - bt * per_batch, grp = r / (8 * NT), first = grp * 8;
    const kiln_i64 gsz = tiles_m - first < 8 ? tiles_m - first : 8, rem = r - grp * 8 * NT;
    m0 = (first + rem % gsz) * BM;
    n0 = (rem / gsz) * BN;
  };
  if (threadIdx.x == 0) {
#pragma unroll 1
    for (int s = 0; s < STAGES; s++) {
      kiln_mbar_init(bars + 8 * s, 128);
      kiln_mbar_init(bars + 8 * (STAGES + s), 8);
    }
  }
  __syncthreads();
  const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
  if (wg == 0) {
    // ---- producer
    kiln_setmaxnreg_dec<${REG_PRODUCER}>();
    kiln_u32 it = 0;  // k-blocks issued, over all tiles
#pragma unroll 1
    for (kiln_i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      kiln_i64 bt, m0, n0;
      tile_of(tile, bt, m0, n0);
      const kiln_u8 *a = gA + bt * a_bs, *b = gB + bt * b_bs;
#pragma unroll 1
      for (int kb = 0; kb < KB; kb++, it++) {
        const kiln_u32 s = it % STAGES;
        kiln_mbar_wait(bars + 8 * (STAGES + s), ((it / STAGES) & 1) ^ 1);
        const kiln_u32 sa = sbase + s * STAGE;
        kiln_gemm_load_async<A_KMAJOR, BM, 128, ESZ>(sa, a, lda, m0, M, (kiln_i64)kb * BK, K, t);
        kiln_gemm_load_async<B_KMAJOR, BN, 128, ESZ>(sa + A_BYTES, b, ldb, n0, N, (kiln_i64)kb * BK, K, t);
        kiln_cp_async_commit();
        if (it >= LAG) {
          kiln_cp_async_wait<LAG>();
          kiln_fence_proxy_async();
          kiln_mbar_arrive(bars + 8 * ((it - LAG) % STAGES));
        }
      }
    }
    kiln_cp_async_wait<0>();
    kiln_fence_proxy_async();
#pragma unroll 1
    for (kiln_u32 j = it > LAG ? it - LAG : 0; j < it; j++) kiln_mbar_arrive(bars + 8 * (j % STAGES));
  } else {
    // ---- consumers: warpgroup 1 takes rows 0-63 of the tile, warpgroup 2 rows 64-127
    kiln_setmaxnreg_inc<${REG_CONSUMER}>();
    const int half = wg - 1, lane = t & 31, warp = t >> 5;
${epilogue}
    float acc[BN / 2], part[BN / 2];  // part: the k-block's sum when PROMOTE (else unused)
    kiln_u32 it = 0;
#pragma unroll 1
    for (kiln_i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      kiln_i64 bt, m0, n0;
      tile_of(tile, bt, m0, n0);
#pragma unroll
      for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
#pragma unroll 1
      for (int kb = 0; kb < KB; kb++, it++) {
        const kiln_u32 s = it % STAGES;
        kiln_mbar_wait(bars + 8 * s, (it / STAGES) & 1);
        const kiln_u32 sa = sbase + s * STAGE + (kiln_u32)half * 64u * 128u, sb = sbase + s * STAGE + A_BYTES;
        kiln_wgmma_fence();
        auto desc_a = [&](int ks) {
          return A_KMAJOR ? kiln_wgmma_desc(sa + ks * 32, 16, 1024) : kiln_wgmma_desc(sa + ks * 2048, 64 * 128, 1024);
        };
        auto desc_b = [&](int ks) {
          return B_KMAJOR ? kiln_wgmma_desc(sb + ks * 32, 16, 1024) : kiln_wgmma_desc(sb + ks * 2048, BK * 128, 1024);
        };
        if (PROMOTE) {
          // the k-block into fresh registers, then added to acc in fp32 (fp8 accumulation in
          // the tensor cores keeps about 13 mantissa bits)
          kiln_wgmma_tile_first(part, desc_a(0), desc_b(0));
#pragma unroll
          for (int ks = 1; ks < 4; ks++) kiln_wgmma_tile(part, desc_a(ks), desc_b(ks));
          kiln_wgmma_commit();
          kiln_wgmma_wait<0>();
          if (lane == 0) kiln_mbar_arrive(bars + 8 * (STAGES + s));
#pragma unroll
          for (int i = 0; i < BN / 2; i++) acc[i] += part[i];
        } else {
#pragma unroll
          for (int ks = 0; ks < 4; ks++) kiln_wgmma_tile(acc, desc_a(ks), desc_b(ks));  // 32 bytes of k each
          kiln_wgmma_commit();
          kiln_wgmma_wait<1>();  // k-block it - 1 is done: its stage goes back to the producer
          if (kb > 0 && lane == 0) kiln_mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
        }
      }
      if (!PROMOTE) {
        kiln_wgmma_wait<0>();
        if (lane == 0) kiln_mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
      }
      // accumulator i of n8 block b: rows warp * 16 + lane / 4 (+ 8 for i & 2), columns
      // 8 b + 2 (lane % 4) + (i & 1) of this warpgroup's 64-row half
#pragma unroll
      for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const kiln_i64 row = m0 + half * 64 + warp * 16 + (lane >> 2) + h * 8;
          const kiln_i64 col = n0 + nb * 8 + (lane & 3) * 2;
          if (row < M && col < N) kiln_epilogue(acc[nb * 4 + 2 * h], acc[nb * 4 + 2 * h + 1], bt, row, col);
        }
    }
${amax_publish}
  }
}
