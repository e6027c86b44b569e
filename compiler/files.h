/* kiln compiler: small file-system helpers shared by the cache and NVRTC dumps. */
#ifndef KILN_FILES_H
#define KILN_FILES_H

/* mkdir -p: creates path and its parents (0777 before umask); 0, or -1 with errno. */
int kiln_mkdir_p(const char *path);

#endif
