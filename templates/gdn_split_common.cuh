// kiln GDN engine, split chunked forward: the workspace and the slot map its three kernels share
// (docs/GDN.md "Split chunked forward"). Chunk ch of sequence s has slot floor(bos_s / C) + s + ch;
// a sequence's slots lie below the next one's, and all below T / C + (cu_seqlens entries).

// Per slot and state head: the chunk's starting state [VD][KD] and W [C][KD] (io dtype), U and
// then V_new [C][VD] (io dtype), the in-chunk gate prefix G [C] and rk [C] (fp32).
template <int C, int HO, int KD, int VD>
struct kiln_gdn_split_ws {
  kiln_u16 *state, *w, *u;
  float *gr;
  __device__ __forceinline__ kiln_gdn_split_ws(float *ws, kiln_i64 slots) {
    kiln_u8 *p = reinterpret_cast<kiln_u8 *>(ws);
    state = reinterpret_cast<kiln_u16 *>(p);
    p += slots * HO * VD * KD * 2;
    w = reinterpret_cast<kiln_u16 *>(p);
    p += slots * HO * C * KD * 2;
    u = reinterpret_cast<kiln_u16 *>(p);
    p += slots * HO * C * VD * 2;
    gr = reinterpret_cast<float *>(p);
  }
  __device__ __forceinline__ kiln_i64 at(kiln_i64 slot, int h) const { return slot * HO + h; }
};

// The first slot of sequence s (bounds outside [0, T] read as an empty sequence at 0).
template <int C, class I>
__device__ __forceinline__ kiln_i64 kiln_gdn_slot0(const I *cu, kiln_i64 s, kiln_i64 T) {
  kiln_i64 bos, eos;
  kiln_gdn_bounds(cu, s, T, bos, eos);
  return bos / C + s;
}

// The sequence whose chunks hold `slot`: the last s < nseq with slot0(s) <= slot (-1: none).
template <int C, class I>
__device__ __forceinline__ kiln_i64 kiln_gdn_slot_seq(const I *cu, kiln_i64 nseq, kiln_i64 T, kiln_i64 slot) {
  kiln_i64 lo = 0, hi = nseq;
  while (lo < hi) {
    const kiln_i64 mid = lo + (hi - lo) / 2;
    if (kiln_gdn_slot0<C>(cu, mid, T) <= slot) lo = mid + 1; else hi = mid;
  }
  return lo - 1;
}

