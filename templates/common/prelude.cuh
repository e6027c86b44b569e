// kiln: fixed-width types for header-free NVRTC sources.
typedef unsigned char kiln_u8;
typedef unsigned short kiln_u16;
typedef unsigned int kiln_u32;
typedef unsigned long long kiln_u64;
typedef long long kiln_i64;
