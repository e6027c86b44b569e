/* kiln pack format, version 5 — private; shared by the runtime reader (pack_read.c) and
 * the compiler's writer (compiler/pack_write.c). Change both together and bump
 * KILN_PACK_VERSION when the bytes change.
 *
 * All integers are little-endian; "str" is a u32 byte offset into the string table (whose
 * strings are NUL-terminated; KILN_PACK_NOSTR = none); "i64 ref" is >= 0 for a literal
 * value and -(d+1) for the plan's d-th dynamic dim.
 *
 * header (KILN_PACK_HEADER_SIZE bytes):
 *    0 u8[8] magic "KILNPACK"        8 u32 format version     12 u32 header size
 *   16 u64 file size                24 u32 checksum          28 u32 zero
 *   32 u32 plan count               36 u32 image count (distinct blobs)
 *   40 u64 metadata offset          48 u64 metadata size
 *   56 u64 string table offset      64 u64 string table size
 *   72 u64 image data offset        80 u64 image data size   88 u64 zero
 * checksum: CRC-32C (Castagnoli) of bytes [32, file size), i.e. everything but the magic,
 * version, sizes and the checksum itself, which are checked on their own. CRC-32C rather
 * than FNV-1a: the runtime depends on libc only, and CRC-32C is a standard with a fast
 * hardware instruction (SSE4.2) and good burst-error detection.
 *
 * metadata: plan count records, one after the other:
 *   plan:   str graph, str instance, str graph_json,
 *           u32 nspec, nspec x (str name, i64 value)            specialized dims
 *           u32 ndyn, ndyn x str name                           dynamic dims
 *           workspace: (str text or NOSTR when the plan needs none, i64 div, i64 max, i64 add,
 *                       i64 sm_mul, i64 sm_div, u8 nfactor, nfactor x i64 ref)  same rule
 *                       as a grid axis, in bytes, rounded up to KILN_PACK_WORKSPACE_ALIGN;
 *                       NOSTR: div 1, max 0, add 0, sm_mul 0, sm_div 1, none. The
 *                       workspace holds the rule's bytes, then the scratch tensors (role
 *                       scratch, sized by their dims and strides) at multiples of the
 *                       alignment, first fit in plan order; two share bytes only when no
 *                       kernel takes both and the later one's first kernel is not flagged
 *                       PDL right after the earlier one's last; a plan with scratch tensors
 *                       has a rule
 *           u32 ntensor, ntensor x tensor, u32 nkernel, nkernel x kernel
 *   tensor: i64 uid, str name, u8 dtype (enum kiln_dtype), u8 role (enum kiln_role),
 *           u8 ndim, u8 zero, u32 align, f64 value,
 *           ndim x i64 ref dim,
 *           ndim x stride: (str text or NOSTR when fixed, u8 nfactor, nfactor x i64 ref)
 *                          the stride (elements) is the product of the factors
 *   kernel: str symbol, str engine, str plan_id, u32 block[3], u32 smem, u32 cluster[3],
 *           u32 flags (KILN_PACK_KERNEL_PDL: the kernel may start while the plan's previous
 *           kernel still runs, on SM 9.0+ images; it waits with griddepcontrol.wait before it
 *           reads what that kernel writes. KILN_PACK_KERNEL_PDL_ENTRY: it waits before it
 *           touches memory at all, so it may start while whatever precedes it on the stream
 *           runs, also as the plan's first kernel; other bits zero),
 *           3 x grid: (str text, i64 div, i64 max, i64 add, i64 sm_mul, i64 sm_div, u8 nfactor,
 *                     nfactor x i64 ref)
 *                     axis size = ceil(product of factors / div), clamped to max if > 0 and,
 *                     if sm_mul > 0, to max(1, floor(SMS * sm_mul / sm_div)), plus add; SMS
 *                     is the SM count of the launching context's device (at most
 *                     KILN_PACK_MAX_SMS; KILN_SM_COUNT overrides it): persistent grids and
 *                     their workspaces follow the device the pack runs on
 *           u32 nparam, nparam x (u8 kind, i64 arg [, tensor map])  enum kiln__param_kind
 *           u32 nimage, nimage x (str arch, u64 offset in image data, u64 size, u32 smem,
 *                                 u32 cluster[3])
 *           a launch uses its image's smem and cluster (an SM with more shared memory runs a
 *           deeper pipeline, one with clusters shares tiles); the kernel's "smem" is the
 *           largest of its images', its cluster per axis too (every image's divides it)
 *   tensor map (after a KILN__PARAM_TMAP param, whose arg is the tensor index):
 *           u8 rank (1..5), rank x (u8 tensor axis, u32 box), u8 swizzle
 *           (CUtensorMapSwizzle: 0 none, 1 32B, 2 64B, 3 128B); map dim 0 is the innermost
 *           and must be the tensor's contiguous axis; the runtime encodes the map per launch
 *           from the bound pointer and the plan's dims and strides
 * string table: NUL-terminated strings; its last byte is NUL.
 * image data: cubins ("sm_90a") and NUL-terminated PTX ("compute_90"), each starting at a
 * multiple of KILN_PACK_IMAGE_ALIGN from the data start (which is itself aligned).
 */
