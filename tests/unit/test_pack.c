/* Unit test: pack writer (compiler/pack_write.c) -> runtime reader (libkilnrt), binding
 * checks that need no GPU, pack inspect/verify, and --emit-c output that compiles.
 * Build: gcc -std=c11 -D_GNU_SOURCE -Iruntime -Icompiler -I/usr/local/cuda/include
 *        tests/unit/test_pack.c runtime/\*.c compiler/pack_write.c compiler/pack_inspect.c
 *        compiler/emit_c.c compiler/err.c -Wl,-Bstatic -ljansson -Wl,-Bdynamic -ldl -lpthread
 * Run from the repository root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emit_c.h"
#include "internal.h"
#include "kiln.h"
#include "pack_inspect.h"
#include "pack_write.h"
#include "tap.h"

#ifndef KILN_SAN_FLAGS
#define KILN_SAN_FLAGS "" /* build.ninja passes config.ninja's sanitizer flags (none unless configured) */
#endif

/* bias_gelu with two specialized dims, a virtual, a constant and a runtime scalar. */
static const char *manifest_bias_gelu =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"bias_gelu\","
    " \"instance\": \"H=4096,W=8\", \"dynamic\": [\"T\"],"
    " \"tensors\": ["
    "  {\"uid\": 1, \"name\": \"x\", \"dtype\": \"bf16\", \"dims\": [\"T\", 4096],"
    "   \"strides\": [4096, 1], \"role\": \"input\", \"align\": 16},"
    "  {\"uid\": 2, \"name\": \"b\", \"dtype\": \"bf16\", \"dims\": [\"W\", 512],"
    "   \"strides\": [512, 1], \"role\": \"input\", \"align\": 16},"
    "  {\"uid\": 3, \"name\": \"add_1.OUT_0\", \"dtype\": \"fp32\", \"dims\": [\"T\", 4096],"
    "   \"strides\": [\"H\", 1], \"role\": \"virtual\"},"
    "  {\"uid\": 4, \"name\": \"c\", \"dtype\": \"fp32\", \"dims\": [1], \"strides\": [1],"
    "   \"role\": \"constant\", \"value\": 0.5},"
    "  {\"uid\": 5, \"name\": \"alpha\", \"dtype\": \"fp32\", \"dims\": [1], \"strides\": [1],"
    "   \"role\": \"scalar\"},"
    "  {\"uid\": 6, \"name\": \"y\", \"dtype\": \"bf16\", \"dims\": [\"T\", 4096],"
    "   \"strides\": [4096, 1], \"role\": \"output\", \"align\": 16}],"
    " \"kernels\": ["
    "  {\"symbol\": \"kiln_bias_gelu_0\", \"engine\": \"pointwise\","
    "   \"plan_id\": \"pointwise:v1:vec8\", \"options\": [\"--std=c++17\"],"
    "   \"block\": [256, 1, 1], \"grid\": [{\"mul\": [\"T\", 4096], \"div\": 2048, \"max\": 0}, 1, "
    "1],"
    "   \"smem\": 0, \"cluster\": [1, 1, 1], \"pdl_entry\": true,"
    "   \"params\": [{\"kind\": \"tensor\", \"uid\": 1}, {\"kind\": \"tensor\", \"uid\": 2},"
    "    {\"kind\": \"tensor\", \"uid\": 6}, {\"kind\": \"dim\", \"name\": \"T\"},"
    "    {\"kind\": \"scalar\", \"uid\": 5}, {\"kind\": \"scalar\", \"uid\": 4},"
    "    {\"kind\": \"dim\", \"name\": \"H\"}]},"
    "  {\"symbol\": \"kiln_bias_gelu_1\", \"engine\": \"pointwise\", \"plan_id\": \"p:v1\","
    "   \"block\": [128], \"grid\": [{\"mul\": [\"T\"], \"div\": 1, \"max\": 1024}],"
    "   \"smem\": 65536, \"pdl\": true, \"params\": [{\"kind\": \"tensor\", \"uid\": 6}]}],"
    " \"graph_json\": \"{\\\"schema\\\": \\\"kiln.graph\\\", \\\"version\\\": 1}\"}";

/* add2d: two dynamic dims, a broadcast input, default (row-major) strides, no source. */
static const char *manifest_add2d =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"add2d\", \"instance\": \"\","
    " \"dynamic\": [\"M\", \"N\"],"
    " \"tensors\": ["
    "  {\"uid\": 1, \"name\": \"a\", \"dtype\": \"fp32\", \"dims\": [\"M\", \"N\"],"
    "   \"strides\": [\"N\", 1], \"role\": \"input\", \"align\": 4},"
    "  {\"uid\": 2, \"name\": \"b\", \"dtype\": \"fp32\", \"dims\": [\"N\"], \"role\": \"input\"},"
    "  {\"uid\": 3, \"name\": \"y\", \"dtype\": \"fp32\", \"dims\": [\"M\", \"N\"],"
    "   \"role\": \"output\", \"align\": 16}],"
    " \"kernels\": ["
    "  {\"symbol\": \"kiln_add2d_0\", \"engine\": \"pointwise\", \"plan_id\": \"pointwise:v1\","
    "   \"block\": [256, 1, 1], \"grid\": [{\"mul\": [\"M\", \"N\"], \"div\": 256}, 1, 1],"
    "   \"smem\": 0, \"cluster\": [2, 1, 1],"
    "   \"params\": [{\"kind\": \"tensor\", \"uid\": 1}, {\"kind\": \"tensor\", \"uid\": 2},"
    "    {\"kind\": \"tensor\", \"uid\": 3}, {\"kind\": \"dim\", \"name\": \"M\"},"
    "    {\"kind\": \"dim\", \"name\": \"N\"}]}],"
    " \"graph_json\": \"{}\"}";

/* Workspace plans: ws_plan's size depends on M (ceil(M*100/3) bytes, rounded up to 256);
 * ws_fixed has a literal one (1000 -> 1024 bytes) and a tensor named "workspace"; no_ws
 * has none (and a constant param with a recognizable bit pattern: 1234.5). */
static const char *manifest_ws_plan =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"ws_plan\", \"instance\": \"\","
    " \"dynamic\": [\"M\", \"N\"],"
    " \"workspace\": {\"mul\": [\"M\", 100], \"div\": 3, \"max\": 0},"
    " \"tensors\": ["
    "  {\"uid\": 1, \"name\": \"x\", \"dtype\": \"fp32\", \"dims\": [\"M\", \"N\"],"
    "   \"role\": \"input\", \"align\": 16},"
    "  {\"uid\": 2, \"name\": \"y\", \"dtype\": \"fp32\", \"dims\": [\"M\", \"N\"],"
    "   \"role\": \"output\", \"align\": 16}],"
    " \"kernels\": ["
    "  {\"symbol\": \"kiln_ws_0\", \"block\": [256], \"grid\": [{\"mul\": [\"M\", \"N\"], \"div\": "
    "256}],"
    "   \"params\": [{\"kind\": \"tensor\", \"uid\": 1}, {\"kind\": \"workspace\", \"offset\": 0},"
    "    {\"kind\": \"dim\", \"name\": \"M\"}]},"
    "  {\"symbol\": \"kiln_ws_1\", \"block\": [256], \"grid\": [{\"mul\": [\"M\", \"N\"], \"div\": "
    "256}],"
    "   \"params\": [{\"kind\": \"workspace\", \"offset\": 4096}, {\"kind\": \"tensor\", \"uid\": "
    "2}]}]}";

/* A rule with an added constant (pack format 4): 8 bytes per M and 5000 more; its kernel's
 * grid is M/64 rounded up plus 2. */
static const char *manifest_ws_add =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"ws_add\", \"dynamic\": [\"M\"],"
    " \"workspace\": {\"mul\": [\"M\", 8], \"div\": 1, \"max\": 0, \"add\": 5000},"
    " \"tensors\": [{\"uid\": 1, \"name\": \"x\", \"dtype\": \"fp32\", \"dims\": [\"M\"],"
    "   \"role\": \"input\"}],"
    " \"kernels\": [{\"symbol\": \"kiln_wsa_0\", \"block\": [64],"
    "   \"grid\": [{\"mul\": [\"M\"], \"div\": 64, \"add\": 2}],"
    "   \"params\": [{\"kind\": \"tensor\", \"uid\": 1}, {\"kind\": \"workspace\", \"offset\": "
    "4096}]}]}";

/* A persistent kernel and its workspace, both capped by the device's SM count (pack format
 * 5): at most 2 CTAs per SM, one 1024-byte partial row each; the kernel gets the SM count. */
static const char *manifest_ws_sms =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"ws_sms\", \"dynamic\": [\"M\"],"
    " \"workspace\": {\"mul\": [\"M\", 16], \"div\": 1, \"sm_mul\": 2048},"
    " \"tensors\": [{\"uid\": 1, \"name\": \"x\", \"dtype\": \"fp32\", \"dims\": [\"M\"],"
    "   \"role\": \"input\"}],"
    " \"kernels\": [{\"symbol\": \"kiln_wss_0\", \"block\": [64],"
    "   \"grid\": [{\"mul\": [\"M\"], \"div\": 64, \"sm_mul\": 2}, {\"mul\": [\"M\"], \"div\": 64,"
    "     \"max\": 300, \"sm_mul\": 1, \"sm_div\": 2}],"
    "   \"params\": [{\"kind\": \"tensor\", \"uid\": 1}, {\"kind\": \"workspace\", \"offset\": 0},"
    "    {\"kind\": \"sms\"}]}]}";

static const char *manifest_ws_fixed =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"ws_fixed\", \"workspace\": 1000,"
    " \"tensors\": [{\"uid\": 1, \"name\": \"workspace\", \"dtype\": \"fp32\", \"dims\": [64],"
    "   \"role\": \"input\"}],"
    " \"kernels\": [{\"symbol\": \"kiln_wsf_0\", \"block\": [64], \"grid\": [1],"
    "   \"params\": [{\"kind\": \"tensor\", \"uid\": 1}, {\"kind\": \"workspace\", \"offset\": "
    "768}]}]}";

static const char *manifest_no_ws =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"no_ws\","
    " \"tensors\": [{\"uid\": 1, \"name\": \"a\", \"dtype\": \"fp32\", \"dims\": [64],"
    "   \"role\": \"input\"}, {\"uid\": 2, \"name\": \"c\", \"dtype\": \"fp32\", \"dims\": [1],"
    "   \"role\": \"constant\", \"value\": 1234.5}],"
    " \"kernels\": [{\"symbol\": \"kiln_nows_0\", \"block\": [64], \"grid\": [1],"
    "   \"params\": [{\"kind\": \"tensor\", \"uid\": 1}, {\"kind\": \"scalar\", \"uid\": 2}]}]}";

