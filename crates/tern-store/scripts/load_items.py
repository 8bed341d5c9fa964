#!/usr/bin/env python3
"""Stores N items on a memcached-protocol server over TCP, pipelined with noreply, then prints
the server's curr_items, evictions and hash_bytes (`-` where it has none). KIND `small` (the
default): 10-byte keys k000000000.., 32-byte values; `tiny`: 8-byte keys 00000000.., 1-byte
values.

usage: load_items.py PORT [N] [small|tiny]
"""
import socket
import sys

KINDS = {
    "small": lambda i: b"set k%09d 0 0 32 noreply\r\n%s\r\n" % (i, b"v" * 32),
    "tiny": lambda i: b"set %08x 0 0 1 noreply\r\nv\r\n" % i,
}


def main():
    port = int(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    request = KINDS[sys.argv[3] if len(sys.argv) > 3 else "small"]
    sock = socket.create_connection(("127.0.0.1", port))
    batch = []
    for i in range(count):
        batch.append(request(i))
        if len(batch) == 2000:
            sock.sendall(b"".join(batch))
            batch.clear()
    sock.sendall(b"".join(batch) + b"stats\r\n")
    reply = b""
    while not reply.endswith(b"END\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        reply += chunk
    stats = dict(line.split()[1:3] for line in reply.decode().splitlines()
                 if line.startswith("STAT "))
    print(*(stats.get(name, "-") for name in ("curr_items", "evictions", "hash_bytes")))


if __name__ == "__main__":
    main()
