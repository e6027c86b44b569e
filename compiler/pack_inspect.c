/* kiln compiler: human-readable listing and verification of pack files. */
#include "pack_inspect.h"

#include <inttypes.h>
#include <jansson.h>
#include <string.h>

const char *kiln_status_code(kiln_status status) {
  switch (status) {
  case KILN_OK: return "OK";
  case KILN_ERR_INVALID_ARG: return "E_USAGE";
  case KILN_ERR_NOMEM:
  case KILN_ERR_IO: return "E_IO";
  case KILN_ERR_PACK:
  case KILN_ERR_NO_CUBIN: return "E_PACK";
  case KILN_ERR_NO_DRIVER:
  case KILN_ERR_CUDA: return "E_CUDA";
  case KILN_ERR_NOT_FOUND:
  case KILN_ERR_UNBOUND: return "E_PORT";
  case KILN_ERR_SHAPE:
  case KILN_ERR_STRIDE:
  case KILN_ERR_ALIGN: return "E_SHAPE";
  case KILN_ERR_DTYPE: return "E_DTYPE";
  }
  return "E_PACK";
}

/* Opens path through the runtime; on failure fills e with the runtime's detail. */
static int open_pack(const char *path, kiln_rt **rt, kiln_pack **pack, kiln_err *e) {
  kiln_status st = kiln_rt_create(rt);
  if (st != KILN_OK) return kiln_err_set(e, kiln_status_code(st), "%s", kiln_errstr(st));
  st = kiln_pack_open(*rt, path, pack);
  if (st != KILN_OK) {
    kiln_err_set(e, kiln_status_code(st), "%s", kiln_rt_errmsg(*rt));
    kiln_rt_destroy(*rt);
    return -1;
  }
  return 0;
}

static void print_dims(FILE *out, const kiln_tensor_info *t, int strides) {
  fputc('[', out);
  for (int i = 0; i < t->ndim; i++) {
    if (i) fputs(", ", out);
    if (strides) {
      if (t->stride_exprs[i])
        fputs(t->stride_exprs[i], out);
      else
        fprintf(out, "%" PRId64, t->strides[i]);
    } else if (t->dim_names[i]) {
      fputs(t->dim_names[i], out);
    } else {
      fprintf(out, "%" PRId64, t->dims[i]);
    }
  }
  fputc(']', out);
}

typedef struct arch_total {
  const char *arch;
  int images;
  uint64_t bytes;
} arch_total;

int kiln_pack_inspect(const char *path, FILE *out, kiln_err *e) {
  kiln_rt *rt;
  kiln_pack *pack;
  if (open_pack(path, &rt, &pack, e) != 0) return -1;
  kiln_pack_info pi;
  kiln_pack_info_get(pack, &pi);
  fprintf(out, "pack %s: format %u, %" PRIu64 " bytes, CRC-32C %08x, %d plan%s, %d image%s\n", path,
          pi.format_version, pi.size, pi.checksum, pi.nplans, pi.nplans == 1 ? "" : "s", pi.nimages,
          pi.nimages == 1 ? "" : "s");
  arch_total totals[64];
  int ntotals = 0;
  for (int p = 0; p < pi.nplans; p++) {
    kiln_plan *plan;
    kiln_plan_info info;
    kiln_pack_plan_at(pack, p, &plan);
    kiln_plan_info_get(plan, &info);
    fprintf(out, "\nplan %s%s%s%s\n", info.graph, info.instance[0] ? " [" : "", info.instance,
            info.instance[0] ? "]" : "");
    fputs("  dynamic dims:", out);
    for (int d = 0; d < info.ndims; d++) {
      const char *name;
      kiln_plan_dim(plan, d, &name);
      fprintf(out, " %s", name);
    }
    fputs(info.ndims ? "\n" : " none\n", out);
    fputs("  specialized:", out);
    for (int d = 0; d < info.nspecialized; d++) {
      const char *name;
      int64_t value;
      kiln_plan_specialized(plan, d, &name, &value);
      fprintf(out, " %s=%" PRId64, name, value);
    }
    fputs(info.nspecialized ? "\n" : " none\n", out);
    if (info.workspace)
      fprintf(out, "  workspace: %s (bytes; each part rounded up to a multiple of 256)\n", info.workspace);
    else
      fputs("  workspace: none\n", out);
    fprintf(out, "  tensors (%d):\n", info.ntensors);
    for (int i = 0; i < info.ntensors; i++) {
      kiln_tensor_info t;
      kiln_plan_tensor(plan, i, &t);
      fprintf(out, "    uid %-4" PRId64 " %-16s %-8s %-8s ", t.uid, t.name,
              kiln_dtype_name(t.dtype), kiln_role_name(t.role));
      print_dims(out, &t, 0);
      fputs(" strides ", out);
      print_dims(out, &t, 1);
      fprintf(out, " align %u", t.align);
      if (t.role == KILN_ROLE_CONSTANT) fprintf(out, " value %g", t.value);
      fputc('\n', out);
    }
    fprintf(out, "  kernels (%d):\n", info.nkernels);
    for (int k = 0; k < info.nkernels; k++) {
      kiln_kernel_info ki;
      kiln_plan_kernel(plan, k, &ki);
      fprintf(out, "    %s  engine %s  plan %s\n", ki.symbol, ki.engine[0] ? ki.engine : "-",
              ki.plan_id[0] ? ki.plan_id : "-");
      fprintf(out,
              "      block [%u, %u, %u]  grid [%s, %s, %s]  cluster [%u, %u, %u]  smem %u"
              "  params %d%s\n",
              ki.block[0], ki.block[1], ki.block[2], ki.grid[0], ki.grid[1], ki.grid[2],
              ki.cluster[0], ki.cluster[1], ki.cluster[2], ki.smem, ki.nparams,
              (ki.pdl & 2) ? "  pdl-entry" : (ki.pdl & 1) ? "  pdl" : "");
      fputs("      images:", out);
      for (int m = 0; m < ki.nimages; m++) {
        const char *arch;
        size_t size;
        kiln_plan_kernel_image(plan, k, m, &arch, NULL, &size);
        fprintf(out, "%s %s %zu bytes", m ? "," : "", arch, size);
        int a = 0;
        while (a < ntotals && strcmp(totals[a].arch, arch) != 0) a++;
        if (a == ntotals && ntotals < 64) totals[ntotals++] = (arch_total){arch, 0, 0};
        if (a < ntotals) {
          totals[a].images++;
          totals[a].bytes += size;
        }
      }
      fputc('\n', out);
    }
    fprintf(out, "  graph JSON: %zu bytes\n", strlen(info.graph_json));
  }
  fputs("\narchs:", out);
  for (int a = 0; a < ntotals; a++)
    fprintf(out, "%s %s (%d kernel image%s, %" PRIu64 " bytes)", a ? "," : "", totals[a].arch,
            totals[a].images, totals[a].images == 1 ? "" : "s", totals[a].bytes);
  fputs(ntotals ? "\n" : " none\n", out);
  kiln_rt_destroy(rt);
  return 0;
}

