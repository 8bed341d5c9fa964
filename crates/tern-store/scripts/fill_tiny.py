#!/usr/bin/env python3
"""Stores N tiny items (8-byte keys 00000000.., 1-byte values) on a memcached-protocol server
over TCP, pipelined with noreply, then prints the server's curr_items, evictions and hash_bytes.

usage: fill_tiny.py PORT N
"""
import socket
import sys


def main():
    port, count = int(sys.argv[1]), int(sys.argv[2])
    sock = socket.create_connection(("127.0.0.1", port))
    batch = []
    for i in range(count):
        batch.append(b"set %08x 0 0 1 noreply\r\nv\r\n" % i)
        if len(batch) == 5000:
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
    print(stats.get("curr_items"), stats.get("evictions"), stats.get("hash_bytes"))


if __name__ == "__main__":
    main()