/* A fake cubin: a 64-bit little-endian ELF header for EM_CUDA, then a tag. */
/* Plan `graph` of pack with its info and first kernel's info (the rules as text). */
static void plan_rules(kiln_pack *pack, const char *graph, kiln_plan **p, kiln_plan_info *info,
                       kiln_kernel_info *kernel) {
  kiln_plan_get(pack, graph, "", p);
  kiln_plan_info_get(*p, info);
  kiln_plan_kernel(*p, 0, kernel);
}

static kiln_blob fake_cubin(unsigned char *buf, size_t size, const char *tag) {
  memset(buf, 0, size);
  memcpy(buf,
         "\x7f"
         "ELF",
         4);
  buf[4] = 2;
  buf[5] = 1;
  buf[18] = 190;
  snprintf((char *)buf + 64, size - 64, "%s", tag);
  return (kiln_blob){buf, size};
}

static unsigned char cubins[6][128];
static const char ptx_text[] = ".version 8.0\n.target sm_80\n.address_size 64\n";

static kiln_pack_writer *make_writer(kiln_err *e) {
  kiln_pack_writer *w = kiln_pack_writer_new();
  const char *archs_a[] = {"sm_80", "sm_90a"};
  kiln_blob images_a[4] = {fake_cubin(cubins[0], 128, "bias_gelu_0 sm_80"),
                           fake_cubin(cubins[1], 128, "bias_gelu_0 sm_90a"),
                           fake_cubin(cubins[2], 128, "bias_gelu_1 sm_80"),
                           fake_cubin(cubins[3], 128, "bias_gelu_1 sm_90a")};
  if (kiln_pack_writer_add_plan(w, manifest_bias_gelu, archs_a, 2, images_a, e) != 0) return NULL;
  const char *archs_b[] = {"sm_80", "sm_90a", "compute_80"};
  /* sm_80 image identical to bias_gelu_0's: stored once */
  kiln_blob images_b[3] = {fake_cubin(cubins[4], 128, "bias_gelu_0 sm_80"),
                           fake_cubin(cubins[5], 128, "add2d sm_90a"),
                           {ptx_text, sizeof ptx_text - 1}};
  if (kiln_pack_writer_add_plan(w, manifest_add2d, archs_b, 3, images_b, e) != 0) return NULL;
  return w;
}

static kiln_status open_bytes(kiln_rt *rt, const void *p, size_t n) {
  kiln_pack *pack;
  kiln_status st = kiln_pack_open_memory(rt, p, n, &pack);
  if (st == KILN_OK) kiln_pack_close(pack);
  return st;
}

static void fix_checksum(unsigned char *p, size_t n) {
  uint32_t c = kiln__pack_checksum(p, n);
  for (int i = 0; i < 4; i++) p[KILN_PACK_OFF_CHECKSUM + i] = (unsigned char)(c >> (8 * i));
}

static void test_corruption(kiln_rt *rt, const unsigned char *good, size_t size) {
  unsigned char *p = malloc(size);
  kiln_status st;
  memcpy(p, good, size);
  OK(open_bytes(rt, p, size) == KILN_OK, "pristine pack opens");
  st = open_bytes(rt, p, size - 1);
  OK(st == KILN_ERR_PACK && strstr(kiln_rt_errmsg(rt), "truncated"),
     "truncated by one byte -> KILN_ERR_PACK (%s)", kiln_rt_errmsg(rt));
  st = open_bytes(rt, p, 40);
  OK(st == KILN_ERR_PACK && strstr(kiln_rt_errmsg(rt), "header"),
     "truncated inside the header -> KILN_ERR_PACK (%s)", kiln_rt_errmsg(rt));
  st = open_bytes(rt, p, 0);
  OK(st == KILN_ERR_PACK, "empty -> KILN_ERR_PACK (%s)", kiln_rt_errmsg(rt));

  p[size / 2] ^= 0x10;
  st = open_bytes(rt, p, size);
  OK(st == KILN_ERR_PACK && strstr(kiln_rt_errmsg(rt), "checksum"),
     "flipped byte -> KILN_ERR_PACK (%s)", kiln_rt_errmsg(rt));
  p[size / 2] ^= 0x10;

  int all = 1;
  for (size_t i = 0; i < size; i++) {
    p[i] ^= 0x01;
    if (open_bytes(rt, p, size) != KILN_ERR_PACK || !kiln_rt_errmsg(rt)[0]) {
      DIAG("flipping byte %zu was not detected", i);
      all = 0;
    }
    p[i] ^= 0x01;
  }
  OK(all, "every single-bit flip at every offset (%zu) -> KILN_ERR_PACK with detail", size);

  p[0] = 'X';
  st = open_bytes(rt, p, size);
  OK(st == KILN_ERR_PACK && strstr(kiln_rt_errmsg(rt), "magic"),
     "wrong magic -> KILN_ERR_PACK (%s)", kiln_rt_errmsg(rt));
  p[0] = 'K';
  p[KILN_PACK_OFF_VERSION] = KILN_PACK_VERSION + 1;
  st = open_bytes(rt, p, size);
  char reads[48];
  snprintf(reads, sizeof reads, "reads version %u", KILN_PACK_VERSION);
  OK(st == KILN_ERR_PACK && strstr(kiln_rt_errmsg(rt), reads),
     "wrong version -> KILN_ERR_PACK (%s)", kiln_rt_errmsg(rt));
  p[KILN_PACK_OFF_VERSION] = KILN_PACK_VERSION;

  /* Hand-crafted damage behind a valid checksum exercises the structural checks. */
  p[KILN_PACK_OFF_NPLANS] = 0xff;
  fix_checksum(p, size);
  st = open_bytes(rt, p, size);
  OK(st == KILN_ERR_PACK, "absurd plan count behind a valid checksum -> KILN_ERR_PACK (%s)",
     kiln_rt_errmsg(rt));
  memcpy(p, good, size);
  p[KILN_PACK_OFF_STRTAB + 12] = 1; /* string table size += 4 GiB */
  fix_checksum(p, size);
  st = open_bytes(rt, p, size);
  OK(st == KILN_ERR_PACK, "string table outside the file -> KILN_ERR_PACK (%s)",
     kiln_rt_errmsg(rt));

  /* Random damage to the metadata with the checksum fixed up: never a crash, only
   * KILN_OK or KILN_ERR_PACK (run under ASan/UBSan to make this strict). */
  uint64_t meta = 0, meta_size = 0;
  for (int i = 7; i >= 0; i--) {
    meta = meta << 8 | good[KILN_PACK_OFF_META + i];
    meta_size = meta_size << 8 | good[KILN_PACK_OFF_META + 8 + i];
  }
  unsigned seed = 12345;
  int fine = 1, rejected = 0,
      iters = getenv("KILN_FUZZ_ITERS") ? atoi(getenv("KILN_FUZZ_ITERS")) : 3000;
  for (int iter = 0; iter < iters; iter++) {
    memcpy(p, good, size);
    int nflip = 1 + iter % 4;
    for (int k = 0; k < nflip; k++) {
      seed = seed * 1103515245u + 12345u;
      /* mostly the metadata; every fourth change anywhere after the checksum */
      size_t at = iter % 4 == 3
                      ? KILN_PACK_CHECKSUM_FROM + (seed >> 8) % (size - KILN_PACK_CHECKSUM_FROM)
                      : (size_t)(meta + (seed >> 8) % meta_size);
      seed = seed * 1103515245u + 12345u;
      p[at] = (unsigned char)(iter % 3 == 0 ? 0xff : seed >> 16);
    }
    fix_checksum(p, size);
    st = open_bytes(rt, p, size);
    if (st != KILN_OK && st != KILN_ERR_PACK) fine = 0;
    rejected += st == KILN_ERR_PACK;
  }
  OK(fine,
     "%d random corruptions behind valid checksums: only KILN_OK or KILN_ERR_PACK (%d "
     "rejected)",
     iters, rejected);
  free(p);
}

