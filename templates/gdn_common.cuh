// kiln GDN engine: device helpers the GDN kernels share (docs/OPS.md §8, docs/GDN.md): the
// effective gate and write strength, the head map, sequence bounds and pool rows read so that
// bad values skip work instead of faulting. Needs common/exp2.cuh.

// How g holds the decay: log-space (alpha = e^g), linear (alpha = g, floored at 1e-10), or the
// safe gate g_eff = -e^(a_log) softplus(g + dt_bias), alpha = e^(g_eff).
enum { KILN_GDN_GATE_LOG = 0, KILN_GDN_GATE_LINEAR = 1, KILN_GDN_GATE_SAFE = 2 };
// How beta is taken: as given, sigmoid(beta), or 2 sigmoid(beta) (negative eigenvalues allowed).
enum { KILN_GDN_BETA_RAW = 0, KILN_GDN_BETA_SIGMOID = 1, KILN_GDN_BETA_2SIGMOID = 2 };

// softplus(z) = log(1 + e^z), without overflow for large z (FLA's threshold of 20).
__device__ __forceinline__ float kiln_gdn_softplus(float z) {
  return z > 20.0f ? z : log1pf(__expf(z));
}

// The log-space gate g_eff of a raw g (LOG and SAFE); amp = e^(a_log) (1 without a_log), bias =
// dt_bias (0 without it).
template <int MODE>
__device__ __forceinline__ float kiln_gdn_log_gate(float g, float amp, float bias) {
  if (MODE == KILN_GDN_GATE_SAFE) return -amp * kiln_gdn_softplus(g + bias);
  return g;
}

// The decay alpha of a raw g.
template <int MODE>
__device__ __forceinline__ float kiln_gdn_alpha(float g, float amp, float bias) {
  if (MODE == KILN_GDN_GATE_LINEAR) return g > 1e-10f ? g : 1e-10f;
  return kiln_exp2(kiln_gdn_log_gate<MODE>(g, amp, bias) * 1.4426950408889634f);
}

// The write strength of a raw beta.
template <int MODE>
__device__ __forceinline__ float kiln_gdn_beta(float b) {
  if (MODE == KILN_GDN_BETA_RAW) return b;
  const float s = 1.0f / (1.0f + __expf(-b));
  return MODE == KILN_GDN_BETA_2SIGMOID ? 2.0f * s : s;
}

// The q, k and v heads state head ho reads (OPS.md §8.3): groups of consecutive heads.
template <int H, int HK, int HV, int HO>
__device__ __forceinline__ void kiln_gdn_heads(int ho, int &qh, int &kh, int &vh) {
  static_assert(HO % H == 0 && HO % HV == 0 && (HK == H || HK == HV), "gdn: head counts do not group");
  qh = ho / (HO / H);
  vh = ho / (HO / HV);
  kh = HK == H ? qh : vh;
}

// Sequence n's tokens [bos, eos) from cu_seqlens (int or kiln_i64); bounds outside
// 0 <= bos <= eos <= T make the sequence empty.
template <class I>
__device__ __forceinline__ void kiln_gdn_bounds(const I *cu, kiln_i64 n, kiln_i64 T, kiln_i64 &bos, kiln_i64 &eos) {
  bos = (kiln_i64)cu[n];
  eos = (kiln_i64)cu[n + 1];
  if (!(0 <= bos && bos <= eos && eos <= T)) bos = eos = 0;
}

// The pool row of sequence n (state_indices[n]), or -1 (the sequence is skipped) where it is
// not a row of the pool.
__device__ __forceinline__ kiln_i64 kiln_gdn_pool_row(const int *idx, kiln_i64 n, kiln_i64 rows) {
  const kiln_i64 r = (kiln_i64)idx[n];
  return r >= 0 && r < rows ? r : -1;
}

