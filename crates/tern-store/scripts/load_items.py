#!/usr/bin/env python3
"""Stores N items (10-byte keys k000000000.., 32-byte values) on a memcached-protocol server
over TCP, pipelined with noreply, then prints the server's curr_items.

usage: load_items.py PORT [N]
"""
import socket
import sys


def main():
    port = int(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    sock = socket.create_connection(("127.0.0.1", port))
    value = b"v" * 32
    batch = []
    for i in range(count):
        batch.append(b"set k%09d 0 0 32 noreply\r\n%s\r\n" % (i, value))
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
    for line in reply.decode().splitlines():
        if line.startswith("STAT curr_items "):
            print(line.split()[2])


if __name__ == "__main__":
    main()