/* Does the image look like code for its arch? NULL when it does, else why not. */
static const char *check_image(const char *arch, const unsigned char *p, size_t n) {
  if (strncmp(arch, "compute_", 8) == 0) {
    size_t len = strnlen((const char *)p, n);
    if (!memmem(p, len, ".version", 8) || !memmem(p, len, ".target", 7))
      return "PTX image lacks .version/.target";
    return NULL;
  }
  if (n < 64 || memcmp(p,
                       "\x7f"
                       "ELF",
                       4) != 0)
    return "cubin is not an ELF file";
  if (p[4] != 2 || p[5] != 1) return "cubin is not a 64-bit little-endian ELF";
  if ((p[18] | p[19] << 8) != 190) return "cubin ELF machine is not EM_CUDA (190)";
  return NULL;
}

int kiln_pack_verify(const char *path, FILE *out, kiln_err *e) {
  kiln_rt *rt;
  kiln_pack *pack;
  if (open_pack(path, &rt, &pack, e) != 0) {
    fprintf(out, "FAIL %s: %s\n", path, e ? e->msg : "cannot open");
    return -1;
  }
  kiln_pack_info pi;
  kiln_pack_info_get(pack, &pi);
  int problems = 0;
  char first[1024] = "";
  for (int p = 0; p < pi.nplans; p++) {
    kiln_plan *plan;
    kiln_plan_info info;
    kiln_pack_plan_at(pack, p, &plan);
    kiln_plan_info_get(plan, &info);
    char where[512];
    snprintf(where, sizeof where, "plan %s%s%s%s", info.graph, info.instance[0] ? " [" : "",
             info.instance, info.instance[0] ? "]" : "");
    if (info.graph_json[0]) {
      json_error_t jerr;
      json_t *g = json_loads(info.graph_json, 0, &jerr);
      if (!g) {
        fprintf(out, "FAIL %s: graph JSON does not parse: %s\n", where, jerr.text);
        if (!problems++) snprintf(first, sizeof first, "%s: graph JSON does not parse", where);
      }
      json_decref(g);
    }
    for (int k = 0; k < info.nkernels; k++) {
      kiln_kernel_info ki;
      kiln_plan_kernel(plan, k, &ki);
      for (int m = 0; m < ki.nimages; m++) {
        const char *arch;
        const void *data;
        size_t size;
        kiln_plan_kernel_image(plan, k, m, &arch, &data, &size);
        const char *why = check_image(arch, data, size);
        if (why) {
          fprintf(out, "FAIL %s: kernel %s %s: %s\n", where, ki.symbol, arch, why);
          if (!problems++)
            snprintf(first, sizeof first, "%s: kernel %s %s: %s", where, ki.symbol, arch, why);
        }
      }
    }
  }
  kiln_rt_destroy(rt);
  if (problems) {
    fprintf(out, "%s: %d problem%s\n", path, problems, problems == 1 ? "" : "s");
    return kiln_err_set(e, "E_PACK", "%s: %s%s", path, first, problems > 1 ? " (and more)" : "");
  }
  fprintf(out,
          "ok %s: format %u, %" PRIu64
          " bytes, CRC-32C %08x verified, %d plan%s, %d "
          "image%s\n",
          path, pi.format_version, pi.size, pi.checksum, pi.nplans, pi.nplans == 1 ? "" : "s",
          pi.nimages, pi.nimages == 1 ? "" : "s");
  return 0;
}
