/* kiln compiler: C source embedding a pack, with one typed launch wrapper per plan:
 *   kiln_status <graph>_<instance>_launch(kiln_pack *, struct CUstream_st *,
 *                                         kiln_devptr per input/output tensor,
 *                                         double per runtime scalar, int64_t per dynamic dim
 *                                         [, kiln_devptr workspace])
 * the workspace parameter only for plans that need one, which also get
 *   kiln_status <graph>_<instance>_workspace_size(kiln_pack *, int64_t per dynamic dim,
 *                                                 size_t *workspace_bytes)
 * Output is deterministic: same pack bytes, same files. */
#include "emit_c.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln.h"
#include "pack_inspect.h"

static int is_identifier(const char *s) {
  if (!s[0] || (s[0] >= '0' && s[0] <= '9')) return 0;
  for (; *s; s++)
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9')))
      return 0;
  return 1;
}

/* Names that cannot be parameters: keywords, common macros, the wrappers' own locals. */
static const char *const reserved[] = {"auto",       "break",     "case",        "char",
                                       "const",      "continue",  "default",     "do",
                                       "double",     "else",      "enum",        "extern",
                                       "float",      "for",       "goto",        "if",
                                       "inline",     "int",       "long",        "register",
                                       "restrict",   "return",    "short",       "signed",
                                       "sizeof",     "static",    "struct",      "switch",
                                       "typedef",    "union",     "unsigned",    "void",
                                       "volatile",   "while",     "bool",        "true",
                                       "false",      "NULL",      "errno",       "stdin",
                                       "stdout",     "stderr",    "assert",      "int64_t",
                                       "uint64_t",   "size_t",    "kiln_devptr", "kiln_status",
                                       "kiln_plan",  "kiln_pack", "pack",        "stream",
                                       "kiln_plan_", "kiln_st_",  "kiln_ptrs_",  "kiln_scalars_",
                                       "kiln_dims_", "kiln_bind", "kiln_bind_",  NULL};

/* "add_1.OUT_0" -> "add_1_OUT_0"; never empty, never starts with a digit. */
static void sanitize(const char *s, char *out, size_t size) {
  size_t n = 0;
  if (s[0] >= '0' && s[0] <= '9' && n + 2 < size) {
    out[n++] = 'k';
    out[n++] = '_';
  }
  for (; *s && n + 1 < size; s++) {
    int ok = *s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
             (*s >= '0' && *s <= '9');
    char c = ok ? *s : '_';
    if (c == '_' && n > 0 && out[n - 1] == '_') continue;
    out[n++] = c;
  }
  while (n > 1 && out[n - 1] == '_') n--;
  if (n == 0) out[n++] = 'x';
  out[n] = '\0';
}

typedef struct names {
  char (*v)[128];
  int n;
  const char *const *extra; /* more reserved names (NULL-terminated), or NULL */
} names;

/* A sanitized, unique, non-reserved identifier for s, remembered in used. */
static const char *unique_name(names *used, const char *s) {
  char *out = used->v[used->n];
  sanitize(s, out, 120);
  for (;;) {
    int clash = 0;
    for (int i = 0; reserved[i] && !clash; i++) clash = strcmp(reserved[i], out) == 0;
    for (int i = 0; used->extra && used->extra[i] && !clash; i++)
      clash = strcmp(used->extra[i], out) == 0;
    for (int i = 0; i < used->n && !clash; i++) clash = strcmp(used->v[i], out) == 0;
    if (!clash) break;
    size_t len = strlen(out);
    if (len + 1 >= 127)
      out[len - 1] = 'x';
    else
      strcat(out, "_");
  }
  return used->v[used->n++];
}

