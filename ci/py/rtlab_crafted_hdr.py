#!/usr/bin/env python3
"""rtlab: write a crafted HdrHistogram V2 file, a 40-byte header claiming a 4 GiB payload, which
`rtlab report` must refuse naming the length instead of allocating it.

Usage: ci/py/rtlab_crafted_hdr.py OUT.hdr
"""

import struct
import sys

# cookie, payload length, normalising offset, significant digits, lowest, highest, conversion ratio
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIIIQQd", 0x1C849313, 0xFFFFFFFF, 0, 3, 1, 60_000_000_000, 1.0))