static void test_plans(kiln_rt *rt, kiln_pack *pack) {
  kiln_pack_info pi;
  OK(kiln_pack_info_get(pack, &pi) == KILN_OK && pi.nplans == 2 && pi.format_version == KILN_PACK_VERSION,
     "pack info: 2 plans, format %u", KILN_PACK_VERSION);
  OK(pi.nimages == 6, "identical images stored once (6 distinct of 7), got %d", pi.nimages);

  kiln_plan *a = NULL, *b = NULL, *p = NULL;
  OK(kiln_plan_get(pack, "bias_gelu", "H=4096,W=8", &a) == KILN_OK && a,
     "plan by graph + instance");
  OK(kiln_plan_get(pack, "bias_gelu", "W=8, H=4096", &p) == KILN_OK && p == a,
     "instance key order and spaces do not matter");
  OK(kiln_plan_get(pack, "bias_gelu", NULL, &p) == KILN_OK && p == a,
     "NULL instance picks the graph's only instance");
  OK(kiln_plan_get(pack, "add2d", "", &b) == KILN_OK && b && b != a, "plan without instance");
  kiln_status st = kiln_plan_get(pack, "nope", "", &p);
  OK(st == KILN_ERR_NOT_FOUND && p == NULL && strstr(kiln_rt_errmsg(rt), "bias_gelu [H=4096,W=8]"),
     "unknown graph -> KILN_ERR_NOT_FOUND listing plans (%s)", kiln_rt_errmsg(rt));
  st = kiln_plan_get(pack, "bias_gelu", "H=4096", &p);
  OK(st == KILN_ERR_NOT_FOUND, "partial instance key -> KILN_ERR_NOT_FOUND (%s)",
     kiln_rt_errmsg(rt));
  st = kiln_plan_get(pack, "bias_gelu", "H=2048,W=8", &p);
  OK(st == KILN_ERR_NOT_FOUND, "unknown instance -> KILN_ERR_NOT_FOUND (%s)", kiln_rt_errmsg(rt));
  OK(kiln_pack_plan_at(pack, 1, &p) == KILN_OK && p == b, "plan by index");
  OK(kiln_pack_plan_at(pack, 2, &p) == KILN_ERR_NOT_FOUND, "plan index out of range");

  kiln_plan_info info;
  kiln_plan_info_get(a, &info);
  OK(info.ntensors == 6 && info.nkernels == 2 && info.ndims == 1 && info.nspecialized == 2 &&
         strcmp(info.graph, "bias_gelu") == 0 && strcmp(info.instance, "H=4096,W=8") == 0 &&
         strstr(info.graph_json, "kiln.graph"),
     "plan info: counts, names, graph JSON");
  const char *name;
  int64_t value;
  OK(kiln_plan_dim(a, 0, &name) == KILN_OK && strcmp(name, "T") == 0, "dynamic dim name T");
  OK(kiln_plan_specialized(a, 1, &name, &value) == KILN_OK && strcmp(name, "W") == 0 && value == 8,
     "specialized dim W=8 from the instance key");
  kiln_tensor_info t;
  int idx;
  OK(kiln_plan_tensor_index(a, "x", &idx) == KILN_OK && idx == 0 &&
         kiln_plan_tensor(a, idx, &t) == KILN_OK && t.uid == 1 && t.dtype == KILN_DTYPE_BF16 &&
         t.role == KILN_ROLE_INPUT && t.ndim == 2 && t.dims[0] == -1 &&
         strcmp(t.dim_names[0], "T") == 0 && t.dims[1] == 4096 && !t.dim_names[1] &&
         t.strides[0] == 4096 && t.strides[1] == 1 && t.align == 16,
     "tensor x: uid, dtype, role, dims [T, 4096], strides, align");
  OK(kiln_plan_tensor_index_uid(a, 2, &idx) == KILN_OK && kiln_plan_tensor(a, idx, &t) == KILN_OK &&
         t.dims[0] == 8 && !t.dim_names[0],
     "tensor b: specialized dim W resolved to 8");
  OK(kiln_plan_tensor_index_uid(a, 4, &idx) == KILN_OK && kiln_plan_tensor(a, idx, &t) == KILN_OK &&
         t.role == KILN_ROLE_CONSTANT && t.value == 0.5,
     "constant tensor keeps its value");
  OK(kiln_plan_tensor_index_uid(a, 99, &idx) == KILN_ERR_NOT_FOUND, "unknown uid -> NOT_FOUND");
  OK(kiln_plan_tensor_index(b, "y", &idx) == KILN_OK && kiln_plan_tensor(b, idx, &t) == KILN_OK &&
         t.strides[0] == -1 && t.stride_exprs[0] && strcmp(t.stride_exprs[0], "N") == 0 &&
         t.strides[1] == 1 && t.align == 16,
     "default strides are row-major and symbolic (%s)",
     t.stride_exprs[0] ? t.stride_exprs[0] : "NULL");
  kiln_plan_tensor_index(b, "b", &idx);
  kiln_plan_tensor(b, idx, &t);
  OK(t.align == 4, "default align is the element size");

  kiln_kernel_info k;
  OK(kiln_plan_kernel(a, 0, &k) == KILN_OK && strcmp(k.symbol, "kiln_bias_gelu_0") == 0 &&
         strcmp(k.grid[0], "ceil(T*4096/2048)") == 0 && strcmp(k.grid[1], "1") == 0 &&
         k.block[0] == 256 && k.nparams == 7 && k.nimages == 2 && k.pdl == 2,
     "kernel 0: symbol, grid rule text (%s), block, params, images, pdl at entry", k.grid[0]);
  OK(kiln_plan_kernel(a, 1, &k) == KILN_OK && strcmp(k.grid[0], "min(T, 1024)") == 0 &&
         k.block[1] == 1 && k.smem == 65536 && k.pdl == 1,
     "kernel 1: clamped grid (%s), padded block, smem, pdl", k.grid[0]);
  const char *arch;
  const void *data;
  size_t size;
  OK(kiln_plan_kernel_image(b, 0, 2, &arch, &data, &size) == KILN_OK &&
         strcmp(arch, "compute_80") == 0 && size == sizeof ptx_text &&
         ((const char *)data)[size - 1] == '\0',
     "PTX image stored NUL-terminated");

  /* Image choice per device SM. */
  const kiln__kernel *ka = &a->kernels[0], *kb = &b->kernels[0];
  int i90 = kiln__select_image(ka, 9, 0), i86 = kiln__select_image(ka, 8, 6);
  OK(i90 >= 0 && strcmp(ka->images[i90].arch, "sm_90a") == 0, "sm_90 device gets sm_90a");
  OK(i86 >= 0 && strcmp(ka->images[i86].arch, "sm_80") == 0, "sm_86 device gets sm_80");
  OK(kiln__select_image(ka, 10, 0) < 0 && kiln__select_image(ka, 7, 5) < 0,
     "sm_100 and sm_75 get nothing without PTX");
  int i100 = kiln__select_image(kb, 10, 0), i91 = kiln__select_image(kb, 9, 1);
  OK(i100 >= 0 && strcmp(kb->images[i100].arch, "compute_80") == 0, "sm_100 falls back to PTX");
  OK(i91 >= 0 && strcmp(kb->images[i91].arch, "compute_80") == 0,
     "sm_91 never gets an sm_90a cubin (PTX instead)");
}

#define FAKE 0x10000ull

static void test_binding(kiln_rt *rt, kiln_pack *pack) {
  kiln_plan *a, *b;
  kiln_plan_get(pack, "bias_gelu", "H=4096,W=8", &a);
  kiln_plan_get(pack, "add2d", "", &b);
  kiln_bind *bd;
  OK(kiln_bind_create(a, &bd) == KILN_OK, "binding created");
  int64_t xd[2] = {7, 4096}, bdims[2] = {8, 512};
  kiln_status st;
  kiln_bind_tensor(bd, "x", FAKE, 2, xd, NULL, KILN_DTYPE_BF16);
  kiln_bind_tensor(bd, "b", FAKE * 2, 2, bdims, NULL, KILN_DTYPE_BF16);
  st = kiln_bind_check(a, bd);
  OK(st == KILN_ERR_UNBOUND && strstr(kiln_rt_errmsg(rt), "'alpha'"),
     "missing scalar -> UNBOUND (%s)", kiln_rt_errmsg(rt));
  OK(kiln_bind_scalar(bd, "alpha", 2.0) == KILN_OK, "scalar bound");
  st = kiln_bind_check(a, bd);
  OK(st == KILN_ERR_UNBOUND && strstr(kiln_rt_errmsg(rt), "'y'"), "missing output -> UNBOUND (%s)",
     kiln_rt_errmsg(rt));
  OK(kiln_bind_tensor_uid(bd, 6, FAKE * 3, 2, xd, NULL, KILN_DTYPE_BF16) == KILN_OK, "bind by uid");
  OK(kiln_bind_check(a, bd) == KILN_OK, "complete binding passes (T inferred = 7)");

  st = kiln_bind_tensor(bd, "add_1.OUT_0", FAKE, 2, xd, NULL, KILN_DTYPE_FP32);
  OK(st == KILN_ERR_INVALID_ARG, "binding a virtual tensor -> INVALID_ARG (%s)",
     kiln_rt_errmsg(rt));
  st = kiln_bind_tensor(bd, "zzz", FAKE, 2, xd, NULL, KILN_DTYPE_FP32);
  OK(st == KILN_ERR_NOT_FOUND, "binding an unknown name -> NOT_FOUND (%s)", kiln_rt_errmsg(rt));
  OK(kiln_bind_scalar(bd, "x", 1.0) == KILN_ERR_INVALID_ARG,
     "kiln_bind_scalar on a tensor -> INVALID_ARG");

  kiln_bind_tensor(bd, "x", FAKE, 2, xd, NULL, KILN_DTYPE_FP16);
  st = kiln_bind_check(a, bd);
  OK(st == KILN_ERR_DTYPE && strstr(kiln_rt_errmsg(rt), "fp16"), "wrong dtype -> DTYPE (%s)",
     kiln_rt_errmsg(rt));
  int64_t bad[2] = {7, 4095};
  kiln_bind_tensor(bd, "x", FAKE, 2, bad, NULL, KILN_DTYPE_BF16);
  st = kiln_bind_check(a, bd);
  OK(st == KILN_ERR_SHAPE, "wrong fixed dim -> SHAPE (%s)", kiln_rt_errmsg(rt));
  kiln_bind_tensor(bd, "x", FAKE, 1, xd, NULL, KILN_DTYPE_BF16);
  st = kiln_bind_check(a, bd);
  OK(st == KILN_ERR_SHAPE && strstr(kiln_rt_errmsg(rt), "rank"), "wrong rank -> SHAPE (%s)",
     kiln_rt_errmsg(rt));
  int64_t xd8[2] = {8, 4096};
  kiln_bind_tensor(bd, "x", FAKE, 2, xd8, NULL, KILN_DTYPE_BF16);
  st = kiln_bind_check(a, bd);
  OK(st == KILN_ERR_SHAPE && strstr(kiln_rt_errmsg(rt), "dynamic dim T"),
     "inconsistent dynamic dim -> SHAPE (%s)", kiln_rt_errmsg(rt));
  kiln_bind_tensor(bd, "x", FAKE, 2, xd, NULL, KILN_DTYPE_BF16);
  OK(kiln_bind_dim(bd, "T", 9) == KILN_OK && kiln_bind_check(a, bd) == KILN_ERR_SHAPE,
     "kiln_bind_dim disagreeing with shapes -> SHAPE (%s)", kiln_rt_errmsg(rt));
  OK(kiln_bind_dim(bd, "T", 7) == KILN_OK && kiln_bind_check(a, bd) == KILN_OK,
     "kiln_bind_dim agreeing with shapes passes");
  OK(kiln_bind_dim(bd, "H", 4096) == KILN_OK, "binding a specialized dim to its value is fine");
  OK(kiln_bind_dim(bd, "H", 2048) == KILN_ERR_SHAPE,
     "binding a specialized dim to another value -> SHAPE");
  OK(kiln_bind_dim(bd, "Q", 1) == KILN_ERR_NOT_FOUND, "unknown dim -> NOT_FOUND");
  OK(kiln_bind_dim(bd, "T", -1) == KILN_ERR_SHAPE, "negative dim -> SHAPE");

  int64_t strides_bad[2] = {4097, 1}, strides_ok[2] = {4096, 1};
  kiln_bind_tensor(bd, "x", FAKE, 2, xd, strides_bad, KILN_DTYPE_BF16);
  st = kiln_bind_check(a, bd);
  OK(st == KILN_ERR_STRIDE, "bad strides -> STRIDE (%s)", kiln_rt_errmsg(rt));
  kiln_bind_tensor(bd, "x", FAKE, 2, xd, strides_ok, KILN_DTYPE_BF16);
  OK(kiln_bind_check(a, bd) == KILN_OK, "explicit strides equal to the plan's pass");

  kiln_bind_tensor(bd, "x", 0x1002, 2, xd, NULL, KILN_DTYPE_BF16);
  st = kiln_bind_check(a, bd);
  OK(st == KILN_ERR_ALIGN && strstr(kiln_rt_errmsg(rt), "0x1002"),
     "misaligned pointer -> ALIGN (%s)", kiln_rt_errmsg(rt));
  kiln_bind_tensor(bd, "x", 0, 2, xd, NULL, KILN_DTYPE_BF16);
  OK(kiln_bind_check(a, bd) == KILN_ERR_INVALID_ARG, "NULL pointer with elements -> INVALID_ARG");

  /* T = 1: the stride of an extent-1 dim is irrelevant (torch gives arbitrary ones). */
  kiln_bind_reset(bd);
  int64_t one[2] = {1, 4096}, odd[2] = {12345, 1};
  kiln_bind_tensor(bd, "x", FAKE, 2, one, odd, KILN_DTYPE_BF16);
  kiln_bind_tensor(bd, "b", FAKE, 2, bdims, NULL, KILN_DTYPE_BF16);
  kiln_bind_tensor(bd, "y", FAKE, 2, one, NULL, KILN_DTYPE_BF16);
  kiln_bind_scalar(bd, "alpha", 1.0);
  OK(kiln_bind_check(a, bd) == KILN_OK, "strides of extent-1 dims are not compared");
  int64_t huge[2] = {(int64_t)1 << 40, 4096};
  kiln_bind_tensor(bd, "x", FAKE, 2, huge, NULL, KILN_DTYPE_BF16);
  kiln_bind_tensor(bd, "y", FAKE, 2, huge, NULL, KILN_DTYPE_BF16);
  st = kiln_bind_check(a, bd);
  OK(st == KILN_ERR_SHAPE && strstr(kiln_rt_errmsg(rt), "grid"),
     "grid beyond the driver limit -> SHAPE (%s)", kiln_rt_errmsg(rt));
  OK(kiln_bind_check(b, bd) == KILN_ERR_INVALID_ARG,
     "binding used with another plan -> INVALID_ARG");
  kiln_bind_destroy(bd);

  /* add2d: both dims inferred, broadcast input; cluster 2 needs an even grid. */
  kiln_bind *b2;
  kiln_bind_create(b, &b2);
  int64_t ad[2] = {3, 256}, bd1[1] = {256};
  kiln_bind_tensor(b2, "a", FAKE, 2, ad, NULL, KILN_DTYPE_FP32);
  kiln_bind_tensor(b2, "b", FAKE + 4, 1, bd1, NULL, KILN_DTYPE_FP32);
  kiln_bind_tensor(b2, "y", FAKE, 2, ad, NULL, KILN_DTYPE_FP32);
  st = kiln_bind_check(b, b2);
  OK(st == KILN_ERR_SHAPE && strstr(kiln_rt_errmsg(rt), "cluster"),
     "grid not a multiple of the cluster -> SHAPE (%s)", kiln_rt_errmsg(rt));
  ad[0] = 4;
  kiln_bind_tensor(b2, "a", FAKE, 2, ad, NULL, KILN_DTYPE_FP32);
  kiln_bind_tensor(b2, "y", FAKE, 2, ad, NULL, KILN_DTYPE_FP32);
  OK(kiln_bind_check(b, b2) == KILN_OK, "add2d binding with M, N inferred passes");

  int version = 0;
  st = kiln_rt_driver_version(rt, &version);
  OK(st == KILN_OK || st == KILN_ERR_NO_DRIVER, "driver: %s%s%s (version %d)", kiln_errstr(st),
     st ? ": " : "", st ? kiln_rt_errmsg(rt) : "", version);
  if (st == KILN_ERR_NO_DRIVER) {
    OK(kiln_launch(b, b2, NULL) == KILN_ERR_NO_DRIVER, "launch without a driver -> NO_DRIVER (%s)",
       kiln_rt_errmsg(rt));
    OK(kiln_plan_load(b) == KILN_ERR_NO_DRIVER, "plan load without a driver -> NO_DRIVER");
  } else {
    DIAG("a driver is present: launch paths are covered by tests/gpu/test_launch.c");
  }
  const kiln_devptr ptrs[3] = {FAKE, 0x1002, FAKE};
  const int64_t dims[2] = {4, 256};
  OK(kiln_launch_args(b, NULL, ptrs, NULL, dims, 0) == KILN_ERR_ALIGN,
     "positional launch checks alignment (%s)", kiln_rt_errmsg(rt));
  kiln_bind_destroy(b2);
}