static void c_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 32 || c >= 127 || c == '?')
      fprintf(f, "\\%03o", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* Comment-safe copy of s (no "*\/" inside a comment). */
static void c_comment(FILE *f, const char *s) {
  for (; *s; s++) {
    if (s[0] == '*' && s[1] == '/')
      fputs("* /", f), s++;
    else if ((unsigned char)*s >= 32 && (unsigned char)*s < 127)
      fputc(*s, f);
    else
      fputc('?', f);
  }
}

typedef struct plan_sig {
  char fn[256];
  char ws_fn[256]; /* workspace size helper; "" when the plan needs no workspace */
  int nargs;       /* entries used in names */
  names args;
} plan_sig;

/* Parameter names of plans with a workspace: never taken by a tensor or dim. */
static const char *const workspace_names[] = {"workspace", "workspace_bytes", NULL};

/* Signature of a plan's wrapper: "kiln_status F(kiln_pack *pack, ...)". */
static void print_signature(FILE *f, kiln_plan *plan, const plan_sig *sig) {
  kiln_plan_info info;
  kiln_plan_info_get(plan, &info);
  fprintf(f, "kiln_status %s(kiln_pack *pack, struct CUstream_st *stream", sig->fn);
  int a = 0;
  for (int i = 0; i < info.ntensors; i++) {
    kiln_tensor_info t;
    kiln_plan_tensor(plan, i, &t);
    if (t.role == KILN_ROLE_INPUT || t.role == KILN_ROLE_OUTPUT)
      fprintf(f, ",\n    kiln_devptr %s", sig->args.v[a++]);
    else if (t.role == KILN_ROLE_SCALAR)
      fprintf(f, ",\n    double %s", sig->args.v[a++]);
  }
  for (int d = 0; d < info.ndims; d++) fprintf(f, ",\n    int64_t %s", sig->args.v[a++]);
  if (info.workspace) fputs(",\n    kiln_devptr workspace", f);
  fputc(')', f);
}

/* "kiln_status F(kiln_pack *pack, int64_t per dynamic dim, size_t *workspace_bytes)". */
static void print_ws_signature(FILE *f, kiln_plan *plan, const plan_sig *sig) {
  kiln_plan_info info;
  kiln_plan_info_get(plan, &info);
  fprintf(f, "kiln_status %s(kiln_pack *pack", sig->ws_fn);
  for (int d = 0; d < info.ndims; d++)
    fprintf(f, ",\n    int64_t %s", sig->args.v[sig->nargs - info.ndims + d]);
  fputs(",\n    size_t *workspace_bytes)", f);
}

static void plan_comment(FILE *f, kiln_plan *plan, const plan_sig *sig) {
  kiln_plan_info info;
  kiln_plan_info_get(plan, &info);
  fputs("/* Launches plan ", f);
  c_comment(f, info.graph);
  if (info.instance[0]) fputs(" [", f), c_comment(f, info.instance), fputs("]", f);
  fprintf(f, " (%d kernel%s) on stream. Tensors:\n", info.nkernels, info.nkernels == 1 ? "" : "s");
  for (int i = 0; i < info.ntensors; i++) {
    kiln_tensor_info t;
    kiln_plan_tensor(plan, i, &t);
    if (t.role == KILN_ROLE_VIRTUAL || t.role == KILN_ROLE_CONSTANT || t.role == KILN_ROLE_SCRATCH)
      continue;
    fputs(" *   ", f);
    c_comment(f, t.name);
    if (t.role == KILN_ROLE_SCALAR) {
      fprintf(f, ": runtime scalar, passed to the kernels as fp32\n");
      continue;
    }
    fprintf(f, ": %s %s [", kiln_role_name(t.role), kiln_dtype_name(t.dtype));
    for (int j = 0; j < t.ndim; j++) {
      if (j) fputs(", ", f);
      if (t.dim_names[j])
        c_comment(f, t.dim_names[j]);
      else
        fprintf(f, "%" PRId64, t.dims[j]);
    }
    fprintf(f, "], %u-byte aligned\n", t.align);
  }
  if (info.workspace) {
    fputs(" * and the workspace parameter: scratch device memory (", f);
    c_comment(f, info.workspace);
    fprintf(f,
            " bytes,\n"
            " *   each part a multiple of 256: %s gives it), 256-byte aligned, not zeroed;\n"
            " *   launches that may overlap need separate workspaces.\n",
            sig->ws_fn);
  }
  fputs(" * Returns KILN_ERR_ALIGN for a misaligned pointer, else as kiln_launch. */\n", f);
}

static int write_header(FILE *f, const char *name, kiln_pack *pack, plan_sig *sigs, int nplans) {
  char guard[160];
  sanitize(name, guard, sizeof guard);
  for (char *c = guard; *c; c++)
    if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 'a' + 'A');
  fprintf(f,
          "/* Generated by `kiln build --emit-c`: the kiln pack \"%s\". Do not edit. */\n"
          "#ifndef KILN_GENERATED_%s_H\n#define KILN_GENERATED_%s_H\n\n"
          "#include <stddef.h>\n#include <stdint.h>\n\n"
          "#if defined(__has_include)\n#if __has_include(<kiln/kiln.h>)\n"
          "#include <kiln/kiln.h>\n#else\n#include \"kiln.h\"\n#endif\n#else\n"
          "#include <kiln/kiln.h>\n#endif\n\n"
          "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
          "/* Opens the embedded pack (its bytes are not copied); kiln_pack_close it. */\n"
          "kiln_status %s_load(kiln_rt *rt, kiln_pack **out);\n",
          name, guard, guard, name);
  for (int p = 0; p < nplans; p++) {
    kiln_plan *plan;
    kiln_pack_plan_at(pack, p, &plan);
    fputc('\n', f);
    plan_comment(f, plan, &sigs[p]);
    print_signature(f, plan, &sigs[p]);
    fputs(";\n", f);
    if (sigs[p].ws_fn[0]) {
      fputs("/* Workspace bytes the plan needs for these dims (a multiple of 256). */\n", f);
      print_ws_signature(f, plan, &sigs[p]);
      fputs(";\n", f);
    }
  }
  fprintf(f, "\n#ifdef __cplusplus\n}\n#endif\n\n#endif\n");
  return 0;
}

