/* kiln compiler: the toolkit's ptxas executable; a PTX module to a CUBIN in a child process. */
#include "ptxas.h"
#include "nvrtc.h"
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int kiln_ptxas_exe_probe(char *path, size_t pathsz) {
  char nvrtc[PATH_MAX];
  if (pathsz) path[0] = '\0';
  if (kiln_nvrtc_probe_dir(nvrtc, sizeof nvrtc) != 0) return -1;
  /* NVRTC's toolkit: lib/ or lib64/ beside bin/ (toolkits, the PyPI wheels), or
   * targets/<triple>/lib/ three levels below it */
  const char *rel[] = {"../bin/ptxas", "../../../bin/ptxas"};
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
    char cand[PATH_MAX], real[PATH_MAX];
    struct stat st;
    if (snprintf(cand, sizeof cand, "%s/%s", nvrtc, rel[i]) >= (int)sizeof cand) continue;
    if (!realpath(cand, real) || stat(real, &st) != 0 || !S_ISREG(st.st_mode) || access(real, X_OK) != 0)
      continue;
    snprintf(path, pathsz, "%s", real);
    return 0;
  }
  return -1;
}

static int write_all(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(text, 1, n, f) == n;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Runs argv with stdin from /dev/null and stdout/stderr into log; the exit status (as
 * waitpid's), or -1 with errno. A caller that ignores SIGCHLD reaps nothing: ECHILD. */
static int run_child(char *const argv[], const char *log, int *status) {
  posix_spawn_file_actions_t fa;
  if (posix_spawn_file_actions_init(&fa) != 0) return -1;
  int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  if (rc == 0) rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  while (waitpid(pid, status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return 0;
}

int kiln_ptxas_exe_compile(const char *exe, const char *ptx, const char *name, const char *arch, int opt_level,
                           void **cubin, size_t *size, char **log, kiln_err *e) {
  *cubin = NULL;
  *size = 0;
  if (log) *log = NULL;
  const char *tmp = getenv("TMPDIR");
  char dir[PATH_MAX], in[PATH_MAX + 256], out[PATH_MAX + 16], logf[PATH_MAX + 16], archopt[64], optopt[32];
  if (snprintf(dir, sizeof dir, "%s/kiln-ptxas-XXXXXX", tmp && *tmp ? tmp : "/tmp") >= (int)sizeof dir)
    return kiln_err_set(e, "E_NVRTC", "%s: TMPDIR path too long for ptxas's files", name);
  if (!mkdtemp(dir)) return kiln_err_set(e, "E_NVRTC", "%s: a directory for ptxas in %s: %s", name, dir, strerror(errno));
  /* named as KILN_DUMP_DIR keeps it, for ptxas's messages */
  if (strchr(name, '/') || snprintf(in, sizeof in, "%s/%s.ptx", dir, name) >= (int)sizeof in)
    snprintf(in, sizeof in, "%s/m.ptx", dir);
  snprintf(out, sizeof out, "%s/m.cubin", dir);
  snprintf(logf, sizeof logf, "%s/log", dir);
  snprintf(archopt, sizeof archopt, "-arch=%s", arch);
  char *level = (char *)kiln_ptxas_level_option(optopt, sizeof optopt, "-O", opt_level);
  char *argv[] = {(char *)exe, archopt, in, "-o", out, level, NULL};
  int status = 0, wstatus = 0, reaped = 1;
  if (write_all(in, ptx, strlen(ptx)) != 0) {
    status = kiln_err_set(e, "E_NVRTC", "%s: writing %s for ptxas: %s", name, in, strerror(errno));
  } else if (run_child(argv, logf, &wstatus) != 0) {
    if (errno == ECHILD) reaped = 0; /* the caller ignores SIGCHLD: judge by the CUBIN */
    else status = kiln_err_set(e, "E_NVRTC", "%s: running %s: %s (KILN_PTXAS=nvjitlink compiles in-process)",
                               name, exe, strerror(errno));
  }
  size_t n = 0;
  char *text = NULL;
  if (status == 0 && kiln_read_file(logf, &text, &n) != 0) text = NULL;
  if (text && n == 0) {
    free(text);
    text = NULL;
  }
  if (status == 0 && reaped && !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
    char how[64];
    if (WIFEXITED(wstatus)) snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(wstatus));
    else snprintf(how, sizeof how, "signal %d", WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
    status = kiln_err_set(e, "E_NVRTC", "ptxas failed to compile %s for %s (%s)%s%.1800s", name, arch, how,
                          text ? ":\n" : "", text ? text : "");
  } else if (status == 0) {
    char *bytes = NULL;
    if (kiln_read_file(out, &bytes, size) == 0) *cubin = bytes;
    if (!*cubin || *size < 4 || memcmp(*cubin, "\x7f" "ELF", 4) != 0) {
      status = kiln_err_set(e, "E_NVRTC", "%s: ptxas (%s) left no CUBIN for %s%s%.1800s", name, exe, arch,
                            text ? ":\n" : "", text ? text : "");
      free(*cubin);
      *cubin = NULL;
      *size = 0;
    }
  }
  unlink(in);
  unlink(out);
  unlink(logf);
  rmdir(dir);
  if (log) *log = text;
  else free(text);
  return status;
}