static void test_writer_errors(void) {
  kiln_err e = {0};
  kiln_pack_writer *w = make_writer(&e);
  void *before, *after;
  size_t nbefore, nafter;
  kiln_pack_writer_to_memory(w, &before, &nbefore, &e);
  const char *archs[] = {"sm_90a"};
  unsigned char buf[128];
  kiln_blob im = fake_cubin(buf, sizeof buf, "x");
  OK(kiln_pack_writer_add_plan(w, "{\"schema\": ", archs, 1, &im, &e) == -1 &&
         strcmp(e.code, "E_JSON") == 0,
     "malformed manifest -> E_JSON (%s)", e.msg);
  OK(kiln_pack_writer_add_plan(w, "{\"schema\": \"kiln.graph\", \"version\": 1}", archs, 1, &im,
                               &e) == -1 &&
         strcmp(e.code, "E_JSON_VERSION") == 0,
     "wrong schema -> E_JSON_VERSION (%s)", e.msg);
  OK(kiln_pack_writer_add_plan(w, manifest_add2d, archs, 1, &im, &e) == -1 &&
         strcmp(e.code, "E_PACK") == 0 && strstr(e.msg, "already"),
     "duplicate plan -> E_PACK (%s)", e.msg);
  const char *bad_dim =
      "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"g\", \"dynamic\": [],"
      " \"tensors\": [{\"uid\": 1, \"name\": \"x\", \"dtype\": \"fp32\", \"dims\": [\"Q\"],"
      " \"role\": \"input\"}], \"kernels\": []}";
  OK(kiln_pack_writer_add_plan(w, bad_dim, archs, 1, &im, &e) == -1 && strstr(e.msg, "'Q'"),
     "unknown dim name -> E_PACK (%s)", e.msg);
  const char *no_image =
      "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"g2\", \"tensors\": [],"
      " \"kernels\": [{\"symbol\": \"k\", \"block\": [32], \"grid\": [1], \"params\": []}]}";
  kiln_blob none = {NULL, 0};
  OK(kiln_pack_writer_add_plan(w, no_image, archs, 1, &none, &e) == -1 && strstr(e.msg, "image"),
     "kernel without an image -> E_PACK (%s)", e.msg);
  const char *bad_pdl =
      "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"g3\", \"tensors\": [],"
      " \"kernels\": [{\"symbol\": \"k\", \"block\": [32], \"grid\": [1], \"pdl\": 1, \"params\": []}]}";
  OK(kiln_pack_writer_add_plan(w, bad_pdl, archs, 1, &im, &e) == -1 && strstr(e.msg, "pdl"),
     "non-boolean pdl -> E_PACK (%s)", e.msg);
  const char *bad_entry =
      "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"g3\", \"tensors\": [],"
      " \"kernels\": [{\"symbol\": \"k\", \"block\": [32], \"grid\": [1], \"pdl_entry\": \"yes\", \"params\": []}]}";
  OK(kiln_pack_writer_add_plan(w, bad_entry, archs, 1, &im, &e) == -1 && strstr(e.msg, "pdl_entry"),
     "non-boolean pdl_entry -> E_PACK (%s)", e.msg);
  const char *bad_arch[] = {"sm90"};
  OK(kiln_pack_writer_add_plan(w, no_image, bad_arch, 1, &im, &e) == -1 && strstr(e.msg, "arch"),
     "bad arch string -> E_PACK (%s)", e.msg);
  kiln_pack_writer_to_memory(w, &after, &nafter, &e);
  OK(nbefore == nafter && memcmp(before, after, nbefore) == 0,
     "failed adds leave the writer unchanged");
  free(before);
  free(after);
  OK(kiln_pack_writer_add_plan(w, no_image, archs, 1, &im, &e) == 0, "a good plan still adds");
  kiln_pack_writer_free(w);
}

static void test_inspect(const char *path, const unsigned char *good, size_t size,
                         const char *tmp) {
  kiln_err e = {0};
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  int rc = kiln_pack_inspect(path, out, &e);
  fclose(out);
  OK(rc == 0 && strstr(text, "plan bias_gelu [H=4096,W=8]") && strstr(text, "ceil(T*4096/2048)") &&
         strstr(text, "sm_90a") && strstr(text, "compute_80") && strstr(text, "dynamic dims: M N"),
     "kiln pack inspect lists plans, grid rules and archs");
  if (rc == 0 && getenv("KILN_TEST_VERBOSE")) fputs(text, stdout);
  free(text);
  out = open_memstream(&text, &len);
  rc = kiln_pack_verify(path, out, &e);
  fclose(out);
  OK(rc == 0 && strstr(text, "ok "), "kiln pack verify accepts a sound pack");
  free(text);

  char bad[4096];
  snprintf(bad, sizeof bad, "%s/bad.kpack", tmp);
  FILE *f = fopen(bad, "wb");
  fwrite(good, 1, size - 7, f);
  fclose(f);
  out = open_memstream(&text, &len);
  rc = kiln_pack_verify(bad, out, &e);
  fclose(out);
  OK(rc == -1 && strcmp(e.code, "E_PACK") == 0 && strstr(e.msg, "truncated"),
     "kiln pack verify rejects a truncated pack (%s)", e.msg);
  free(text);
  snprintf(bad, sizeof bad, "%s/missing.kpack", tmp);
  rc = kiln_pack_inspect(bad, stdout, &e);
  OK(rc == -1 && strcmp(e.code, "E_IO") == 0, "inspect of a missing file -> E_IO (%s)", e.msg);
}

/* Offset of the param record (u8 kind, i64 arg) with this kind and arg; -1 when absent. */
static long find_param(const unsigned char *p, size_t n, unsigned kind, int64_t arg) {
  for (size_t i = KILN_PACK_HEADER_SIZE; i + 9 <= n; i++) {
    if (p[i] != kind) continue;
    int64_t v = 0;
    for (int k = 7; k >= 0; k--) v = v << 8 | p[i + 1 + (size_t)k];
    if (v == arg) return (long)i;
  }
  return -1;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *text = calloc(1, 1 << 20);
  if (text) fread(text, 1, (1 << 20) - 1, f);
  fclose(f);
  return text;
}

