#!/usr/bin/python3
"""Reads `ibv_devinfo -v` output on stdin; prints one "GID TYPE" line per GID of port 1, the GID
spelled as sysfs does (8 groups of 4 hex digits), TYPE as ibv_devinfo says ("RoCE v2")."""
import ipaddress
import re
import sys

port = 0
for line in sys.stdin:
    m = re.match(r"\s*port:\s*(\d+)", line)
    if m:
        port = int(m.group(1))
        continue
    m = re.match(r"\s*GID\[\s*(\d+)\]:\s*([0-9a-fA-F:.]+)(?:,\s*(.*?))?\s*$", line)
    if m and port == 1:
        try:
            gid = ipaddress.IPv6Address(m.group(2)).exploded
        except ValueError:
            gid = m.group(2)
        print(gid, m.group(3) or "")
