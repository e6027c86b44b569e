// kiln gemm engine, sm_90a pingpong path: ${what}.
// Persistent and warp-specialized, 384 threads, the ping-pong schedule (opt-in:
// KILN_PLAN=gemm.schedule=pingpong). One thread of warpgroup 0 (${REG_PRODUCER} registers) copies the
// k-blocks of A (128 lines) and B (${BN} lines) with TMA into one ring of ${STAGES} stages, tile after
// tile. Warpgroups 1 and 2 (${REG_CONSUMER} registers) each own whole 128 x ${BN} tiles (two m64
// wgmma rows per k-step, BN fp32 accumulators per thread) and take the CTA's tiles in turn: its
// tile j (global tile blockIdx.x + j * gridDim.x) goes to warpgroup 1 + j % 2. The ring holds
// k-blocks in tile order, so each stage is read by one warpgroup: full[s] (the producer's arrival
// plus the stage's bytes), empty[s] (the 4 warps of the warpgroup that read it).
// Turns on the tensor cores (named barriers 1 and 2, 256 threads each): warpgroup 1 + h waits on
// barrier 1 + h (bar.sync) before the mainloop of each of its tiles but the CTA's first; once it
// has issued the last wgmma of tile j it arrives (bar.arrive) on the other warpgroup's barrier
// when tile j + 1 exists, then drains its wgmma and runs the fused epilogue while the other
// warpgroup's mainloop has the tensor cores. Every arrival pairs with one wait (no barrier is
// left half-complete at exit), and a warpgroup cannot arrive twice before the other has waited.
// No stream-K, no clusters, no fp8 (the engine keeps the cooperative kernel for those).
${tmaps}
extern "C" __global__ void __launch_bounds__(384, 1) ${symbol}(${params}) {
  constexpr int BM = 128, BN = ${BN}, STAGES = ${STAGES}, ESZ = ${ESZ};
  constexpr int BK = 128 / ESZ;                // k per block: one 128-byte line
  constexpr kiln_i64 N = ${N}, K = ${K};
  constexpr int KB = (int)((K + BK - 1) / BK);
  constexpr int NT = (int)((N + BN - 1) / BN);
  constexpr kiln_u32 A_BYTES = BM * 128, STAGE = (BM + BN) * 128;
  constexpr bool A_KMAJOR = ${A_KMAJOR}, B_KMAJOR = ${B_KMAJOR};
  constexpr kiln_u32 TURN = 1;  // named barriers TURN + h: warpgroup 1 + h may start a mainloop
  extern __shared__ __align__(1024) kiln_u8 kiln_smem[];
  const kiln_u32 sbase = (kiln_smem_u32(kiln_smem) + 1023u) & ~1023u;
  const kiln_u32 bars = sbase + STAGES * STAGE;  // full[s] at bars + 8 s, empty[s] at bars + 8 (STAGES + s)
${setup}
${amax_decl}
  // tiles round-robin over the CTAs, in groups of ${GROUP_M} m tiles per column of n tiles (operands
  // shared in L2)
  constexpr int GROUP = ${GROUP_M};
  const kiln_i64 tiles_m = (M + BM - 1) / BM, per_batch = tiles_m * NT, tiles = per_batch * batches;
  auto tile_of = [&](kiln_i64 tile, kiln_i64 &bt, kiln_i64 &m0, kiln_i64 &n0) {
    bt = tile / per_batch;
    const kiln_i64 r = tile - bt * per_batch, grp = r / (GROUP * NT), first = grp * GROUP;
    const kiln_i64 gsz = tiles_m - first < GROUP ? tiles_m - first : GROUP, rem = r - grp * GROUP * NT;
    m0 = (first + rem % gsz) * BM;
    n0 = (rem / gsz) * BN;
  };
  const kiln_i64 G = gridDim.x, n_tiles = (kiln_i64)blockIdx.x < tiles ? (tiles - blockIdx.x + G - 1) / G : 0;
  if (threadIdx.x == 0) {
#pragma unroll 1
    for (int s = 0; s < STAGES; s++) {
      kiln_mbar_init(bars + 8 * s, 1);
      kiln_mbar_init(bars + 8 * (STAGES + s), 4);
    }
  }
  __syncthreads();
  const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
  if (wg == 0) {
    // ---- producer: one thread issues every copy, the CTA's tiles in order
    kiln_setmaxnreg_dec<${REG_PRODUCER}>();
    if (t == 0) {
${prefetch}
      kiln_u32 it = 0;  // k-blocks issued, over all tiles
#pragma unroll 1
      for (kiln_i64 j = 0; j < n_tiles; j++) {
        kiln_i64 bt, m0, n0;
        tile_of(blockIdx.x + j * G, bt, m0, n0);
        const kiln_i64 eb = bt;  // B's batch coordinate (the copies' name for it)
        (void)bt, (void)eb;
#pragma unroll 1
        for (int kb = 0; kb < KB; kb++, it++) {
          const kiln_u32 s = it % STAGES, full = bars + 8 * s;
          kiln_mbar_wait(bars + 8 * (STAGES + s), ((it / STAGES) & 1) ^ 1);
          const kiln_u32 sa = sbase + s * STAGE, sb = sa + A_BYTES;
          const int k0 = kb * BK;
          kiln_mbar_expect_tx(full, STAGE);
${load}
        }
      }
    }
  } else {
    // ---- math warpgroups: h = 0 takes the CTA's tiles 0, 2, 4, ..., h = 1 tiles 1, 3, 5, ...
    kiln_setmaxnreg_inc<${REG_CONSUMER}>();
    const int h = wg - 1, lane = t & 31, warp = t >> 5;
${epilogue}
    float acc[2][BN / 2];  // rows 0-63 and 64-127 of the tile
#pragma unroll 1
    for (kiln_i64 j = h; j < n_tiles; j += 2) {
      kiln_i64 bt, m0, n0;
      tile_of(blockIdx.x + j * G, bt, m0, n0);
#pragma unroll
      for (int mh = 0; mh < 2; mh++)
#pragma unroll
        for (int i = 0; i < BN / 2; i++) acc[mh][i] = 0.0f;
      if (j > 0) kiln_bar_sync(TURN + h, 256);  // the other warpgroup has issued tile j - 1
      kiln_u32 it = (kiln_u32)j * KB;           // the ring's k-block count at this tile's start
#pragma unroll 1
      for (int kb = 0; kb < KB; kb++, it++) {
        const kiln_u32 s = it % STAGES;
        kiln_mbar_wait(bars + 8 * s, (it / STAGES) & 1);
        const kiln_u32 sa = sbase + s * STAGE, sb = sa + A_BYTES;
        kiln_wgmma_fence();
        auto desc_a = [&](int mh, int ks) {
          const kiln_u32 a = sa + (kiln_u32)mh * 64u * 128u;
          return A_KMAJOR ? kiln_wgmma_desc(a + ks * 32, 16, 1024) : kiln_wgmma_desc(a + ks * 2048, 64 * 128, 1024);
        };
        auto desc_b = [&](int ks) {
          return B_KMAJOR ? kiln_wgmma_desc(sb + ks * 32, 16, 1024) : kiln_wgmma_desc(sb + ks * 2048, BK * 128, 1024);
        };
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {  // 32 bytes of k each
          kiln_wgmma_tile(acc[0], desc_a(0, ks), desc_b(ks));
          kiln_wgmma_tile(acc[1], desc_a(1, ks), desc_b(ks));
        }
        kiln_wgmma_commit();
        kiln_wgmma_wait<1>();  // k-block it - 1 is done: its stage goes back to the producer
        if (kb > 0 && lane == 0) kiln_mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
      }
      if (j + 1 < n_tiles) kiln_bar_arrive(TURN + (h ^ 1), 256);  // the tensor cores' turn passes
      kiln_wgmma_wait<0>();
      if (lane == 0) kiln_mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
      // accumulator i of n8 block nb in row half mh: rows mh * 64 + warp * 16 + lane / 4
      // (+ 8 for i & 2), columns 8 nb + 2 (lane % 4) + (i & 1)
#pragma unroll
      for (int mh = 0; mh < 2; mh++)
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
          for (int r = 0; r < 2; r++) {
            const kiln_i64 row = m0 + mh * 64 + warp * 16 + (lane >> 2) + r * 8;
            const kiln_i64 col = n0 + nb * 8 + (lane & 3) * 2;
            if (row < M && col < N) kiln_epilogue(acc[mh][nb * 4 + 2 * r], acc[mh][nb * 4 + 2 * r + 1], bt, row, col);
          }
    }
${amax_publish}
  }
}