static void write_bytes(FILE *f, const unsigned char *p, size_t n) {
  char line[24 * 5 + 8];
  for (size_t i = 0; i < n;) {
    size_t len = 0;
    for (int k = 0; k < 24 && i < n; k++, i++) {
      unsigned v = p[i];
      if (v >= 100) line[len++] = (char)('0' + v / 100);
      if (v >= 10) line[len++] = (char)('0' + v / 10 % 10);
      line[len++] = (char)('0' + v % 10);
      line[len++] = ',';
    }
    line[len++] = '\n';
    fwrite(line, 1, len, f);
  }
}

static int write_source(FILE *f, const char *name, kiln_pack *pack, const void *bytes, size_t size,
                        plan_sig *sigs, int nplans) {
  fprintf(f,
          "/* Generated by `kiln build --emit-c`: the kiln pack \"%s\" (%zu bytes). Do not "
          "edit. */\n#include \"%s.h\"\n\n"
          "static _Alignas(64) const unsigned char %s_pack[%zu] = {\n",
          name, size, name, name, size);
  write_bytes(f, bytes, size);
  fprintf(f,
          "};\n\nkiln_status %s_load(kiln_rt *rt, kiln_pack **out) {\n"
          "  return kiln_pack_open_memory(rt, %s_pack, sizeof %s_pack, out);\n}\n",
          name, name, name);
  for (int p = 0; p < nplans; p++) {
    kiln_plan *plan;
    kiln_plan_info info;
    kiln_pack_plan_at(pack, p, &plan);
    kiln_plan_info_get(plan, &info);
    const plan_sig *sig = &sigs[p];
    fputc('\n', f);
    print_signature(f, plan, sig);
    fputs(" {\n  kiln_plan *kiln_plan_;\n  kiln_status kiln_st_ = kiln_plan_get(pack, ", f);
    c_string(f, info.graph);
    fputs(", ", f);
    c_string(f, info.instance);
    fputs(", &kiln_plan_);\n  if (kiln_st_ != KILN_OK) return kiln_st_;\n", f);
    int has_scalar = 0, a = 0;
    if (info.ntensors) fprintf(f, "  const kiln_devptr kiln_ptrs_[%d] = {", info.ntensors);
    for (int i = 0; i < info.ntensors; i++) {
      kiln_tensor_info t;
      kiln_plan_tensor(plan, i, &t);
      int bound = t.role == KILN_ROLE_INPUT || t.role == KILN_ROLE_OUTPUT;
      has_scalar |= t.role == KILN_ROLE_SCALAR;
      fprintf(f, "%s%s", i ? ", " : "", bound ? sig->args.v[a] : "0");
      a += bound || t.role == KILN_ROLE_SCALAR;
    }
    if (info.ntensors) fputs("};\n", f);
    if (has_scalar) {
      fprintf(f, "  const double kiln_scalars_[%d] = {", info.ntensors);
      a = 0;
      for (int i = 0; i < info.ntensors; i++) {
        kiln_tensor_info t;
        kiln_plan_tensor(plan, i, &t);
        int scalar = t.role == KILN_ROLE_SCALAR;
        fprintf(f, "%s%s", i ? ", " : "", scalar ? sig->args.v[a] : "0");
        a += scalar || t.role == KILN_ROLE_INPUT || t.role == KILN_ROLE_OUTPUT;
      }
      fputs("};\n", f);
    }
    if (info.ndims) {
      fprintf(f, "  const int64_t kiln_dims_[%d] = {", info.ndims);
      for (int d = 0; d < info.ndims; d++)
        fprintf(f, "%s%s", d ? ", " : "", sig->args.v[sig->nargs - info.ndims + d]);
      fputs("};\n", f);
    }
    fprintf(f, "  return kiln_launch_args(kiln_plan_, stream, %s, %s, %s, %s);\n}\n",
            info.ntensors ? "kiln_ptrs_" : "NULL", has_scalar ? "kiln_scalars_" : "NULL",
            info.ndims ? "kiln_dims_" : "NULL", info.workspace ? "workspace" : "0");
    if (!sig->ws_fn[0]) continue;
    fputc('\n', f);
    print_ws_signature(f, plan, sig);
    fputs(
        " {\n  kiln_plan *kiln_plan_;\n  kiln_bind *kiln_bind_;\n"
        "  kiln_status kiln_st_ = kiln_plan_get(pack, ",
        f);
    c_string(f, info.graph);
    fputs(", ", f);
    c_string(f, info.instance);
    fputs(
        ", &kiln_plan_);\n  if (kiln_st_ != KILN_OK) return kiln_st_;\n"
        "  if ((kiln_st_ = kiln_bind_create(kiln_plan_, &kiln_bind_)) != KILN_OK) return "
        "kiln_st_;\n",
        f);
    for (int d = 0; d < info.ndims; d++) {
      const char *dn;
      kiln_plan_dim(plan, d, &dn);
      fputs("  if (kiln_st_ == KILN_OK) kiln_st_ = kiln_bind_dim(kiln_bind_, ", f);
      c_string(f, dn);
      fprintf(f, ", %s);\n", sig->args.v[sig->nargs - info.ndims + d]);
    }
    fputs(
        "  if (kiln_st_ == KILN_OK)\n"
        "    kiln_st_ = kiln_plan_workspace_size(kiln_plan_, kiln_bind_, workspace_bytes);\n"
        "  kiln_bind_destroy(kiln_bind_);\n  return kiln_st_;\n}\n",
        f);
  }
  return 0;
}

