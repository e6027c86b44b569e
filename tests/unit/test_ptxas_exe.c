/* The ptxas executable and kiln's PTX compiler library give a PTX module NVRTC's code: for each
 * PTX-body kernel of two `kiln source` listings of the same specs (the CUDA forms, and --ptx with
 * the modules), the CUDA form through NVRTC and the module through either ptxas have the same
 * SASS, kernel info and constant bank, byte for byte (TAP).
 * Usage: test_ptxas_exe CUDA_LISTING PTX_LISTING ARCH */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
#include "nvrtc.h"
#include "ptxas.h"
#include "tap.h"

/* The whole of a file (kiln_read_file), or NULL. */
static char *read_text(const char *path) {
  char *text = NULL;
  size_t n = 0;
  return kiln_read_file(path, &text, &n) == 0 ? text : NULL;
}

/* The kernels of a listing: each "// ---- " header line and the text after it, split in place. */
#define MAX_KERNELS 64
typedef struct {
  int n;
  char *head[MAX_KERNELS], *body[MAX_KERNELS];
} listing;

static void split(char *text, listing *l) {
  l->n = 0;
  for (char *p = strstr(text, "// ---- "); p && l->n < MAX_KERNELS;) {
    char *eol = strchr(p, '\n');
    if (!eol) break;
    *eol = '\0';
    l->head[l->n] = p;
    l->body[l->n++] = eol + 1;
    char *next = strstr(eol + 1, "\n// ---- ");
    if (next) *next = '\0';
    p = next ? next + 1 : NULL;
  }
}

/* The bytes and size of the ELF section named name (NULL when absent). */
static const unsigned char *section(const void *elf, size_t size, const char *name, size_t *len) {
  const Elf64_Ehdr *eh = elf;
  if (size < sizeof *eh || eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > size) return NULL;
  const Elf64_Shdr *sh = (const Elf64_Shdr *)((const char *)elf + eh->e_shoff);
  const char *names = (const char *)elf + sh[eh->e_shstrndx].sh_offset;
  for (int i = 0; i < eh->e_shnum; i++) {
    if (strcmp(names + sh[i].sh_name, name) != 0) continue;
    *len = sh[i].sh_type == SHT_NOBITS ? 0 : sh[i].sh_size;
    return (const unsigned char *)elf + sh[i].sh_offset;
  }
  return NULL;
}