static void test_workspace(kiln_rt *rt, const char *tmp) {
  kiln_err e = {0};
  const char *archs[] = {"sm_90a"};
  unsigned char cub[4][128];
  kiln_blob im[4] = {fake_cubin(cub[0], 128, "ws 0"), fake_cubin(cub[1], 128, "ws 1"),
                     fake_cubin(cub[2], 128, "ws 2"), fake_cubin(cub[3], 128, "ws 3")};
  kiln_pack_writer *w = kiln_pack_writer_new();
  OK(kiln_pack_writer_add_plan(w, manifest_ws_plan, archs, 1, im, &e) == 0 &&
         kiln_pack_writer_add_plan(w, manifest_ws_fixed, archs, 1, im + 1, &e) == 0 &&
         kiln_pack_writer_add_plan(w, manifest_no_ws, archs, 1, im + 2, &e) == 0 &&
         kiln_pack_writer_add_plan(w, manifest_ws_add, archs, 1, im + 3, &e) == 0 &&
         kiln_pack_writer_add_plan(w, manifest_ws_sms, archs, 1, im + 3, &e) == 0,
     "writer takes plans with and without a workspace (%s)", e.msg);

  /* writer errors */
  const char *bad[][2] = {
      {"{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"e1\", \"tensors\": [],"
       " \"kernels\": [{\"symbol\": \"k\", \"block\": [32], \"grid\": [1],"
       " \"params\": [{\"kind\": \"workspace\", \"offset\": 0}]}]}",
       "no \"workspace\""},
      {"{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"e2\", \"workspace\": 512,"
       " \"tensors\": [], \"kernels\": [{\"symbol\": \"k\", \"block\": [32], \"grid\": [1],"
       " \"params\": [{\"kind\": \"workspace\", \"offset\": 512}]}]}",
       "outside the workspace"},
      {"{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"e3\", \"workspace\": 512,"
       " \"tensors\": [], \"kernels\": [{\"symbol\": \"k\", \"block\": [32], \"grid\": [1],"
       " \"params\": [{\"kind\": \"workspace\", \"offset\": -8}]}]}",
       "offset"},
      {"{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"e4\", \"dynamic\": [\"T\"],"
       " \"workspace\": {\"mul\": [\"T\"], \"dvi\": 2}, \"tensors\": [], \"kernels\": []}",
       "\"dvi\""},
      {"{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"e5\","
       " \"workspace\": {\"mul\": [\"Q\"]}, \"tensors\": [], \"kernels\": []}",
       "'Q'"},
      {"{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"e6\", \"workspace\": -1,"
       " \"tensors\": [], \"kernels\": []}",
       "workspace is negative"},
      {"{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"e7\", \"dynamic\": [\"T\"],"
       " \"workspace\": {\"mul\": [\"T\"], \"add\": -4}, \"tensors\": [], \"kernels\": []}",
       "\"add\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    OK(kiln_pack_writer_add_plan(w, bad[i][0], archs, 1, im, &e) == -1 &&
           strcmp(e.code, "E_PACK") == 0 && strstr(e.msg, bad[i][1]),
       "bad workspace manifest %zu -> E_PACK (%s)", i + 1, e.msg);

  void *bytes;
  size_t size;
  OK(kiln_pack_writer_to_memory(w, &bytes, &size, &e) == 0, "workspace pack written (%zu bytes)",
     size);
  char path[4096];
  snprintf(path, sizeof path, "%s/ws.kpack", tmp);
  kiln_pack_writer_write(w, path, &e);
  kiln_pack_writer_free(w);

  kiln_pack *pack;
  kiln_status st = kiln_pack_open_memory(rt, bytes, size, &pack);
  OK(st == KILN_OK, "workspace pack opens (%s)", kiln_rt_errmsg(rt));
  if (st != KILN_OK) return;
  kiln_plan *pw, *pf, *pn;
  kiln_plan_get(pack, "ws_plan", "", &pw);
  kiln_plan_get(pack, "ws_fixed", "", &pf);
  kiln_plan_get(pack, "no_ws", "", &pn);
  kiln_plan_info iw, ifx, in;
  kiln_plan_info_get(pw, &iw);
  kiln_plan_info_get(pf, &ifx);
  kiln_plan_info_get(pn, &in);
  OK(iw.workspace && strcmp(iw.workspace, "ceil(M*100/3)") == 0 && ifx.workspace &&
         strcmp(ifx.workspace, "1000") == 0 && !in.workspace,
     "plan info: workspace rules (%s, %s, none)", iw.workspace ? iw.workspace : "NULL",
     ifx.workspace ? ifx.workspace : "NULL");
  kiln_kernel_info ki;
  kiln_plan_kernel(pw, 1, &ki);
  OK(pw->kernels[0].params[1].kind == KILN__PARAM_WORKSPACE && pw->kernels[0].params[1].arg == 0 &&
         pw->kernels[1].params[0].kind == KILN__PARAM_WORKSPACE &&
         pw->kernels[1].params[0].arg == 4096 && ki.nparams == 2,
     "workspace params keep their offsets");

  /* sizes */
  size_t n = 1;
  OK(kiln_plan_workspace_size(pn, NULL, &n) == KILN_OK && n == 0, "no workspace: size 0");
  OK(kiln_plan_workspace_size(pf, NULL, &n) == KILN_OK && n == 1024,
     "literal rule: 1000 -> 1024 bytes without a binding (%zu)", n);
  st = kiln_plan_workspace_size(pw, NULL, &n);
  OK(st == KILN_ERR_INVALID_ARG && n == 0, "dynamic rule without a binding -> INVALID_ARG (%s)",
     kiln_rt_errmsg(rt));
  kiln_bind *b;
  kiln_bind_create(pw, &b);
  st = kiln_plan_workspace_size(pw, b, &n);
  OK(st == KILN_ERR_UNBOUND && strstr(kiln_rt_errmsg(rt), "dynamic dim M"),
     "size with M unknown -> UNBOUND (%s)", kiln_rt_errmsg(rt));
  kiln_bind_dim(b, "N", 5);
  OK(kiln_plan_workspace_size(pw, b, &n) == KILN_ERR_UNBOUND, "N alone is not enough");
  kiln_bind_dim(b, "M", 1000);
  OK(kiln_plan_workspace_size(pw, b, &n) == KILN_OK && n == 33536,
     "M = 1000 bound as a dim: ceil(100000/3) = 33334 -> 33536 bytes (%zu)", n);
  {
    kiln_plan *pa;
    kiln_plan_info ia;
    kiln_kernel_info ka;
    plan_rules(pack, "ws_add", &pa, &ia, &ka);
    OK(ia.workspace && strcmp(ia.workspace, "M*8 + 5000") == 0 && ka.grid[0] &&
           strcmp(ka.grid[0], "ceil(M/64) + 2") == 0,
       "rules with an added constant read back (%s; grid %s)", ia.workspace ? ia.workspace : "NULL",
       ka.grid[0] ? ka.grid[0] : "NULL");
    kiln_bind *ba;
    kiln_bind_create(pa, &ba);
    kiln_bind_dim(ba, "M", 1000);
    OK(kiln_plan_workspace_size(pa, ba, &n) == KILN_OK && n == 13056,
       "M = 1000: 8000 + 5000 = 13000 -> 13056 bytes (%zu)", n);
    int64_t gv;
    OK(kiln__rule_eval(&pa->kernels[0].grid[0], (const int64_t[]){1000}, 132, &gv) == 0 && gv == 18,
       "grid: ceil(1000/64) + 2 = 18 (%lld)", (long long)gv);
    kiln_bind_destroy(ba);
  }
  {
    kiln_plan *ps;
    kiln_plan_info is;
    kiln_kernel_info ks;
    plan_rules(pack, "ws_sms", &ps, &is, &ks);
    OK(is.workspace && strcmp(is.workspace, "min(M*16, SMS*2048)") == 0 &&
           strcmp(ks.grid[0], "min(ceil(M/64), SMS*2)") == 0 &&
           strcmp(ks.grid[1], "min(ceil(M/64), 300, SMS*1/2)") == 0,
       "SM-capped rules read back (%s; %s; %s)", is.workspace ? is.workspace : "NULL", ks.grid[0],
       ks.grid[1]);
    const int64_t M[] = {100000};
    int64_t g108, g132, y108, y1, w108, w256, small;
    OK(kiln__rule_eval(&ps->kernels[0].grid[0], M, 108, &g108) == 0 && g108 == 216 &&
           kiln__rule_eval(&ps->kernels[0].grid[0], M, 132, &g132) == 0 && g132 == 264 &&
           kiln__rule_eval(&ps->kernels[0].grid[1], M, 108, &y108) == 0 && y108 == 54 &&
           kiln__rule_eval(&ps->kernels[0].grid[1], M, 1, &y1) == 0 && y1 == 1 &&
           kiln__rule_eval(&ps->kernels[0].grid[0], (const int64_t[]){64}, 132, &small) == 0 &&
           small == 1,
       "grids follow the SM count: 216 CTAs on 108 SMs, 264 on 132, SMS/2 at least 1, few rows "
       "fewer CTAs (%lld %lld %lld %lld %lld)", (long long)g108, (long long)g132, (long long)y108,
       (long long)y1, (long long)small);
    OK(kiln__workspace_eval(ps, M, 108, NULL, &w108) == 0 && w108 == 108 * 2048 &&
           kiln__workspace_eval(ps, M, KILN_PACK_MAX_SMS, NULL, &w256) == 0 &&
           w256 == KILN_PACK_MAX_SMS * 2048,
       "the workspace follows it too (%lld, %lld)", (long long)w108, (long long)w256);
    kiln_bind *bs;
    kiln_bind_create(ps, &bs);
    kiln_bind_dim(bs, "M", 100000);
    int64_t sms;
    int have_ctx;
    OK(kiln__context_sms(rt, &sms, &have_ctx) == KILN_OK && (have_ctx || sms == KILN_PACK_MAX_SMS),
       "no current context: rules see the largest SM count (%lld)", (long long)sms);
    if (!have_ctx)
      OK(kiln_plan_workspace_size(ps, bs, &n) == KILN_OK && n == KILN_PACK_MAX_SMS * 2048,
         "without a context the workspace size is enough for any device (%zu)", n);
    OK(ps->kernels[0].nparams == 3 && ps->kernels[0].params[2].kind == KILN__PARAM_SMS,
       "an \"sms\" param reads back as the SM count param");
    kiln_bind_destroy(bs);
  }
  kiln_bind_reset(b);
  int64_t xd[2] = {7, 5};
  kiln_bind_tensor(b, "x", FAKE, 2, xd, NULL, KILN_DTYPE_FP32);
  OK(kiln_plan_workspace_size(pw, b, &n) == KILN_OK && n == 256,
     "M = 7 from a bound tensor (y unbound): ceil(700/3) = 234 -> 256 bytes (%zu)", n);
  kiln_bind_dim(b, "M", 8);
  st = kiln_plan_workspace_size(pw, b, &n);
  OK(st == KILN_ERR_SHAPE, "dims that disagree -> SHAPE (%s)", kiln_rt_errmsg(rt));
  kiln_bind_reset(b);

  /* binding checks */
  kiln_bind_tensor(b, "x", FAKE, 2, xd, NULL, KILN_DTYPE_FP32);
  kiln_bind_tensor(b, "y", FAKE, 2, xd, NULL, KILN_DTYPE_FP32);
  st = kiln_bind_check(pw, b);
  OK(st == KILN_ERR_UNBOUND && strstr(kiln_rt_errmsg(rt), "workspace"),
     "no workspace bound -> UNBOUND (%s)", kiln_rt_errmsg(rt));
  OK(kiln_launch(pw, b, NULL) == KILN_ERR_UNBOUND, "kiln_launch without a workspace -> UNBOUND");
  OK(kiln_bind_workspace(b, 0, 256) == KILN_ERR_INVALID_ARG,
     "kiln_bind_workspace(NULL, bytes) -> INVALID_ARG");
  kiln_bind_workspace(b, FAKE + 128, 4096);
  st = kiln_bind_check(pw, b);
  OK(st == KILN_ERR_ALIGN && strstr(kiln_rt_errmsg(rt), "256"),
     "workspace aligned to 128 only -> ALIGN (%s)", kiln_rt_errmsg(rt));
  OK(kiln_launch(pw, b, NULL) == KILN_ERR_ALIGN,
     "kiln_launch with a misaligned workspace -> ALIGN");
  kiln_bind_workspace(b, FAKE, 255);
  st = kiln_bind_check(pw, b);
  OK(st == KILN_ERR_INVALID_ARG && strstr(kiln_rt_errmsg(rt), "255 bytes"),
     "too small a workspace -> INVALID_ARG (%s)", kiln_rt_errmsg(rt));
  kiln_bind_workspace(b, FAKE, 256);
  OK(kiln_bind_check(pw, b) == KILN_OK, "workspace of the right size passes");
  kiln_bind_dim(b, "M", 8);
  int64_t xd8[2] = {8, 5};
  kiln_bind_tensor(b, "x", FAKE, 2, xd8, NULL, KILN_DTYPE_FP32);
  kiln_bind_tensor(b, "y", FAKE, 2, xd8, NULL, KILN_DTYPE_FP32);
  st = kiln_bind_check(pw, b);
  OK(st == KILN_ERR_INVALID_ARG && strstr(kiln_rt_errmsg(rt), "needs 512"),
     "the same workspace is too small once M = 8 (ceil(800/3) -> 512) -> INVALID_ARG (%s)",
     kiln_rt_errmsg(rt));
  kiln_bind_workspace(b, FAKE, 512);
  OK(kiln_bind_check(pw, b) == KILN_OK, "a larger workspace passes again");
  kiln_bind_reset(b);
  kiln_bind_tensor(b, "x", FAKE, 2, xd, NULL, KILN_DTYPE_FP32);
  kiln_bind_tensor(b, "y", FAKE, 2, xd, NULL, KILN_DTYPE_FP32);
  OK(kiln_bind_check(pw, b) == KILN_ERR_UNBOUND, "kiln_bind_reset forgets the workspace");
  int64_t xd0[2] = {0, 5};
  kiln_bind_tensor(b, "x", FAKE, 2, xd0, NULL, KILN_DTYPE_FP32);
  kiln_bind_tensor(b, "y", FAKE, 2, xd0, NULL, KILN_DTYPE_FP32);
  OK(kiln_bind_check(pw, b) == KILN_OK && kiln_plan_workspace_size(pw, b, &n) == KILN_OK && n == 0,
     "M = 0: workspace size 0, none needed");
  kiln_bind_destroy(b);
  kiln_bind_create(pn, &b);
  int64_t ad[1] = {64};
  kiln_bind_tensor(b, "a", FAKE, 1, ad, NULL, KILN_DTYPE_FP32);
  OK(kiln_bind_check(pn, b) == KILN_OK, "a plan without a workspace needs none");
  kiln_bind_workspace(b, FAKE + 8, 8);
  OK(kiln_bind_check(pn, b) == KILN_OK, "... and ignores one bound anyway");
  kiln_bind_destroy(b);

  /* positional launch */
  const kiln_devptr ptrs[2] = {FAKE, FAKE};
  const int64_t dims[2] = {7, 5};
  st = kiln_launch_args(pw, NULL, ptrs, NULL, dims, 0);
  OK(st == KILN_ERR_UNBOUND, "positional launch without a workspace -> UNBOUND (%s)",
     kiln_rt_errmsg(rt));
  st = kiln_launch_args(pw, NULL, ptrs, NULL, dims, FAKE + 64);
  OK(st == KILN_ERR_ALIGN, "positional launch with a misaligned workspace -> ALIGN (%s)",
     kiln_rt_errmsg(rt));
  st = kiln_launch_args(pw, NULL, ptrs, NULL, dims, FAKE);
  OK(st != KILN_ERR_UNBOUND && st != KILN_ERR_ALIGN && st != KILN_ERR_INVALID_ARG,
     "positional launch with a workspace gets past the checks (%s)", kiln_errstr(st));
  const int64_t dims0[2] = {0, 5};
  st = kiln_launch_args(pw, NULL, ptrs, NULL, dims0, 0);
  OK(st != KILN_ERR_UNBOUND, "positional launch with M = 0 needs no workspace (%s)",
     kiln_errstr(st));
  kiln_pack_close(pack);

  /* reader: workspace params are bounds-checked (hand-crafted behind a valid checksum) */
  unsigned char *p = malloc(size);
  memcpy(p, bytes, size);
  long at = find_param(p, size, KILN__PARAM_WORKSPACE, 768);
  OK(at > 0, "ws_fixed's workspace param found in the pack");
  if (at > 0) {
    p[at + 1] = 0x00, p[at + 2] = 0x04; /* 768 -> 1024, past the 1024-byte workspace */
    fix_checksum(p, size);
    st = open_bytes(rt, p, size);
    OK(st == KILN_ERR_PACK && strstr(kiln_rt_errmsg(rt), "ws_fixed"),
       "workspace offset past a literal workspace -> KILN_ERR_PACK (%s)", kiln_rt_errmsg(rt));
    memcpy(p, bytes, size);
    p[at + 8] = 0x80; /* negative offset */
    fix_checksum(p, size);
    st = open_bytes(rt, p, size);
    OK(st == KILN_ERR_PACK, "negative workspace offset -> KILN_ERR_PACK (%s)", kiln_rt_errmsg(rt));
  }
  double d = 1234.5;
  int64_t bits;
  memcpy(&bits, &d, sizeof bits);
  memcpy(p, bytes, size);
  at = find_param(p, size, KILN__PARAM_F32, bits);
  OK(at > 0, "no_ws's constant param found in the pack");
  if (at > 0) {
    p[at] = KILN__PARAM_WORKSPACE;
    p[at + 1] = p[at + 2] = p[at + 3] = p[at + 4] = p[at + 5] = p[at + 6] = p[at + 7] = 0;
    p[at + 8] = 0;
    fix_checksum(p, size);
    st = open_bytes(rt, p, size);
    OK(st == KILN_ERR_PACK && strstr(kiln_rt_errmsg(rt), "no_ws"),
       "workspace param in a plan without a workspace -> KILN_ERR_PACK (%s)", kiln_rt_errmsg(rt));
  }
  free(p);
  test_corruption(rt, bytes, size);

  /* inspect */
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  int rc = kiln_pack_inspect(path, out, &e);
  fclose(out);
  OK(rc == 0 && strstr(text, "workspace: ceil(M*100/3) (bytes; each part rounded up to a multiple of 256)") &&
         strstr(text, "workspace: 1000 (bytes") && strstr(text, "workspace: none"),
     "kiln pack inspect prints the workspace rules");
  if (rc == 0 && getenv("KILN_TEST_VERBOSE")) fputs(text, stdout);
  free(text);

  /* emit-c: a workspace parameter only where needed, a size helper, all compiled and run */
  char dir[1024], cmd[16384];
  snprintf(dir, sizeof dir, "%s/wsgen", tmp);
  e = (kiln_err){0};
  OK(kiln_emit_c(dir, "wspack", bytes, size, &e) == 0, "emit-c writes C for workspace plans (%s)",
     e.msg);
  snprintf(cmd, sizeof cmd, "%s/wspack.h", dir);
  char *h = slurp(cmd);
  OK(h &&
         strstr(h,
                "kiln_status ws_plan_launch(kiln_pack *pack, struct CUstream_st *stream,\n"
                "    kiln_devptr x,\n    kiln_devptr y,\n    int64_t M,\n    int64_t N,\n"
                "    kiln_devptr workspace);") &&
         strstr(h,
                "kiln_status ws_plan_workspace_size(kiln_pack *pack,\n    int64_t M,\n"
                "    int64_t N,\n    size_t *workspace_bytes);") &&
         strstr(h,
                "kiln_status ws_fixed_launch(kiln_pack *pack, struct CUstream_st *stream,\n"
                "    kiln_devptr workspace_,\n    kiln_devptr workspace);") &&
         strstr(h,
                "kiln_status no_ws_launch(kiln_pack *pack, struct CUstream_st *stream,\n"
                "    kiln_devptr a);") &&
         !strstr(h, "no_ws_workspace_size"),
     "emit-c signatures: workspace last and only where needed, a tensor named workspace renamed");
  if (!h || getenv("KILN_TEST_VERBOSE")) fputs(h ? h : "(no header)\n", stdout);
  free(h);
  snprintf(cmd, sizeof cmd, "%s/main.c", dir);
  FILE *f = fopen(cmd, "w");
  fputs(
      "#include <stdio.h>\n"
      "#include \"wspack.h\"\n"
      "int main(void) {\n"
      "  kiln_rt *rt;\n"
      "  kiln_pack *pack;\n"
      "  size_t n = 0, n0 = 1;\n"
      "  if (kiln_rt_create(&rt) || wspack_load(rt, &pack)) return 1;\n"
      "  kiln_status a = ws_plan_workspace_size(pack, 1000, 5, &n);\n"
      "  kiln_status b = ws_fixed_workspace_size(pack, &n0);\n"
      "  kiln_status c = ws_plan_launch(pack, NULL, 0x10000, 0x10000, 7, 5, 0);\n"
      "  kiln_status d = ws_fixed_launch(pack, NULL, 0x10000, 0x10080);\n"
      "  printf(\"%d %zu %d %zu %d %d\\n\", (int)a, n, (int)b, n0, (int)c, (int)d);\n"
      "  kiln_rt_destroy(rt);\n"
      "  return 0;\n"
      "}\n",
      f);
  fclose(f);
  if (system("gcc --version >/dev/null 2>&1") != 0) {
    printf("ok %d - # SKIP no gcc to compile the generated C\n", ++tap_n);
    free(bytes);
    return;
  }
  snprintf(cmd, sizeof cmd,
           "gcc -std=c11 -Wall -Wextra -Werror %s -Iruntime -o %s/main %s/main.c %s/wspack.c "
           "build/libkilnrt.a -ldl -lpthread && %s/main > %s/main.out",
           KILN_SAN_FLAGS, dir, dir, dir, dir, dir);
  int built = system(cmd) == 0;
  snprintf(cmd, sizeof cmd, "%s/main.out", dir);
  char *res = built ? slurp(cmd) : NULL;
  if (res && strchr(res, '\n')) *strchr(res, '\n') = '\0';
  char want[64];
  snprintf(want, sizeof want, "0 33536 0 1024 %d %d", KILN_ERR_UNBOUND, KILN_ERR_ALIGN);
  OK(res && strcmp(res, want) == 0,
     "generated C compiles, links and runs: sizes, unbound and misaligned workspace (%s)",
     res ? res : "no output");
  free(res);
  free(bytes);
}

/* Tensor-map params and per-image shared memory and clusters (a GEMM plan's sm_90a kernel
 * runs a deeper pipeline in clusters; its sm_80 image launches with less and none). */
static const char *manifest_tmap =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"mm\", \"dynamic\": [\"M\"],"
    " \"tensors\": [{\"uid\": 1, \"name\": \"a\", \"dtype\": \"bf16\", \"dims\": [\"M\", 64],"
    "   \"role\": \"input\", \"align\": 16}],"
    " \"kernels\": [{\"symbol\": \"kiln_mm_0\", \"block\": [384], \"grid\": [1, 2],"
    "   \"smem\": 1000, \"by_arch\": {\"sm_90a\": {\"smem\": 200000, \"cluster\": [1, 2, 1]}},"
    "   \"params\": [{\"kind\": \"tensor\", \"uid\": 1}, {\"kind\": \"tmap\", \"uid\": 1,"
    "     \"dims\": [{\"axis\": 1, \"box\": BOX}, {\"axis\": 0, \"box\": 128}], \"swizzle\": 3}]}]}";

static void test_tmap(kiln_rt *rt) {
  const char *archs[] = {"sm_80", "sm_90a"};
  kiln_blob im[2] = {fake_cubin(cubins[0], 128, "mm sm_80"), fake_cubin(cubins[1], 128, "mm sm_90a")};
  char text[2048];
  for (int box = 64; box <= 512; box *= 2) {
    /* bf16: a 64-element box is 128 bytes, the 128-byte swizzle's span; 128 is too wide; 512
     * is past the 256 a box dim may have */
    const char *at = strstr(manifest_tmap, "BOX");
    snprintf(text, sizeof text, "%.*s%d%s", (int)(at - manifest_tmap), manifest_tmap, box, at + 3);
    kiln_err e = {0};
    kiln_pack_writer *w = kiln_pack_writer_new();
    void *bytes = NULL;
    size_t size = 0;
    int wrote = kiln_pack_writer_add_plan(w, text, archs, 2, im, &e) == 0 &&
                kiln_pack_writer_to_memory(w, &bytes, &size, &e) == 0;
    kiln_pack_writer_free(w);
    if (box == 512) {
      OK(!wrote && strstr(e.msg, "box"), "a 512-wide tensor-map box is refused by the writer (%s)", e.msg);
      continue;
    }
    kiln_pack *pack = NULL;
    kiln_status st = wrote ? kiln_pack_open_memory(rt, bytes, size, &pack) : KILN_ERR_PACK;
    if (box == 128 || box == 256) {
      OK(st == KILN_ERR_PACK && strstr(kiln_rt_errmsg(rt), "swizzle"),
         "a %d-byte inner box under the 128-byte swizzle is refused by the reader (%s)", 2 * box,
         kiln_rt_errmsg(rt));
    } else {
      kiln_plan *p = NULL;
      kiln_kernel_info k;
      OK(st == KILN_OK && kiln_plan_get(pack, "mm", NULL, &p) == KILN_OK &&
             kiln_plan_kernel(p, 0, &k) == KILN_OK && k.nparams == 2 && k.smem == 200000 &&
             k.cluster[0] == 1 && k.cluster[1] == 2 && k.cluster[2] == 1 && k.nimages == 2,
         "tensor-map param and per-image launch read back: kernel smem 200000 (largest), cluster "
         "[1, 2, 1] (%s)", kiln_rt_errmsg(rt));
      OK(find_param(bytes, size, KILN__PARAM_TMAP, 0) > 0, "the pack holds a tensor-map param");
      if (pack) kiln_pack_close(pack);
    }
    free(bytes);
  }
}

/* Scratch tensors (virtual tensors two kernels exchange): the workspace holds the kernels' own
 * bytes (8 per M), then s1 (fp32 [M, 3]) and s2 (bf16 [5]), each at a 256-byte boundary. */
static const char *manifest_scratch =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"scr\", \"dynamic\": [\"M\"],"
    " \"workspace\": {\"mul\": [\"M\", 8]},"
    " \"tensors\": ["
    "  {\"uid\": 1, \"name\": \"x\", \"dtype\": \"fp32\", \"dims\": [\"M\", 3], \"role\": \"input\"},"
    "  {\"uid\": 2, \"name\": \"s1\", \"dtype\": \"fp32\", \"dims\": [\"M\", 3], \"role\": \"scratch\"},"
    "  {\"uid\": 3, \"name\": \"s2\", \"dtype\": \"bf16\", \"dims\": [5], \"role\": \"scratch\"},"
    "  {\"uid\": 4, \"name\": \"y\", \"dtype\": \"fp32\", \"dims\": [\"M\", 3], \"role\": \"output\"}],"
    " \"kernels\": ["
    "  {\"symbol\": \"kiln_scr_0\", \"block\": [64], \"grid\": [1], \"params\": [{\"kind\": "
    "\"tensor\", \"uid\": 1}, {\"kind\": \"tensor\", \"uid\": 2}, {\"kind\": \"tensor\", \"uid\": 3}]},"
    "  {\"symbol\": \"kiln_scr_1\", \"block\": [64], \"grid\": [1], \"params\": [{\"kind\": "
    "\"tensor\", \"uid\": 2}, {\"kind\": \"workspace\", \"offset\": 0}, {\"kind\": \"tensor\", "
    "\"uid\": 4}]}]}";

/* Scratch tensors that share bytes: a (kernels 0-1), b (1-2), c (2-3) of 256 bytes each; c
 * may take a's bytes unless kernel 2 starts early (pdl) while kernel 1 may still read a. */
static const char *manifest_reuse =
    "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"GRAPH\", \"dynamic\": [\"M\"], \"workspace\": 0,"
    " \"tensors\": ["
    "  {\"uid\": 1, \"name\": \"a\", \"dtype\": \"fp32\", \"dims\": [\"M\"], \"role\": \"scratch\"},"
    "  {\"uid\": 2, \"name\": \"b\", \"dtype\": \"fp32\", \"dims\": [\"M\"], \"role\": \"scratch\"},"
    "  {\"uid\": 3, \"name\": \"c\", \"dtype\": \"fp32\", \"dims\": [\"M\"], \"role\": \"scratch\"}],"
    " \"kernels\": ["
    "  {\"symbol\": \"k0\", \"block\": [32], \"grid\": [1], \"params\": [{\"kind\": \"tensor\", \"uid\": 1}]},"
    "  {\"symbol\": \"k1\", \"block\": [32], \"grid\": [1], \"params\": [{\"kind\": \"tensor\", \"uid\": 1},"
    "   {\"kind\": \"tensor\", \"uid\": 2}]},"
    "  {\"symbol\": \"k2\", \"block\": [32], \"grid\": [1], \"pdl\": PDL, \"params\": [{\"kind\": \"tensor\", \"uid\": 2},"
    "   {\"kind\": \"tensor\", \"uid\": 3}]},"
    "  {\"symbol\": \"k3\", \"block\": [32], \"grid\": [1], \"params\": [{\"kind\": \"tensor\", \"uid\": 3}]}]}";

static void test_scratch_reuse(kiln_rt *rt) {
  const char *archs[] = {"sm_90a"};
  unsigned char cub[4][128];
  kiln_blob im[4] = {fake_cubin(cub[0], 128, "r0"), fake_cubin(cub[1], 128, "r1"),
                     fake_cubin(cub[2], 128, "r2"), fake_cubin(cub[3], 128, "r3")};
  for (int pdl = 0; pdl < 2; pdl++) {
    char text[2048], *at;
    snprintf(text, sizeof text, "%s", manifest_reuse);
    at = strstr(text, "GRAPH");
    memcpy(at, pdl ? "reuP_" : "reuse", 5);
    at = strstr(text, "PDL");
    memmove(at + 5, at + 3, strlen(at + 3) + 1);
    memcpy(at, pdl ? "true " : "false", 5);
    kiln_err e = {0};
    kiln_pack_writer *w = kiln_pack_writer_new();
    void *bytes = NULL;
    size_t size = 0;
    int wrote = kiln_pack_writer_add_plan(w, text, archs, 1, im, &e) == 0 &&
                kiln_pack_writer_to_memory(w, &bytes, &size, &e) == 0;
    kiln_pack_writer_free(w);
    kiln_pack *pack = NULL;
    kiln_plan *p = NULL;
    int64_t off[KILN_PACK_MAX_SCRATCH] = {0}, total = 0;
    int ok = wrote && kiln_pack_open_memory(rt, bytes, size, &pack) == KILN_OK &&
             kiln_plan_get(pack, pdl ? "reuP_" : "reuse", "", &p) == KILN_OK &&
             kiln__workspace_eval(p, (const int64_t[]){64}, 132, off, &total) == 0;
    if (!pdl)
      OK(ok && off[0] == 0 && off[1] == 256 && off[2] == 0 && total == 512,
         "c takes a's bytes once a's last kernel is done: 512 bytes for three 256-byte tensors "
         "(%lld %lld %lld, %lld; %s)", (long long)off[0], (long long)off[1], (long long)off[2],
         (long long)total, e.msg);
    else
      OK(ok && off[0] == 0 && off[1] == 256 && off[2] == 512 && total == 768,
         "but not when c's first kernel starts early (pdl) beside a's last (%lld %lld %lld, %lld)",
         (long long)off[0], (long long)off[1], (long long)off[2], (long long)total);
    if (pack) kiln_pack_close(pack);
    free(bytes);
  }
}

static void test_scratch(kiln_rt *rt) {
  kiln_err e = {0};
  const char *archs[] = {"sm_90a"};
  unsigned char cub[2][128];
  kiln_blob im[2] = {fake_cubin(cub[0], 128, "scr 0"), fake_cubin(cub[1], 128, "scr 1")};
  kiln_pack_writer *w = kiln_pack_writer_new();
  OK(kiln_pack_writer_add_plan(w, manifest_scratch, archs, 1, im, &e) == 0,
     "writer takes a plan with scratch tensors (%s)", e.msg);
  const char *only = "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"only\", \"workspace\": 0,"
                     " \"tensors\": [{\"uid\": 1, \"name\": \"t\", \"dtype\": \"fp16\", \"dims\": [300],"
                     " \"role\": \"scratch\"}], \"kernels\": []}";
  OK(kiln_pack_writer_add_plan(w, only, archs, 0, NULL, &e) == 0,
     "and one whose workspace is its scratch alone (%s)", e.msg);
  const char *none = "{\"schema\": \"kiln.plan\", \"version\": 1, \"graph\": \"none\","
                     " \"tensors\": [{\"uid\": 1, \"name\": \"t\", \"dtype\": \"fp16\", \"dims\": [3],"
                     " \"role\": \"scratch\"}], \"kernels\": []}";
  OK(kiln_pack_writer_add_plan(w, none, archs, 0, NULL, &e) == -1 && strstr(e.msg, "scratch tensors need"),
     "scratch tensors without a workspace rule -> E_PACK (%s)", e.msg);
  void *bytes;
  size_t size;
  OK(kiln_pack_writer_to_memory(w, &bytes, &size, &e) == 0, "scratch pack written");
  kiln_pack_writer_free(w);
  kiln_pack *pack;
  kiln_status st = kiln_pack_open_memory(rt, bytes, size, &pack);
  OK(st == KILN_OK, "scratch pack opens (%s)", kiln_rt_errmsg(rt));
  if (st != KILN_OK) {
    free(bytes);
    return;
  }
  kiln_plan *p, *po;
  kiln_plan_info info, io;
  kiln_tensor_info ti;
  kiln_plan_get(pack, "scr", "", &p);
  kiln_plan_get(pack, "only", "", &po);
  kiln_plan_info_get(p, &info);
  kiln_plan_info_get(po, &io);
  OK(info.workspace && strcmp(info.workspace, "M*8 + scratch s1, s2") == 0 && io.workspace &&
         strcmp(io.workspace, "scratch t") == 0,
     "the workspace text names the scratch tensors (%s; %s)", info.workspace, io.workspace);
  OK(kiln_plan_tensor(p, 1, &ti) == KILN_OK && ti.role == KILN_ROLE_SCRATCH &&
         strcmp(kiln_role_name(ti.role), "scratch") == 0 && p->nscratch == 2 &&
         p->tensors[1].scratch == 0 && p->tensors[2].scratch == 1 && p->tensors[0].scratch == -1,
     "scratch tensors read back in plan order");
  int64_t off[KILN_PACK_MAX_SCRATCH], total;
  OK(kiln__workspace_eval(p, (const int64_t[]){100}, 132, off, &total) == 0 && off[0] == 1024 &&
         off[1] == 2304 && total == 2560,
     "M = 100: the rule's 800 -> 1024 bytes, s1 1200 -> 1280 at 1024, s2 10 -> 256 at 2304: 2560 "
     "(%lld %lld %lld)", (long long)off[0], (long long)off[1], (long long)total);
  OK(kiln__workspace_eval(p, (const int64_t[]){0}, 132, off, &total) == 0 && off[0] == 0 &&
         off[1] == 0 && total == 256,
     "M = 0: an empty scratch tensor takes no bytes (%lld %lld %lld)", (long long)off[0],
     (long long)off[1], (long long)total);
  size_t n = 0;
  OK(kiln_plan_workspace_size(po, NULL, &n) == KILN_OK && n == 768,
     "scratch alone: 600 bytes -> 768 without a binding (%zu)", n);
  kiln_bind *b;
  kiln_bind_create(p, &b);
  st = kiln_bind_tensor(b, "s1", FAKE, 2, (const int64_t[]){4, 3}, NULL, KILN_DTYPE_FP32);
  OK(st == KILN_ERR_INVALID_ARG && strstr(kiln_rt_errmsg(rt), "scratch"),
     "binding a scratch tensor -> INVALID_ARG (%s)", kiln_rt_errmsg(rt));
  st = kiln_plan_workspace_size(p, b, &n);
  OK(st == KILN_ERR_UNBOUND && strstr(kiln_rt_errmsg(rt), "dynamic dim M"),
     "its size with M unknown -> UNBOUND (%s)", kiln_rt_errmsg(rt));
  kiln_bind_tensor(b, "x", FAKE, 2, (const int64_t[]){100, 3}, NULL, KILN_DTYPE_FP32);
  OK(kiln_plan_workspace_size(p, b, &n) == KILN_OK && n == 2560, "M from x: 2560 bytes (%zu)", n);
  kiln_bind_tensor(b, "y", FAKE * 2, 2, (const int64_t[]){100, 3}, NULL, KILN_DTYPE_FP32);
  st = kiln_bind_check(p, b);
  OK(st == KILN_ERR_UNBOUND && strstr(kiln_rt_errmsg(rt), "2560"),
     "scratch tensors are not bound, the workspace is: none -> UNBOUND (%s)", kiln_rt_errmsg(rt));
  kiln_bind_workspace(b, FAKE * 4, 2304);
  st = kiln_bind_check(p, b);
  OK(st == KILN_ERR_INVALID_ARG && strstr(kiln_rt_errmsg(rt), "2560"),
     "a workspace without room for s2 -> INVALID_ARG (%s)", kiln_rt_errmsg(rt));
  kiln_bind_workspace(b, FAKE * 4, 2560);
  OK(kiln_bind_check(p, b) == KILN_OK, "x, y and the workspace bound: the binding checks (%s)",
     kiln_rt_errmsg(rt));
  kiln_bind_destroy(b);
  kiln_pack_close(pack);
  free(bytes);
}

static void test_emit_c(const void *bytes, size_t size, const char *tmp) {
  kiln_err e = {0};
  char dir[4096], cmd[16384];
  snprintf(dir, sizeof dir, "%s/gen", tmp);
  OK(kiln_emit_c(dir, "testpack", bytes, size, &e) == 0, "emit-c writes C (%s)", e.msg);
  OK(kiln_emit_c(dir, "1bad-name", bytes, size, &e) == -1,
     "emit-c rejects a name that is no identifier");
  snprintf(cmd, sizeof cmd, "%s/use.c", dir);
  FILE *f = fopen(cmd, "w");
  fputs(
      "#include \"testpack.h\"\n"
      "kiln_status use(kiln_rt *rt, struct CUstream_st *s);\n"
      "kiln_status use(kiln_rt *rt, struct CUstream_st *s) {\n"
      "  kiln_pack *pack;\n"
      "  kiln_status st = testpack_load(rt, &pack);\n"
      "  if (st != KILN_OK) return st;\n"
      "  st = bias_gelu_H_4096_W_8_launch(pack, s, 1, 2, 0.5, 3, (int64_t)7);\n"
      "  if (st == KILN_OK) st = add2d_launch(pack, s, 1, 2, 3, (int64_t)4, (int64_t)256);\n"
      "  kiln_pack_close(pack);\n"
      "  return st;\n"
      "}\n",
      f);
  fclose(f);
  if (system("gcc --version >/dev/null 2>&1") != 0) {
    printf("ok %d - # SKIP no gcc to compile the generated C\n", ++tap_n);
    return;
  }
  snprintf(cmd, sizeof cmd,
           "gcc -std=c11 -Wall -Wextra -Werror -Iruntime -c -o %s/testpack.o %s/testpack.c && "
           "gcc -std=c11 -Wall -Wextra -Werror -Iruntime -fsyntax-only %s/use.c",
           dir, dir, dir);
  OK(system(cmd) == 0, "generated C compiles with -Wall -Wextra -Werror; typed wrappers match");
}

int main(void) {
  kiln_err e = {0};
  char tmp[] = "/tmp/kiln-test-pack.XXXXXX";
  if (!mkdtemp(tmp)) return TAP_SKIP_ALL("cannot create a temporary directory");

  kiln_pack_writer *w = make_writer(&e);
  OK(w != NULL, "writer takes two plans (%s)", e.msg);
  if (!w) return TAP_PLAN(tap_n), 1;
  void *bytes, *again;
  size_t size, size2;
  OK(kiln_pack_writer_to_memory(w, &bytes, &size, &e) == 0, "pack written to memory (%zu bytes)",
     size);
  kiln_pack_writer *w2 = make_writer(&e);
  kiln_pack_writer_to_memory(w2, &again, &size2, &e);
  OK(size == size2 && memcmp(bytes, again, size) == 0, "output is deterministic");
  free(again);
  kiln_pack_writer_free(w2);
  char path[4096];
  snprintf(path, sizeof path, "%s/test.kpack", tmp);
  OK(kiln_pack_writer_write(w, path, &e) == 0, "pack written to %s (%s)", path, e.msg);
  kiln_pack_writer_free(w);

  kiln_rt *rt;
  OK(kiln_rt_create(&rt) == KILN_OK, "runtime created without touching the driver");
  kiln_pack *from_file, *pack;
  kiln_status st = kiln_pack_open(rt, path, &from_file);
  OK(st == KILN_OK, "kiln_pack_open reads the file (%s)", kiln_rt_errmsg(rt));
  st = kiln_pack_open(rt, "/nonexistent/x.kpack", &pack);
  OK(st == KILN_ERR_IO && strstr(kiln_rt_errmsg(rt), "nonexistent"), "missing file -> IO (%s)",
     kiln_rt_errmsg(rt));
  OK(kiln_pack_open_memory(rt, bytes, size, &pack) == KILN_OK, "kiln_pack_open_memory");

  test_plans(rt, pack);
  test_binding(rt, pack);
  test_corruption(rt, bytes, size);
  test_writer_errors();
  test_inspect(path, bytes, size, tmp);
  test_emit_c(bytes, size, tmp);
  test_workspace(rt, tmp);
  test_scratch(rt);
  test_scratch_reuse(rt);
  test_tmap(rt);

  OK(strcmp(kiln_errstr(KILN_ERR_PACK), kiln_errstr(KILN_ERR_ALIGN)) != 0 &&
         kiln_dtype_from_name("bf16") == KILN_DTYPE_BF16 &&
         kiln_dtype_size(KILN_DTYPE_INT64) == 8 && kiln_dtype_name((kiln_dtype)42) == NULL,
     "status texts and dtype names");
  kiln_pack_close(pack);
  kiln_rt_destroy(rt); /* closes from_file too */
  (void)from_file;
  free(bytes);
  if (getenv("KILN_TEST_KEEP")) {
    printf("# kept %s\n", tmp);
    TAP_PLAN(tap_n);
    return TAP_DONE();
  }
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) DIAG("could not remove %s", tmp);
  TAP_PLAN(tap_n);
  return TAP_DONE();
}
