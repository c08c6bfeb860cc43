#!/usr/bin/env python3
"""Serve a directory over HTTP/1.1 with byte ranges, for the A/B test's streamed install.

RAUC streams a bundle (verity format) with HTTP Range requests and reads only the blocks it
installs; Python's http.server answers every GET whole. This adds single-range GET/HEAD
(RFC 9110 §14: 206 with Content-Range, 416 outside the file), binds 127.0.0.1 (the guest
reaches it as 10.0.2.2 through QEMU's user network), prints the port and logs every request.
"""

import argparse
import http.server
import os
import re
import sys

RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send_head(self):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404, "not found")
            return None
        size = os.path.getsize(path)
        start, end = 0, size - 1
        header = self.headers.get("Range")
        status = 200
        if header:
            m = RANGE.match(header.strip())
            if not m or (m.group(1) == "" and m.group(2) == ""):
                self.send_error(416, "unsupported range")
                return None
            if m.group(1) == "":
                start = max(0, size - int(m.group(2)))
            else:
                start = int(m.group(1))
                if m.group(2):
                    end = min(end, int(m.group(2)))
            if start > end or start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            status = 206
        f = open(path, "rb")  # noqa: SIM115 (closed by copyfile below)
        f.seek(start)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        self._left = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        left = self._left
        with source:
            while left > 0:
                chunk = source.read(min(left, 1 << 16))
                if not chunk:
                    break
                outputfile.write(chunk)
                left -= len(chunk)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    ap.add_argument("--port-file", required=True, help="write the port here once listening")
    a = ap.parse_args()
    os.chdir(a.dir)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(f"{srv.server_address[1]}\n")
    os.replace(a.port_file + ".tmp", a.port_file)
    sys.stderr.write(f"serving {a.dir} on 127.0.0.1:{srv.server_address[1]}\n")
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