/* Which of the kernel's sections differ between the two cubins, "" when none. */
static void compare(const void *a, size_t na, const void *b, size_t nb, const char *sym, char *why, size_t n) {
  const char *kinds[] = {".text.", ".nv.info.", ".nv.constant0.", ".nv.shared."};
  why[0] = '\0';
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    char name[300];
    snprintf(name, sizeof name, "%s%s", kinds[k], sym);
    size_t la = 0, lb = 0;
    const unsigned char *sa = section(a, na, name, &la), *sb = section(b, nb, name, &lb);
    if ((sa || sb) && (!sa || !sb || la != lb || memcmp(sa, sb, la) != 0))
      snprintf(why + strlen(why), n - strlen(why), " %s", name);
  }
  char text[300];
  size_t l = 0;
  snprintf(text, sizeof text, ".text.%s", sym);
  if (!section(a, na, text, &l)) snprintf(why, n, " (no %s)", text);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s CUDA_LISTING PTX_LISTING ARCH\n", argv[0]);
    return 2;
  }
  char exe[4096];
  if (kiln_ptxas_exe_probe(exe, sizeof exe) != 0) {
    return TAP_SKIP_ALL("no ptxas executable in NVRTC's toolkit");
  }
  char *cuda_text = read_text(argv[1]), *ptx_text = read_text(argv[2]);
  if (!cuda_text || !ptx_text) {
    fprintf(stderr, "cannot read %s or %s\n", argv[1], argv[2]);
    return 2;
  }
  listing cu, px;
  split(cuda_text, &cu);
  split(ptx_text, &px);
  kiln_err e;
  kiln_nvrtc *nv = NULL;
  if (kiln_nvrtc_open(&nv, &e) != 0) {
    printf("Bail out! %s\n", e.msg);
    return 1;
  }
  OK(cu.n == px.n && cu.n > 0, "the listings hold the same %d kernels", cu.n);
  /* the library kiln was configured with, when it is there */
  char lib_opt[128] = "", lib[4096];
  if (kiln_ptxas_lib_version() && kiln_ptxas_lib_probe(lib, sizeof lib) == 0)
    snprintf(lib_opt, sizeof lib_opt, "--compiler=nvptxcompiler/%s", kiln_ptxas_lib_version());
  OK(lib_opt[0] || !kiln_ptxas_lib_version(), "kiln's PTX compiler library %s is found (%s)",
     kiln_ptxas_lib_version() ? kiln_ptxas_lib_version() : "(none configured)", lib_opt[0] ? lib : "absent");
  int modules = 0, levels = 0;
  for (int i = 0; i < cu.n && i < px.n; i++) {
    if (!strstr(px.head[i], "compiled as a PTX module by ")) continue;
    char sym[256] = "";
    const char *k = strstr(px.head[i], " kernel ");
    if (k) sscanf(k + 8, "%255[A-Za-z0-9_]", sym);
    /* the finalize and the amax init are written for modules: their CUDA forms are other
     * programs, not their PTX body's wrapper */
    size_t len = strlen(sym);
    if ((len > 6 && !strcmp(sym + len - 6, "_final")) || (len > 5 && !strcmp(sym + len - 5, "_init"))) continue;
    modules++;
    /* a kernel compiled at another ptxas level (the header's " at -O1"): its module's option, and
     * the CUDA form's through NVRTC */
    char level[8] = "-O3", nvrtc_level[32];
    const char *at = strstr(px.head[i], " at -O");
    if (at) snprintf(level, sizeof level, "-O%c", at[6]);
    snprintf(nvrtc_level, sizeof nvrtc_level, "--ptxas-options=%s", level);
    const char *cuda_opts[] = {"-minimal", nvrtc_level}, *exe_opts[] = {"--compiler=ptxas", level},
               *lib_opts[] = {lib_opt, level};
    int nopt = at ? 2 : 1;
    levels += at != NULL;
    void *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    kiln_err ea = {0}, eb = {0}, ec = {0};
    int ra = kiln_nvrtc_compile(nv, cu.body[i], sym, argv[3], cuda_opts, nopt, &a, &na, NULL, &ea);
    int rb = kiln_nvrtc_compile(nv, px.body[i], sym, argv[3], exe_opts, nopt, &b, &nb, NULL, &eb);
    char why[1200] = "", why_lib[1200] = "";
    if (ra == 0 && rb == 0) compare(a, na, b, nb, sym, why, sizeof why);
    OK(ra == 0 && rb == 0 && !why[0], "%s: the module through ptxas gives NVRTC's SASS%s%s%s%s", sym,
       why[0] ? ", differs in" : "", why, ra ? ea.msg : "", rb ? eb.msg : "");
    if (lib_opt[0]) {
      int rc = kiln_nvrtc_compile(nv, px.body[i], sym, argv[3], lib_opts, nopt, &c, &nc, NULL, &ec);
      if (ra == 0 && rc == 0) compare(a, na, c, nc, sym, why_lib, sizeof why_lib);
      OK(ra == 0 && rc == 0 && !why_lib[0], "%s: the module through the PTX compiler library gives NVRTC's SASS%s%s%s",
         sym, why_lib[0] ? ", differs in" : "", why_lib, rc ? ec.msg : "");
    }
    free(a);
    free(b);
    free(c);
  }
  OK(modules > 0, "%d kernels compiled as modules by ptxas%s", modules, lib_opt[0] ? " and the library" : "");
  OK(levels > 0, "%d of them at another ptxas level, their CUDA forms too", levels);
  kiln_nvrtc_close(nv);
  free(cuda_text);
  free(ptx_text);
  TAP_PLAN(tap_n); /* a trailing plan: the count follows the listings */
  return TAP_DONE();
}