#ifndef KILN_PACK_H
#define KILN_PACK_H

#include <stddef.h>
#include <stdint.h>

#define KILN_PACK_MAGIC "KILNPACK"
#define KILN_PACK_VERSION 5u
/* Kernel flags. */
#define KILN_PACK_KERNEL_PDL 1u
#define KILN_PACK_KERNEL_PDL_ENTRY 2u
#define KILN_PACK_KERNEL_FLAGS (KILN_PACK_KERNEL_PDL | KILN_PACK_KERNEL_PDL_ENTRY)
#define KILN_PACK_HEADER_SIZE 96u
#define KILN_PACK_CHECKSUM_FROM 32u
#define KILN_PACK_IMAGE_ALIGN 64u
#define KILN_PACK_NOSTR 0xFFFFFFFFu
/* Workspace sizes are rounded up to, and workspace pointers aligned to, this many bytes. */
#define KILN_PACK_WORKSPACE_ALIGN 256u

/* Limits both sides enforce (they bound the runtime's stack use on the launch path). */
#define KILN_PACK_MAX_FACTORS 8
#define KILN_PACK_MAX_DYN 64
#define KILN_PACK_MAX_TENSORS 4096
#define KILN_PACK_MAX_KERNELS 256
#define KILN_PACK_MAX_PARAMS 256
#define KILN_PACK_MAX_IMAGES 64 /* per kernel */
#define KILN_PACK_MAX_TMAPS 8   /* tensor-map params per kernel */
#define KILN_PACK_MAX_TMAP_RANK 5
#define KILN_PACK_MAX_SCRATCH 64 /* scratch tensors per plan */
/* SM counts the rules see are clamped to this: code sized by it holds on any device. */
#define KILN_PACK_MAX_SMS 256

/* Header field offsets. */
enum {
  KILN_PACK_OFF_VERSION = 8,
  KILN_PACK_OFF_HEADER_SIZE = 12,
  KILN_PACK_OFF_FILE_SIZE = 16,
  KILN_PACK_OFF_CHECKSUM = 24,
  KILN_PACK_OFF_ZERO = 28,
  KILN_PACK_OFF_NPLANS = 32,
  KILN_PACK_OFF_NIMAGES = 36,
  KILN_PACK_OFF_META = 40,
  KILN_PACK_OFF_STRTAB = 56,
  KILN_PACK_OFF_DATA = 72,
  KILN_PACK_OFF_RESERVED = 88
};

/* Kernel parameter kinds; arg is a tensor index, a dynamic dim index, a literal or a
 * byte offset. */
enum kiln__param_kind {
  KILN__PARAM_TENSOR = 0,   /* device pointer of tensor #arg (8 bytes) */
  KILN__PARAM_DIM = 1,      /* int64 value of dynamic dim #arg */
  KILN__PARAM_SCALAR = 2,   /* fp32 value of scalar tensor #arg */
  KILN__PARAM_I64 = 3,      /* int64 literal arg (a specialized dim) */
  KILN__PARAM_F32 = 4,      /* fp32 literal: arg holds the bits of a double (a constant) */
  KILN__PARAM_WORKSPACE = 5, /* workspace base pointer + arg bytes (8 bytes); arg >= 0 */
  KILN__PARAM_TMAP = 6,      /* CUtensorMap (128 bytes, by value) of tensor #arg */
  KILN__PARAM_SMS = 7        /* int64 SMS the launch's rules used (arg 0; see grid) */
};

/* Private symbols of libkilnrt stay out of the shared library's dynamic symbol table. */
#if defined(__GNUC__)
#define KILN__INTERNAL __attribute__((visibility("hidden")))
#else
#define KILN__INTERNAL
#endif

/* CRC-32C of pack[KILN_PACK_CHECKSUM_FROM .. size); size >= KILN_PACK_HEADER_SIZE. */
KILN__INTERNAL uint32_t kiln__pack_checksum(const void *pack, size_t size);

/* Parses an arch string: "sm_90a" -> major 9, minor 0, suffix 'a', ptx 0; "compute_80" ->
 * ptx 1. suffix is 0, 'a' or 'f'. Returns 0 on success, -1 when malformed. */
KILN__INTERNAL int kiln__parse_arch(const char *arch, int *major, int *minor, char *suffix,
                                    int *ptx);

#endif
