/* kiln compiler: small file-system helpers shared by the cache and NVRTC dumps. */
#ifndef KILN_FILES_H
#define KILN_FILES_H

#include <stddef.h>

/* mkdir -p: creates path and its parents (0777 before umask); 0, or -1 with errno. */
int kiln_mkdir_p(const char *path);

/* The whole of a file, NUL-terminated and malloc'ed into *data, its length into *size: 0, or -1
 * (errno set where the system set it). */
int kiln_read_file(const char *path, char **data, size_t *size);

#endif
