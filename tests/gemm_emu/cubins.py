#!/usr/bin/env python3
"""Writes every cubin (ELF image) a kiln pack holds to DIR/kN.cubin: `cubins.py PACK DIR`."""
import struct
import sys

data = open(sys.argv[1], "rb").read()
i = n = 0
while True:
    i = data.find(b"\x7fELF", i)
    if i < 0:
        break
    phoff, shoff = struct.unpack_from("<QQ", data, i + 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, i + 0x36)
    end = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
    open("%s/k%d.cubin" % (sys.argv[2], n), "wb").write(data[i:i + end])
    n += 1
    i += end
print(n)
