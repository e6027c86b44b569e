#!/usr/bin/env python3
"""Turns a generated GEMM kernel source into C++ for the CPU emulator (emu.h):
the device helper snippets of templates/common are swapped for emu.h's models (the wgmma
descriptor encoder stays the kernel's own), the generated wgmma wrapper for emu_wgmma with
the instruction's shape, types and transposes, the dynamic shared memory for the emulated
CTA's window, and an emu_entry() that calls the kernel with the harness's buffers.

    transform.py KERNEL.cu TEMPLATE_DIR OUT.cc [ENTRY]

ENTRY (default emu_entry) names the entry; `ENTRY_threads` holds the kernel's launch bounds.
"""
import re
import sys

src_path, tdir, out_path = sys.argv[1:4]
entry = sys.argv[4] if len(sys.argv) > 4 else "emu_entry"
src = open(src_path).read()


def snippet(name):
    return open("%s/common/%s" % (tdir, name)).read()


desc_fn = re.search(r"__device__ __forceinline__ kiln_u64 kiln_wgmma_desc\(.*?\n}\n", snippet("wgmma.cuh"), re.S).group(0)
for name in ["prelude.cuh", "bf16.cuh", "fp16.cuh", "nanmax.cuh", "exp2.cuh", "amax.cuh", "cp_async.cuh",
             "mma_sm80.cuh", "mbarrier.cuh", "wgmma.cuh", "tma.cuh", "cluster.cuh", "flag.cuh", "pdl.cuh",
             "named_barrier.cuh", "red.cuh"]:
    text = snippet(name)
    if text in src:
        src = src.replace(text, desc_fn if name == "wgmma.cuh" else "")

for m in list(re.finditer(r"// (d \+?= A \* B): one wgmma\.mma_async.*?\n}\n", src, re.S)):
    fn = m.group(0)
    fname = re.search(r"void (kiln_wgmma_\w+)\(", fn).group(1)
    shape = re.search(r"m64n(\d+)k(\d+)\.f32\.(\w+)\.(\w+)", fn)
    n, k, at, bt = int(shape.group(1)), int(shape.group(2)), shape.group(3), shape.group(4)
    tr = re.search(r"p, 1, 1, (\d), (\d);", fn)
    ta, tb = (tr.group(1), tr.group(2)) if tr else ("0", "0")
    zero = "  for (auto &x : d) x = 0.0f;\n" if m.group(1) == "d = A * B" else ""
    src = src.replace(fn, "inline void %s(float (&d)[%d], kiln_u64 da, kiln_u64 db) {\n%s"
                          "  emu_wgmma(d, da, db, emu_type(\"%s\"), emu_type(\"%s\"), %d, %s, %s);\n}\n"
                      % (fname, n // 2, zero, at, bt, k, ta, tb))

src = re.sub(r"extern __shared__ __align__\(\d+\) kiln_u8 kiln_smem\[\];",
             "kiln_u8 *const kiln_smem = emu_self->smem + EMU_SMEM_OFFSET;", src)

sig = re.search(r'extern "C" __global__ void __launch_bounds__\((\d+)[^)]*\) (\w+)\((.*?)\) \{', src, re.S)
threads, name, params = int(sig.group(1)), sig.group(2), sig.group(3)
# the tensor maps the kernel takes: "// kiln tmap tmU: A axes 1,0 box 64,128"
tmaps = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(r"// kiln tmap tm(\d+): \w+ axes ([\d,]+) box ([\d,]+)", src)}
args = []
for p in [x.strip() for x in params.split(",")]:
    pname = re.search(r"(\w+)$", p).group(1)
    ptype = p[: -len(pname)].replace("__restrict__", "").strip()
    if re.match(r"p\d+$", pname):
        args.append("(%s)emu_ptr(%s)" % (ptype, pname[1:]))
    elif re.match(r"s\d+$", pname):
        args.append("emu_scalar(%s)" % pname[1:])
    elif re.match(r"tm\d+$", pname) and pname[2:] in tmaps:
        axes, box = tmaps[pname[2:]]
        args.append("emu_tmap(%s, {%s}, {%s})" % (pname[2:], axes, box))
    elif re.match(r"tm\d+$", pname):  # a map the kernel takes but does not describe (attention's mma form: unused)
        args.append("kiln_tmap{}")
    elif pname == "ws":
        args.append("(%s)emu_workspace()" % ptype)
    elif pname.startswith("dim_"):
        args.append('emu_dim("%s")' % pname[4:])
    else:
        raise SystemExit("transform.py: cannot bind parameter %r" % p)

with open(out_path, "w") as f:
    f.write('#include "emu.h"\nvoid *emu_ptr(long long);\nfloat emu_scalar(long long);\nlong long emu_dim(const char *);\n'
            'kiln_tmap emu_tmap(long long, std::vector<int>, std::vector<int>);\nvoid *emu_workspace();\n')
    f.write(src)
    f.write("\nextern const int %s_threads = %d;\nvoid %s() { %s(%s); }\n" % (entry, threads, entry, name, ", ".join(args)))
