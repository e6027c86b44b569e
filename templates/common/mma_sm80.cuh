// kiln: warp-level tensor-core helpers (sm_80+): ldmatrix of four 8x8 tiles of 16-bit values
// (transposed or not) and mma.sync m16n8k16 with fp32 accumulation.
__device__ __forceinline__ void kiln_ldmatrix_x4(kiln_u32 (&r)[4], kiln_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void kiln_ldmatrix_x4_trans(kiln_u32 (&r)[4], kiln_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
// d += a * b for one m16n8k16 tile; T is bf16 or f16 (the PTX type name).
#define KILN_MMA_M16N8K16(T)                                                                         \
  __device__ __forceinline__ void kiln_mma_##T(float (&d)[4], const kiln_u32 (&a)[4], kiln_u32 b0, kiln_u32 b1) { \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." #T "." #T ".f32 "                         \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                  \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                  \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                  \
  }
KILN_MMA_M16N8K16(bf16)
KILN_MMA_M16N8K16(f16)