static int write_file(const char *dir, const char *name, const char *ext, kiln_pack *pack,
                      const void *bytes, size_t size, plan_sig *sigs, int nplans, kiln_err *e) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
  FILE *f = fopen(path, "w");
  if (!f) return kiln_err_set(e, "E_IO", "cannot write %s: %s", path, strerror(errno));
  if (ext[0] == 'h')
    write_header(f, name, pack, sigs, nplans);
  else
    write_source(f, name, pack, bytes, size, sigs, nplans);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) return kiln_err_set(e, "E_IO", "writing %s failed", path);
  return 0;
}

int kiln_emit_c(const char *dir, const char *name, const void *bytes, size_t size, kiln_err *e) {
  if (!dir || !name || !bytes) return kiln_err_set(e, "E_USAGE", "kiln_emit_c: bad arguments");
  if (!is_identifier(name) || strlen(name) > 100)
    return kiln_err_set(e, "E_USAGE", "--emit-c name '%s' is not a C identifier", name);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return kiln_err_set(e, "E_IO", "cannot create %s: %s", dir, strerror(errno));
  kiln_rt *rt;
  kiln_pack *pack;
  kiln_status st = kiln_rt_create(&rt);
  if (st != KILN_OK) return kiln_err_set(e, kiln_status_code(st), "%s", kiln_errstr(st));
  if ((st = kiln_pack_open_memory(rt, bytes, size, &pack)) != KILN_OK) {
    kiln_err_set(e, kiln_status_code(st), "--emit-c: %s", kiln_rt_errmsg(rt));
    kiln_rt_destroy(rt);
    return -1;
  }
  kiln_pack_info pi;
  kiln_pack_info_get(pack, &pi);
  int rc = 0, nplans = pi.nplans;
  plan_sig *sigs = calloc((size_t)(nplans ? nplans : 1), sizeof *sigs);
  names fns = {calloc((size_t)(2 * nplans + 1), sizeof *fns.v), 0, NULL};
  if (!sigs || !fns.v) rc = kiln_err_set(e, "E_IO", "out of memory");
  for (int p = 0; p < nplans && rc == 0; p++) {
    kiln_plan *plan;
    kiln_plan_info info;
    kiln_pack_plan_at(pack, p, &plan);
    kiln_plan_info_get(plan, &info);
    char base[256];
    snprintf(base, sizeof base, "%.100s%s%.100s_launch", info.graph, info.instance[0] ? "_" : "",
             info.instance);
    snprintf(sigs[p].fn, sizeof sigs[p].fn, "%s", unique_name(&fns, base));
    if (info.workspace) {
      snprintf(base, sizeof base, "%.100s%s%.100s_workspace_size", info.graph,
               info.instance[0] ? "_" : "", info.instance);
      snprintf(sigs[p].ws_fn, sizeof sigs[p].ws_fn, "%s", unique_name(&fns, base));
      sigs[p].args.extra = workspace_names;
    }
    sigs[p].args.v = calloc((size_t)(info.ntensors + info.ndims + 1), sizeof *sigs[p].args.v);
    if (!sigs[p].args.v) {
      rc = kiln_err_set(e, "E_IO", "out of memory");
      break;
    }
    for (int i = 0; i < info.ntensors; i++) {
      kiln_tensor_info t;
      kiln_plan_tensor(plan, i, &t);
      if (t.role != KILN_ROLE_VIRTUAL && t.role != KILN_ROLE_CONSTANT && t.role != KILN_ROLE_SCRATCH)
        unique_name(&sigs[p].args, t.name);
    }
    for (int d = 0; d < info.ndims; d++) {
      const char *dn;
      kiln_plan_dim(plan, d, &dn);
      unique_name(&sigs[p].args, dn);
    }
    sigs[p].nargs = sigs[p].args.n;
  }
  if (rc == 0) rc = write_file(dir, name, "h", pack, bytes, size, sigs, nplans, e);
  if (rc == 0) rc = write_file(dir, name, "c", pack, bytes, size, sigs, nplans, e);
  for (int p = 0; sigs && p < nplans; p++) free(sigs[p].args.v);
  free(sigs);
  free(fns.v);
  kiln_rt_destroy(rt);
  return rc;
}
