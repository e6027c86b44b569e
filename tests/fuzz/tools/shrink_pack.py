#!/usr/bin/env python3
# Shrinks a kiln pack (format 5, runtime/pack.h) into a fuzz_pack seed: the same metadata and
# strings, every code image cut to a stub (cubins: their first 64 bytes; PTX: a header and a
# NUL), offsets, sizes and CRC-32C updated. `kiln pack verify` still accepts the result.
#   tests/fuzz/tools/shrink_pack.py IN.kpack OUT.kpack
import struct, sys

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

src = open(sys.argv[1], 'rb').read()
H = 96
nplans, nimages = struct.unpack_from('<II', src, 32)
meta_off, meta_size, str_off, str_size, data_off, data_size = struct.unpack_from('<6Q', src, 40)
meta = bytearray(src[meta_off:meta_off + meta_size])
strtab = src[str_off:str_off + str_size]
def s(off): return strtab[off:strtab.index(b'\0', off)].decode()
p = 0
def u8():
    global p; v = meta[p]; p += 1; return v
def u32():
    global p; v = struct.unpack_from('<I', meta, p)[0]; p += 4; return v
def u64():
    global p; v = struct.unpack_from('<Q', meta, p)[0]; p += 8; return v
def product():
    n = u8()
    for _ in range(n): u64()
def rule():
    u32(); [u64() for _ in range(5)]; product()
images = []  # (pos of offset field, arch)
for _ in range(nplans):
    u32(); u32(); u32()
    for _ in range(u32()): u32(); u64()
    for _ in range(u32()): u32()
    rule()
    nt = u32()
    for _ in range(nt):
        u64(); u32(); u8(); u8(); nd = u8(); u8(); u32(); u64()
        for _ in range(nd): u64()
        for _ in range(nd): u32(); product()
    for _ in range(u32()):
        u32(); u32(); u32(); [u32() for _ in range(8)]
        for _ in range(3): rule()
        for _ in range(u32()):
            kind = u8(); u64()
            if kind == 6:
                r = u8()
                for _ in range(r): u8(); u32()
                u8()
        for _ in range(u32()):
            arch = s(u32())
            images.append((p, arch))
            u64(); u64(); u32(); u32(); u32(); u32()
assert p == len(meta), (p, len(meta))
blobs, data = {}, bytearray()
for pos, arch in images:
    off, size = struct.unpack_from('<QQ', meta, pos)
    if off not in blobs:
        old = src[data_off + off:data_off + off + size]
        stub = b'.version 8.0\n.target ' + arch.replace('compute_', 'sm_').encode() + b'\n.address_size 64\n\0' if arch.startswith('compute_') else old[:64]
        while len(data) % 64: data.append(0)
        blobs[off] = (len(data), len(stub))
        data += stub
    struct.pack_into('<QQ', meta, pos, *blobs[off])
out = bytearray(H)
out[0:8] = b'KILNPACK'
struct.pack_into('<II', out, 8, 5, H)
body = bytearray(); body += meta; body += strtab
while (H + len(body)) % 64: body.append(0)
new_data_off = H + len(body); body += data
struct.pack_into('<II', out, 32, nplans, len(blobs))
struct.pack_into('<6Q', out, 40, H, len(meta), H + len(meta), len(strtab), new_data_off, len(data))
out += body
struct.pack_into('<Q', out, 16, len(out))
struct.pack_into('<I', out, 24, crc32c(bytes(out[32:])))
open(sys.argv[2], 'wb').write(out)
