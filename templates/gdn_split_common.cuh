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

// T = (I + A)^-1 in place (A strict lower, C x C fp32, row pitch AP; sX 16 x XP scratch): the
// 16 x 16 diagonal blocks by forward substitution (a thread a column), then block rows 1..C/16-1,
// X = A[bi, <bi] T[<bi, <bi] and T[bi, <bi] = -T[bi, bi] X. Every thread of the CTA calls it.
template <int C, int AP, int XP, int THREADS>
__device__ __forceinline__ void kiln_gdn_inverse(float *sA, float *sX, int tid) {
  static_assert(THREADS >= C && C % 16 == 0 && XP >= C - 16, "kiln_gdn_inverse: shape");
  {
    float x[16];
    const int bi = tid >> 4, cc = tid & 15;
    const float *ab = sA + 16 * bi * AP + 16 * bi;
    if (tid < C) {
#pragma unroll
      for (int m = 0; m < 16; m++) {
        float acc = m == cc ? 1.0f : 0.0f;
#pragma unroll
        for (int l = 0; l < m; l++) acc = fmaf(-ab[m * AP + l], x[l], acc);
        x[m] = acc;
      }
    }
    __syncthreads();
    if (tid < C) {
#pragma unroll
      for (int m = 0; m < 16; m++) sA[(16 * bi + m) * AP + 16 * bi + cc] = x[m];
    }
    __syncthreads();
  }
#pragma unroll 1
  for (int bi = 1; bi < C / 16; bi++) {
    const int w = 16 * bi;
    for (int e = tid; e < 16 * w; e += THREADS) {
      const int r = e / w, cc = e % w;
      const float *ar = sA + (w + r) * AP;
      float acc = 0.0f;
      for (int l = cc & ~15; l < w; l++) acc = fmaf(ar[l], sA[l * AP + cc], acc);
      sX[r * XP + cc] = acc;
    }
    __syncthreads();
    for (int e = tid; e < 16 * w; e += THREADS) {
      const int r = e / w, cc = e % w;
      const float *tr = sA + (w + r) * AP + w;
      float acc = 0.0f;
      for (int m = 0; m <= r; m++) acc = fmaf(tr[m], sX[m * XP + cc], acc);
      sA[(w + r) * AP + cc] = -acc;
    }
    __syncthreads();
  }
}