// Four consecutive state values (one 16-byte load of fp32, 8 bytes of bf16) as fp32.
__device__ __forceinline__ void kiln_gdn_ld4(const float *p, float (&d)[4]) {
  const float4 x = *reinterpret_cast<const float4 *>(p);
  d[0] = x.x, d[1] = x.y, d[2] = x.z, d[3] = x.w;
}
__device__ __forceinline__ void kiln_gdn_ld4(const kiln_u16 *p, float (&d)[4]) {
  const uint2 w = *reinterpret_cast<const uint2 *>(p);
  d[0] = __uint_as_float(w.x << 16), d[1] = __uint_as_float(w.x & 0xffff0000u);
  d[2] = __uint_as_float(w.y << 16), d[3] = __uint_as_float(w.y & 0xffff0000u);
}
__device__ __forceinline__ void kiln_gdn_st4(float *p, const float (&s)[4]) {
  *reinterpret_cast<float4 *>(p) = make_float4(s[0], s[1], s[2], s[3]);
}
__device__ __forceinline__ void kiln_gdn_st4(kiln_u16 *p, const float (&s)[4]) {
  kiln_u32 a, b;  // round to nearest even, the lower-indexed value in the low half
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(a) : "f"(s[1]), "f"(s[0]));
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(b) : "f"(s[3]), "f"(s[2]));
  *reinterpret_cast<uint2 *>(p) = make_uint2(a, b);
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

// d0, d1 += a times the two n8 blocks of an ldmatrix_x4 B fragment b (bf16 or fp16 operands)
template <bool BF16>
__device__ __forceinline__ void kiln_gdn_mma_x2(float (&d0)[4], float (&d1)[4], const kiln_u32 (&a)[4], const kiln_u32 (&b)[4]) {
  if (BF16) {
    kiln_mma_bf16(d0, a, b[0], b[1]);
    kiln_mma_bf16(d1, a, b[2], b[3]);
  } else {
    kiln_mma_f16(d0, a, b[0], b[1]);
    kiln_mma_f16(d1, a, b[2], b[3]);
  }
}

// The chunked kernels' state update of a warp's rows over one chunk: S <- 2^gc S + Wᵀ K, the
// A operands (.trans) from W at wb (rows VP bytes apart), the B operands (.trans) from K at kk
// (rows QP bytes apart); s holds KD / 8 n8 blocks of fp32 state.
template <int KD, int VP, int QP, bool BF16>
__device__ __forceinline__ void kiln_gdn_state_update(float (&s)[KD / 8][4], float gc, kiln_u32 wb, kiln_u32 kk) {
  const float dc = kiln_exp2(gc);
#pragma unroll
  for (int nb = 0; nb < KD / 8; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[nb][e] *= dc;
#pragma unroll
  for (int ks = 0; ks < 4; ks++) {
    kiln_u32 a[4];
    kiln_ldmatrix_x4_trans(a, wb + ks * 16 * VP);
#pragma unroll
    for (int pp = 0; pp < KD / 16; pp++) {
      kiln_u32 b[4];
      kiln_ldmatrix_x4_trans(b, kk + ks * 16 * QP + pp * 32);
      kiln_gdn_mma_x2<BF16>(s[2 * pp], s[2 * pp + 1], a, b);
    }
  }
}

// Σ x² of a row of KD 16-bit values at p (to_f32 converts one), read as pairs starting at pair
// `rot` (rotated by row: the threads of a warp read distinct banks)
template <int KD, class F>
__device__ __forceinline__ float kiln_gdn_sumsq(const kiln_u8 *p, int rot, F to_f32) {
  float ss = 0.0f;
  for (int j = 0; j < KD / 2; j++) {
    const kiln_u32 w = *reinterpret_cast<const kiln_u32 *>(p + 4 * ((j + rot) % (KD / 2)));
    const float a = to_f32((kiln_u16)(w & 0xffffu)), b = to_f32((kiln_u16)(w >> 16));
    ss = fmaf(a, a, fmaf(b, b, ss));
  }
  return ss;
}

// acc = the 16 rows at a (rows QP bytes apart) times the first 16 (mi + 1) rows at b, transposed,
// KD deep: the 16 x 16 blocks on and left of the diagonal of m tile mi (a chunk's KKᵀ, QKᵀ)
template <int KD, int QP, bool BF16>
__device__ __forceinline__ void kiln_gdn_causal_mma(float (&acc)[8][4], int mi, kiln_u32 a, kiln_u32 b) {
#pragma unroll
  for (int nb = 0; nb < 8; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[nb][e] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < KD / 16; ks++) {
    kiln_u32 fa[4];
    kiln_ldmatrix_x4(fa, a + ks * 32);
#pragma unroll
    for (int pp = 0; pp < 4; pp++)
      if (pp <= mi) {
        kiln_u32 fb[4];
        kiln_ldmatrix_x4(fb, b + pp * 16 * QP + ks * 32);
        kiln_gdn_mma_x2<BF16>(acc[2 * pp], acc[2 * pp + 1], fa, fb);
      }
  }
}
