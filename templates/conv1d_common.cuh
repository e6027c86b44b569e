// kiln conv1d engine: what its kernels share. Element types as fp32 one at a time and 16 bytes
// at a time (V elements), and the moves of a tile of TC channels x ROWS steps between a [B, D, L]
// tensor (either axis contiguous) and shared memory, fp32 rows of PC = TC + 1 floats (row r is
// step t_first + r): vectors along the tensor's contiguous axis, the threads of a warp over
// channels where time is contiguous (4 vectors a channel), so the shared rows see no conflicts.
// CTAs an SM a tile kernel is built for (__launch_bounds__): the plan's n on sm_90 and later;
// sm_80's code takes more registers for the same loads in flight (2 there, no spills).
#if __CUDA_ARCH__ >= 900
#define KILN_CV_MINB(n) (n)
#else
#define KILN_CV_MINB(n) ((n) < 2 ? (n) : 2)
#endif
// 16 bytes to global memory in one instruction (a uint4 assigned through a pointer is split
// into four 4-byte stores by the compiler).
__device__ __forceinline__ void kiln_cv_st16(void *p, kiln_u32 a, kiln_u32 b, kiln_u32 c, kiln_u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" : : "l"(p), "r"(a), "r"(b), "r"(c), "r"(d));
}
struct kiln_cv_bf16 {
  typedef kiln_u16 T;
  typedef uint4 R;
  static constexpr int V = 8;
  static __device__ __forceinline__ R ldr(const T *p) { return *reinterpret_cast<const uint4 *>(p); }
  static __device__ __forceinline__ void cvt(const R &q, float *v) {
    const kiln_u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) { v[2 * i] = kiln_bf16lo_to_f32(w[i]); v[2 * i + 1] = kiln_bf16hi_to_f32(w[i]); }
  }
  static __device__ __forceinline__ float ld(T h) { return kiln_bf16_to_f32(h); }
  static __device__ __forceinline__ T st(float f) { return kiln_f32_to_bf16(f); }
  static __device__ __forceinline__ void stv(T *p, const float *v) {
    kiln_cv_st16(p, kiln_f32x2_to_bf16x2(v[0], v[1]), kiln_f32x2_to_bf16x2(v[2], v[3]), kiln_f32x2_to_bf16x2(v[4], v[5]),
                 kiln_f32x2_to_bf16x2(v[6], v[7]));
  }
};
struct kiln_cv_fp16 {
  typedef kiln_u16 T;
  typedef uint4 R;
  static constexpr int V = 8;
  static __device__ __forceinline__ R ldr(const T *p) { return *reinterpret_cast<const uint4 *>(p); }
  static __device__ __forceinline__ void cvt(const R &q, float *v) {
    const kiln_u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      v[2 * i] = kiln_fp16_to_f32((kiln_u16)(w[i] & 0xffffu));
      v[2 * i + 1] = kiln_fp16_to_f32((kiln_u16)(w[i] >> 16));
    }
  }
  static __device__ __forceinline__ float ld(T h) { return kiln_fp16_to_f32(h); }
  static __device__ __forceinline__ T st(float f) { return kiln_f32_to_fp16(f); }
  static __device__ __forceinline__ void stv(T *p, const float *v) {
    kiln_cv_st16(p, kiln_f32x2_to_fp16x2(v[0], v[1]), kiln_f32x2_to_fp16x2(v[2], v[3]), kiln_f32x2_to_fp16x2(v[4], v[5]),
                 kiln_f32x2_to_fp16x2(v[6], v[7]));
  }
};
struct kiln_cv_fp32 {
  typedef float T;
  typedef float4 R;
  static constexpr int V = 4;
  static __device__ __forceinline__ R ldr(const T *p) { return *reinterpret_cast<const float4 *>(p); }
  static __device__ __forceinline__ void cvt(const R &q, float *v) { v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w; }
  static __device__ __forceinline__ float ld(T h) { return h; }
  static __device__ __forceinline__ T st(float f) { return f; }
  static __device__ __forceinline__ void stv(T *p, const float *v) {
    kiln_cv_st16(p, __float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  }
};

// Unit u of a tile of ROWS x TC in vectors of V along the contiguous axis: its first row and
// channel, or false past the tile. CL: channels contiguous (TC / V units a row); else time
// contiguous (ceil(ROWS / V) vectors a channel, lanes 4 to a channel).
template <int ROWS, int TC, int V, bool CL>
__device__ __forceinline__ bool kiln_cv_unit(int u, int &r, int &cc) {
  if (CL) {
    r = u / (TC / V);
    cc = u % (TC / V) * V;
    return r < ROWS;
  }
  const int k = u / (4 * TC) * 4 + (u & 3);
  cc = u / 4 % TC;
  r = k * V;
  return r < ROWS;
}
template <int ROWS, int TC, int V, bool CL>
struct kiln_cv_units {
  static constexpr int N = CL ? ROWS * (TC / V) : (ROWS / V + 3) / 4 * 4 * TC;
};

// The tile's rows [0, ROWS) (step t_first + r, channel c0 + cc) into buf, in two halves so that
// several tiles' loads are in flight at once: issue() loads the vectors within [0, D) x [0, L)
// where `vec` (aligned) raw (getr(c, t): the 16 bytes from (c, t) along the contiguous axis);
// commit() stores them as fp32 and fills the others (edges, the history, unaligned tensors)
// element by element, get(c, t): 0 (or the history) out of range.
template <int NT, int ROWS, int TC, bool CL, class VT>
struct kiln_cv_loader {
  static constexpr int V = VT::V, PC = TC + 1, N = kiln_cv_units<ROWS, TC, V, CL>::N, PER = (N + NT - 1) / NT;
  typename VT::R raw[PER];
  bool fast[PER];
  template <class GetR>
  __device__ __forceinline__ void issue(kiln_i64 t_first, kiln_i64 c0, kiln_i64 L, kiln_i64 D, bool vec, GetR getr) {
#pragma unroll
    for (int k = 0; k < PER; k++) {
      int r, cc;
      const int u = (int)threadIdx.x + k * NT;
      fast[k] = false;
      if (u >= N || !kiln_cv_unit<ROWS, TC, V, CL>(u, r, cc)) continue;
      const kiln_i64 t = t_first + r, c = c0 + cc;
      fast[k] = vec && (CL ? (t >= 0 && t < L && c + V <= D) : (c < D && t >= 0 && t + V <= L));
      if (fast[k]) raw[k] = getr(c, t);
    }
  }
  template <class Get>
  __device__ __forceinline__ void commit(float *buf, kiln_i64 t_first, kiln_i64 c0, Get get) {
#pragma unroll
    for (int k = 0; k < PER; k++) {
      int r, cc;
      const int u = (int)threadIdx.x + k * NT;
      if (u >= N || !kiln_cv_unit<ROWS, TC, V, CL>(u, r, cc)) continue;
      float v[V];
      if (fast[k]) {
        VT::cvt(raw[k], v);
      } else {
        const kiln_i64 t = t_first + r, c = c0 + cc;
#pragma unroll
        for (int i = 0; i < V; i++) v[i] = CL ? get(c + i, t) : get(c, t + i);
      }
#pragma unroll
      for (int i = 0; i < V; i++) buf[CL ? r * PC + cc + i : (r + i) * PC + cc] = v[i];
    }
  }
};

// The tile's outputs, rows [0, ROWS) (step t_first + r): val(r, cc) for each element in range,
// stored by put(c, t, x) or, where `vec` and the vector lies within range, putv(c, t, v).
template <int NT, int ROWS, int TC, int V, bool CL, class Val, class Put, class PutV>
__device__ __forceinline__ void kiln_cv_store(kiln_i64 t_first, kiln_i64 c0, kiln_i64 L, kiln_i64 D, bool vec,
                                              Val val, Put put, PutV putv) {
  constexpr int N = kiln_cv_units<ROWS, TC, V, CL>::N, PER = (N + NT - 1) / NT;
#pragma unroll 1  // stores need no loads in flight: one unit's registers at a time
  for (int k = 0; k < PER; k++) {
    int r, cc;
    const int u = (int)threadIdx.x + k * NT;
    if (u >= N || !kiln_cv_unit<ROWS, TC, V, CL>(u, r, cc)) continue;
    const kiln_i64 t = t_first + r, c = c0 + cc;
    const bool whole = CL ? (t < L && c + V <= D) : (c < D && t + V <= L);
    float v[V];
#pragma unroll
    for (int i = 0; i < V; i++) v[i] = CL ? val(r, cc + i) : val(r + i, cc);
    if (vec && whole) {
      putv(c, t, v);
    } else {
#pragma unroll
      for (int i = 0; i < V; i++) {
        const kiln_i64 ci = CL ? c + i : c, ti = CL ? t : t + i;
        if (ci < D && ti < L) put(ci, ti, v[i]);
      }
    }
  }
}

// x, opaque to the compiler: a loop's per-iteration addresses derived from it stay in the loop
// (hoisted, they hold registers across iterations and spill).
__device__ __forceinline__ kiln_i64 kiln_cv_opaque(kiln_i64 x) {
  kiln_i64 r;
  asm volatile("mov.b64 %0, %1;" : "=l"(r) : "l"(x));
  return r;
}

// silu and its derivative: z sigma(z), sigma(z) (1 + z (1 - sigma(z))).
__device__ __forceinline__ float kiln_cv_sigmoid(float z) { return 1.0f / (1.0f + __expf(-z)); }

// Step t of a decode update: bias + the taps w[j] h(t + j) whose step t + j - H lies in step t's
// sequence (sq: the new steps' sequence ids, with SEQ; a tap before step 0 reads the history,
// which then belongs to no new step's sequence)
template <int W, int H, bool SEQ, class F>
__device__ __forceinline__ float kiln_cv_dec_step(float bias, const float (&w)[W], const int *sq, int t, F h) {
  float z = bias;
#pragma unroll
  for (int j = 0; j < W; j++) {
    const int tau = t + j - H;  // the tap's step; before step 0 it reads the history
    if (SEQ && (tau < 0 || sq[tau < 0 ? 0 : tau] != sq[t])) continue;
    z += w[j] * h(t + j);
  }
  return z;
}
