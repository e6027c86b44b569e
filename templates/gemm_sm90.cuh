// kiln gemm engine, sm_90a path: ${what}.
// Persistent and warp-specialized, 384 threads: one thread of warpgroup 0 (${REG_PRODUCER} registers)
// copies k-blocks of A (128 lines) and B (${BN} lines) with the tensor copy engine (TMA) into a ring
// of ${STAGES} stages; warpgroups 1 and 2 (${REG_CONSUMER} registers) each multiply a 64 x ${BN} half of
// the 128 x ${BN} tile with wgmma from shared memory (128-byte swizzle, descriptors of
// common/wgmma) and run the fused epilogue on their fp32 accumulators. Stage handover: full[s]
// (the producer's arrival plus the stage's bytes as TMA transactions) and empty[s] (8 consumer
// warps, of every CTA of the cluster). Clusters of CM = ${CM} CTAs along M take units of CM
// vertically adjacent tiles, round-robin in groups of ${GROUP_M} m tiles per column of n tiles
// (operands shared in L2); each CTA copies 1/CM of the B tile, multicast to the cluster, and
// its own A tile. Stream-K (SK, without clusters): when the last wave of tiles is partial, its
// tiles are split along K over the CTAs and the partial sums meet in the workspace (below).
// EPI: one output is staged per warpgroup through two shared buffers of 64 rows x 128 bytes
// and written by tensor stores, so a warpgroup goes on to its next tile while they drain.
// EWG (with EPI): warps 1-3 of warpgroup 0 (idle beside the producer thread; the warpgroup then
// has ${REG_PRODUCER} registers, the consumers ${REG_CONSUMER}) run the epilogue. The consumers hand
// each finished tile's fp32 sums to them through a per-CTA buffer in the workspace (it stays in
// L2) and go on to the next tile's mainloop, so the epilogue runs under the tensor cores' work
// instead of between tiles; ewg_full / ewg_empty (mbarriers) pass the buffer back and forth. An
// epilogue warp takes a consumer warp's 16 rows at a time and stages them through four buffers
// of its own (16 rows x 128 bytes), stored by its lane 0: no barrier beyond the warp.
${tmaps}
extern "C" __global__ void __launch_bounds__(384, 1) ${symbol}(${params}) {
  constexpr int BM = 128, BN = ${BN}, STAGES = ${STAGES}, ESZ = ${ESZ}, CM = ${CM};
  constexpr int BK = 128 / ESZ;                // k per block: one 128-byte line
  constexpr kiln_i64 N = ${N}, K = ${K};
  constexpr int KB = (int)((K + BK - 1) / BK);
  // DUAL: a dual GEMM, B's BNO lines then B2's in each stage, acc[i + BN / 4] the second
  // product beside acc[i]; the output tile is BNO wide
  constexpr bool DUAL = ${DUAL};
  constexpr int BNO = DUAL ? BN / 2 : BN;
  constexpr int NT = (int)((N + BNO - 1) / BNO);
  constexpr kiln_u32 A_BYTES = BM * 128, STAGE = (BM + BN) * 128;
  constexpr bool A_KMAJOR = ${A_KMAJOR}, B_KMAJOR = ${B_KMAJOR}, PROMOTE = ${PROMOTE};
  // BSCALE (with PROMOTE): block-scaled fp8, each k-block's sum times A's scale of its row and
  // B's of its columns as it is added (kiln_gemm_scale_a/b); B's blocks are SCALE_BN columns
  // wide (0: B unscaled), so a tile meets at most two of them
  constexpr bool BSCALE = ${BSCALE};
  constexpr int SCALE_BN = ${SCALE_BN};
  static_assert(!BSCALE || (PROMOTE && (SCALE_BN == 0 || (SCALE_BN % 128 == 0 && BNO <= SCALE_BN + 64))),
                "block scales: fp8 k-blocks, at most two of B's scale blocks a tile");
  constexpr bool SK = ${SK};
  constexpr int PF_KB = 8;  // k-blocks before a tile's end at which its epilogue inputs go to L2
  constexpr bool EPI = ${EPI}, EWG = ${EWG};
  constexpr int OSZ = ${OSZ}, CW = 128 / OSZ;  // staged output: bytes per element, columns per chunk
  constexpr kiln_u32 EPI_BYTES = ${EPI_BYTES};  // two 64 x 128-byte buffers per consumer warpgroup
  static_assert(!EPI || BNO % CW == 0, "a staged tile is whole chunks of 128 bytes of columns");
  static_assert(!EWG || (EPI && !PROMOTE && !DUAL), "the epilogue warps take a staged output of a bf16/fp16 GEMM");
  // (the second product of a pair: acc index i + DI, i itself when there is none)
  constexpr int DI = DUAL ? BN / 4 : 0;
  // stream-K rule (docs/GEMM.md): a tile splits into at most about SK_PIECES ranges; used only
  // when the last wave is at most SK_FILL_PCT % full and it saves each CTA SK_MIN_SAVED k-blocks
  // (SK_ONE_WAVE: only when every tile is in that wave, tiles < G)
  constexpr int SK_SLOTS = ${SK_SLOTS}, SK_PIECES = ${SK_PIECES}, SK_FILL_PCT = ${SK_FILL_PCT}, SK_MIN_SAVED = ${SK_MIN_SAVED};
  constexpr bool SK_ONE_WAVE = ${SK_ONE_WAVE};
  // GROUPED (moe_grouped_matmul): GROUPS row groups (group 0 the rows before the first expert's,
  // group j expert j - 1's) of A and C, each against its expert's B; their table (gtab,
  // kiln_gemm_groups) lies past the barriers; no stream-K, no staged output
  constexpr bool GROUPED = ${GROUPED};
  constexpr int GROUPS = ${GROUPS};
  static_assert(!GROUPED || (!SK && !EPI && !EWG && CM == 1 && !DUAL), "grouped: the plain schedule, direct stores");
  extern __shared__ __align__(1024) kiln_u8 kiln_smem[];
  const kiln_u32 sbase = (kiln_smem_u32(kiln_smem) + 1023u) & ~1023u;
  const kiln_u32 epi_base = sbase + STAGES * STAGE;  // buffer b of warpgroup h at epi_base + 8192 (2 h + b)
  const kiln_u32 bars = epi_base + EPI_BYTES;       // full[s] at bars + 8 s, empty[s] at bars + 8 (STAGES + s)
  const kiln_u32 ewg_full = bars + 16 * STAGES, ewg_empty = ewg_full + 8;  // EWG: the sums buffer's handover
  int *const gtab = reinterpret_cast<int *>(kiln_smem + (ewg_empty + 8u - kiln_smem_u32(kiln_smem)));
${setup}
  if (GROUPED) {
    if (threadIdx.x < 32) kiln_gemm_groups(gtab, g_offsets, GROUPS, M, NT);
    __syncthreads();
  }
${amax_decl}
  // units of CM vertically adjacent tiles (a cluster's; the last may reach past M: its copies
  // read zeros and its epilogue stores nothing)
  const kiln_u32 rank = CM > 1 ? kiln_cluster_rank() : 0;
  constexpr int GROUP = ${GROUP_M} / CM;  // units per group of ${GROUP_M} m tiles
  const kiln_i64 units_m = ((M + BM - 1) / BM + CM - 1) / CM, per_batch = units_m * NT;
  const kiln_i64 tiles = GROUPED ? gtab[2 * GROUPS + 1] : per_batch * batches;
  // unit index -> (batch of A and C, of B, m0 of this CTA's tile, the rows' end, n0)
  auto tile_of = [&](kiln_i64 tile, kiln_i64 &bt, kiln_i64 &eb, kiln_i64 &m0, kiln_i64 &m_end, kiln_i64 &n0) {
    if (GROUPED) {  // eb: the expert (-1: group 0, no B)
      bt = 0, eb = kiln_gemm_group_tile(gtab, GROUPS, tile, BNO, m0, m_end, n0) - 1;
      return;
    }
    bt = tile / per_batch, eb = bt, m_end = M;
    const kiln_i64 r = tile - bt * per_batch, grp = r / (GROUP * NT), first = grp * GROUP;
    const kiln_i64 gsz = units_m - first < GROUP ? units_m - first : GROUP, rem = r - grp * GROUP * NT;
    m0 = ((first + rem % gsz) * CM + rank) * BM;
    n0 = (rem / gsz) * BNO;
  };
  // The schedule: whole tiles b, b + G, ... (data-parallel), except that with stream-K the rem
  // tiles of a partial last wave are split along K: their rem * KB k-blocks, in (tile, k-block)
  // order, are cut into sk contiguous ranges, one per CTA b < sk, each taken last tile first.
  // A range that lacks its tile's last k-block leaves its partial sums in workspace slot b
  // (one per CTA at most: only the range's last tile can lack it) and sets its flags; the range
  // holding the last k-block (the "owner") adds the earlier ranges' sums, from lower CTAs only.
${sk_decl}
  // SK_ADAPT: a tile of few live rows (M < 128: one m tile) hands over few partial sums, so it
  // splits into more pieces: the owner adds at most about SK_PIECES full tiles' worth
  constexpr bool SK_ADAPT = ${SK_ADAPT};
  const kiln_i64 live_rows = SK_ADAPT && units_m == 1 ? (M + 15) / 16 * 16 : BM;
  const kiln_i64 pieces = SK_PIECES * BM / (live_rows > 0 ? live_rows : BM);
  const kiln_i64 G = gridDim.x, rem = tiles % G, sk = rem * pieces < G ? rem * pieces : G;
  const bool streamk = SK && CM == 1 && rem > 0 && rem * 100 <= G * SK_FILL_PCT && G <= SK_SLOTS && (!SK_ONE_WAVE || tiles < G) &&
                       KB - (rem * KB + sk - 1) / sk >= SK_MIN_SAVED;
  const bool in_sk = streamk && (kiln_i64)blockIdx.x < sk;
  const kiln_i64 dp_end = streamk ? tiles - rem : tiles, sk_base = dp_end * KB, sk_kbs = rem * KB;
  const kiln_i64 sk_lo = in_sk ? sk_base + blockIdx.x * sk_kbs / sk : 0;        // this CTA's range [sk_lo, sk_hi)
  const kiln_i64 sk_hi = in_sk ? sk_base + (blockIdx.x + 1) * sk_kbs / sk : 0;   // of flattened k-blocks
  const kiln_i64 n_dp = (kiln_i64)blockIdx.x < dp_end ? (dp_end - blockIdx.x + G - 1) / G : 0;
  const kiln_i64 n_work = n_dp + (in_sk ? (sk_hi - 1) / KB - sk_lo / KB + 1 : 0);
  // work item w: a tile and its k-blocks [kb0, kb1)
  auto work = [&](kiln_i64 w, kiln_i64 &tile, int &kb0, int &kb1) {
    if (w < n_dp) {
      tile = blockIdx.x + w * G, kb0 = 0, kb1 = KB;
    } else {
      tile = (sk_hi - 1) / KB - (w - n_dp);
      const kiln_i64 t0 = tile * KB;
      kb0 = (int)((sk_lo > t0 ? sk_lo : t0) - t0), kb1 = (int)((sk_hi < t0 + KB ? sk_hi : t0 + KB) - t0);
    }
  };
  // work item w, placed: what every role's loop over the CTA's work starts from
  struct work_item { kiln_i64 tile, bt, eb, m0, m_end, n0; int kb0, kb1; };
  auto item = [&](kiln_i64 w) {
    work_item i;
    work(w, i.tile, i.kb0, i.kb1);
    tile_of(i.tile, i.bt, i.eb, i.m0, i.m_end, i.n0);
    if (GROUPED && i.eb < 0) i.kb0 = i.kb1 = 0;  // group 0: no products, the epilogue of 0
    return i;
  };
  if (threadIdx.x == 0) {
#pragma unroll 1
    for (int s = 0; s < STAGES; s++) {
      kiln_mbar_init(bars + 8 * s, 1);
      kiln_mbar_init(bars + 8 * (STAGES + s), 8 * CM);
    }
    if (EWG) {
      kiln_mbar_init(ewg_full, 8);   // the consumer warps, once their sums are in the buffer
      kiln_mbar_init(ewg_empty, 3);  // the epilogue warps, once they have read them
    }
  }
  if (CM > 1) {
    kiln_fence_mbar_init();
    kiln_cluster_sync();
  } else {
    __syncthreads();
  }
  const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
  if (wg == 0) {
    // ---- producer: one thread issues every copy; with EWG, warps 1-3 run the epilogue
    kiln_setmaxnreg_dec<${REG_PRODUCER}>();
    if (EWG && t >= 32) {
      const int lane = t & 31, ew = (t >> 5) - 1;  // epilogue warp 0-2
      int half = 0;
${epilogue}
      kiln_u32 handed = 0, ebuf = 0;  // ebuf: which of the warp's four staging buffers the next chunk fills
#pragma unroll 1
      for (kiln_i64 w = 0; w < n_work; w++) {
        const auto [tile, bt, eb, m0, m_end, n0, kb0, kb1] = item(w);
        (void)eb, (void)m_end;
        if (SK && kb1 < KB) continue;  // a stream-K range without the tile's last k-block: no epilogue here
        kiln_mbar_wait(ewg_full, handed & 1);
        // consumer warp f (half f / 4, warp f % 4) of the tile: epilogue warp ew takes f = ew, ew + 3, ...
#pragma unroll 1
        for (int f = ew; f < 8; f += 3) {
          half = f >> 2;
          const int cw = f & 3;
          const float4 *src = reinterpret_cast<const float4 *>(ewg_buf + half * (64 * BN)) + cw * 32 + lane;
          constexpr int NB_CH = CW / 8;
#pragma unroll 1  // one chunk's code: unrolled, the warp's registers do not hold every chunk's addresses
          for (int ch = 0; ch < BN / CW; ch++) {
            float4 a4[NB_CH];
#pragma unroll
            for (int q = 0; q < NB_CH; q++) a4[q] = src[(ch * NB_CH + q) * 128];
            if (f + 3 >= 8 && ch == BN / CW - 1) {  // the warp's last sums are in registers: its part of the buffer goes back
              __syncwarp();
              if (lane == 0) kiln_mbar_arrive(ewg_empty);
            }
            const kiln_u32 buf = epi_base + (kiln_u32)(ew * 4 + ebuf) * 2048u;
            if (lane == 0) kiln_bulk_wait_read<3>();  // the store that read this buffer four chunks ago
            __syncwarp();
#pragma unroll
            for (int q = 0; q < NB_CH; q++)
#pragma unroll
              for (int h = 0; h < 2; h++) {
                const int nb = ch * NB_CH + q, r = (lane >> 2) + h * 8;
                const kiln_i64 row = m0 + half * 64 + cw * 16 + r, col = n0 + nb * 8 + (lane & 3) * 2;
                const kiln_u32 off = (kiln_u32)((q * 8 + (lane & 3) * 2) * OSZ);
                const kiln_u32 sd = buf + r * 128 + ((off & ~15u) ^ ((kiln_u32)(r & 7) << 4)) + (off & 15u);
                kiln_epilogue(h ? a4[q].z : a4[q].x, h ? a4[q].w : a4[q].y, bt, row < M ? row : M - 1,
                              col < N ? col : N - 2, sd, row < M && col < N);
                // at most four n8 blocks' inputs in flight: more spill (one warp's registers)
                if (q % 4 == 3 && h == 1) asm volatile("" ::: "memory");
              }
            kiln_fence_proxy_async();  // the writes, visible to the tensor copy engine
            __syncwarp();
            if (lane == 0) {
              const int c0 = (int)(n0 + ch * CW), c1 = (int)(m0 + half * 64 + cw * 16);
              ${store_chunk}
              kiln_bulk_commit();
            }
            ebuf = (ebuf + 1) & 3u;
          }
        }
        handed++;
      }
      if (lane == 0) kiln_bulk_wait<0>();  // the staged stores are done before the CTA leaves
${amax_publish}
    }
    if (t == 0) {
${prefetch}
      kiln_u32 it = 0;  // k-blocks issued, over all tiles
#pragma unroll 1
      for (kiln_i64 w = 0; w < n_work; w++) {
        const auto [tile, bt, eb, m0, m_end, n0, kb0, kb1] = item(w);
        (void)tile, (void)bt, (void)eb, (void)m_end;
#pragma unroll 1
        for (int kb = kb0; kb < kb1; kb++, it++) {
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
    // ---- consumers: warpgroup 1 takes rows 0-63 of the tile, warpgroup 2 rows 64-127
    kiln_setmaxnreg_inc<${REG_CONSUMER}>();
    const int half = wg - 1, lane = t & 31, warp = t >> 5;
${epilogue}
    float acc[BN / 2], part[BN / 2];  // part: the k-block's sum when PROMOTE (else unused)
    // a stage goes back to the producers of every CTA of the cluster (their copies fill it)
    auto release = [&](kiln_u32 s) {
      kiln_mbar_arrive(bars + 8 * (STAGES + s));
      for (kiln_u32 p = 1; p < (kiln_u32)CM; p++) kiln_mbar_arrive_peer(bars + 8 * (STAGES + s), (rank + p) % CM);
    };
    kiln_u32 it = 0, ebuf = 0, handed = 0;  // ebuf: the staging buffer the next chunk fills; handed: tiles to EWG
#pragma unroll 1
    for (kiln_i64 w = 0; w < n_work; w++) {
      const auto [tile, bt, eb, m0, m_end, n0, kb0, kb1] = item(w);
      (void)eb;
      // the k-block after whose MMAs the CTA that runs the tile's epilogue prefetches its inputs
      // (PF_KB ahead of the end, ~5 us: late enough that the mainloop's traffic leaves them in L2)
      const int pf_kb = (!SK || kb1 == KB) ? (kb1 - kb0 > PF_KB ? kb1 - PF_KB : kb0) : -1;
#pragma unroll
      for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
      // BSCALE: the thread's rows r0 and r0 + 8; n8 blocks below nbs lie in B's first scale block
      const kiln_i64 r0 = m0 + half * 64 + warp * 16 + (lane >> 2);
      const int nbs = SCALE_BN > 0 ? (int)((SCALE_BN - n0 % SCALE_BN) / 8) : BN;
#pragma unroll 1
      for (int kb = kb0; kb < kb1; kb++, it++) {
        const kiln_u32 s = it % STAGES;
        float sa0 = 1.0f, sa1 = 1.0f, sb0 = 1.0f, sb1 = 1.0f;
        if (BSCALE) {  // loaded before the stage's wait: the latency hides under it and the MMAs
          const kiln_i64 k = (kiln_i64)kb * BK, c1 = n0 + nbs * 8;
          sa0 = kiln_gemm_scale_a(a_sc, r0 < M ? r0 : M - 1, k, a_sc_mn, a_sc_k);
          sa1 = kiln_gemm_scale_a(a_sc, r0 + 8 < M ? r0 + 8 : M - 1, k, a_sc_mn, a_sc_k);
          sb0 = kiln_gemm_scale_b(b_sc, n0, k, b_sc_mn, b_sc_k);
          sb1 = kiln_gemm_scale_b(b_sc, c1 < N ? c1 : N - 1, k, b_sc_mn, b_sc_k);
        }
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
          if (lane == 0) release(s);
          if (BSCALE) {
            const float s00 = sa0 * sb0, s01 = sa0 * sb1, s10 = sa1 * sb0, s11 = sa1 * sb1;
#pragma unroll
            for (int i = 0; i < BN / 2; i++)
              acc[i] = fmaf(part[i], i / 4 < nbs ? ((i & 2) ? s10 : s00) : ((i & 2) ? s11 : s01), acc[i]);
          } else {
#pragma unroll
            for (int i = 0; i < BN / 2; i++) acc[i] += part[i];
          }
        } else {
#pragma unroll
          for (int ks = 0; ks < 4; ks++) kiln_wgmma_tile(acc, desc_a(ks), desc_b(ks));  // 32 bytes of k each
          kiln_wgmma_commit();
          kiln_wgmma_wait<1>();  // k-block it - 1 is done: its stage goes back to the producer
          if (kb > kb0 && lane == 0) release((it - 1) % STAGES);
        }
        if (kb == pf_kb) kiln_epilogue_prefetch(bt, m0, n0);
      }
      if (!PROMOTE) {  // (a grouped GEMM's group 0 issued none: nothing to wait for or give back)
        kiln_wgmma_wait<0>();
        if (kb1 > kb0 && lane == 0) release((it - 1) % STAGES);
      }
      // a thread's partial sums sit at slot[i * 128] (coalesced); flags: one per consumer warp
      const int fw = half * 4 + warp;
      // a warp whose 16 rows are all past M hands over no sums and takes none (its flag goes up)
      const bool live = m0 + half * 64 + warp * 16 < m_end;
      if (SK && kb1 < KB) {  // stream-K, not the tile's last k-block: hand the sums to its owner
        float *slot = sk_part + (kiln_i64)blockIdx.x * (BM * BN) + half * (64 * BN) + t;
        if (live) {
#pragma unroll
          for (int i = 0; i < BN / 2; i++) slot[i * 128] = acc[i];
        }
        __syncwarp();
        kiln_pdl_wait();  // launched early (pdl): the init kernel has cleared the flags past this point
        if (lane == 0) kiln_flag_release(sk_flags + blockIdx.x * 8 + fw);
        continue;
      }
      if (SK && kb0 > 0 && live) {  // stream-K owner: add the lower CTAs' sums, in a fixed order
        const kiln_i64 first = ((tile * KB - sk_base + 1) * sk - 1) / sk_kbs;  // the range holding k-block 0
        kiln_pdl_wait();
#pragma unroll 1
        for (kiln_i64 c = (kiln_i64)blockIdx.x - 1; c >= first; c--) {
          kiln_flag_wait(sk_flags + c * 8 + fw);
          const float *slot = sk_part + c * (BM * BN) + half * (64 * BN) + t;
#pragma unroll
          for (int i = 0; i < BN / 2; i++) acc[i] += slot[i * 128];
        }
      }
      if (EWG) {  // the sums to the epilogue warps, once they have read the previous tile's
        kiln_mbar_wait(ewg_empty, (handed & 1) ^ 1);
        float4 *dst = reinterpret_cast<float4 *>(ewg_buf + half * (64 * BN)) + t;  // n8 block nb at dst[nb * 128]
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++) dst[nb * 128] = make_float4(acc[nb * 4], acc[nb * 4 + 1], acc[nb * 4 + 2], acc[nb * 4 + 3]);
        __syncwarp();
        if (lane == 0) kiln_mbar_arrive(ewg_full);  // release: the warp's stores before it
        handed++;
        continue;
      }
      // accumulator i of n8 block b: rows warp * 16 + lane / 4 (+ 8 for i & 2), columns
      // 8 b + 2 (lane % 4) + (i & 1) of this warpgroup's 64-row half
      if (!EPI) {
#pragma unroll
        for (int nb = 0; nb < BNO / 8; nb++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const kiln_i64 row = m0 + half * 64 + warp * 16 + (lane >> 2) + h * 8;
            const kiln_i64 col = n0 + nb * 8 + (lane & 3) * 2;
            const int i = nb * 4 + 2 * h;
            if (row < m_end && col < N) kiln_epilogue(acc[i], acc[i + 1], bt, row, col, 0u, true, acc[i + DI], acc[i + DI + 1]);
          }
        continue;
      }
      // staged: CW columns at a time into buffer ebuf (128-byte swizzle: conflict-free writes),
      // then one tensor store of the chunk by thread 0 of the warpgroup (it clips M and N); one
      // flat loop over the n8 blocks, so that every accumulator index is a constant
      constexpr int NB_CH = CW / 8;  // n8 blocks per chunk
#pragma unroll
      for (int nb = 0; nb < BNO / 8; nb++) {
        const int ch = nb / NB_CH;
        const kiln_u32 buf = epi_base + (2u * (kiln_u32)half + ebuf) * 8192u;
        if (nb % NB_CH == 0) {
          if (t == 0) kiln_bulk_wait_read<1>();  // the store that read this buffer two chunks ago
          kiln_bar_sync(1 + half, 128);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int r = warp * 16 + (lane >> 2) + h * 8;
          const kiln_i64 row = m0 + half * 64 + r, col = n0 + nb * 8 + (lane & 3) * 2;
          const kiln_u32 off = (kiln_u32)(((nb % NB_CH) * 8 + (lane & 3) * 2) * OSZ);  // byte in the 128-byte line
          const kiln_u32 sd = buf + r * 128 + ((off & ~15u) ^ ((kiln_u32)(r & 7) << 4)) + (off & 15u);
          // no branch: a pair past M or N reads at clamped indices and lands where the store
          // clips it, so the chunk's loads can issue together
          const int i = nb * 4 + 2 * h;
          kiln_epilogue(acc[i], acc[i + 1], bt, row < M ? row : M - 1, col < N ? col : N - 2, sd, row < M && col < N,
                        acc[i + DI], acc[i + DI + 1]);
        }
        if (nb % NB_CH == NB_CH - 1) {
          kiln_fence_proxy_async();  // the writes, visible to the tensor copy engine
          kiln_bar_sync(1 + half, 128);
          if (t == 0) {
            const int c0 = (int)(n0 + ch * CW), c1 = (int)(m0 + half * 64);
            ${store_chunk}
            kiln_bulk_commit();
          }
          ebuf ^= 1u;
        }
      }
    }
    if (EPI && !EWG && t == 0) kiln_bulk_wait<0>();  // the staged stores are done before the CTA leaves
${amax_publish}
  }
  // no CTA leaves while its peers may still arrive on its barriers or copy into it
  if (CM > 1) kiln_cluster_sync();
}
