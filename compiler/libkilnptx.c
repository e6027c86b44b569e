/* libkilnptx.so: NVIDIA's PTX compiler library (nvPTXCompiler, static) as a shared object that
 * kiln loads only when it compiles PTX modules, so neither the kiln binary nor libkiln.a carries
 * it. Exports the nvPTXCompiler API and kiln_ptxc_version (libkilnptx.map). */
#ifdef KILN_PTXC_LIBRARY
#include <nvPTXCompiler.h>

/* Every entry point kiln calls, so that the link keeps their objects of the archive. */
void *const kiln_ptxc_entries[] = {
    (void *)nvPTXCompilerGetVersion,         (void *)nvPTXCompilerCreate,
    (void *)nvPTXCompilerDestroy,            (void *)nvPTXCompilerCompile,
    (void *)nvPTXCompilerGetCompiledProgramSize, (void *)nvPTXCompilerGetCompiledProgram,
    (void *)nvPTXCompilerGetErrorLogSize,    (void *)nvPTXCompilerGetErrorLog,
    (void *)nvPTXCompilerGetInfoLogSize,     (void *)nvPTXCompilerGetInfoLog,
};
#endif

/* The full version of the PTX compiler inside ("13.0.88"), which kiln checks against the one it
 * was configured with; NULL when built without one (./configure --ptx-compiler=none). */
const char *kiln_ptxc_version(void) {
#ifdef KILN_PTXC_LIBRARY
  return KILN_PTXC_VERSION;
#else
  return 0;
#endif
}
