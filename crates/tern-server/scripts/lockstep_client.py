"""Drives a memcached-compatible server in lockstep for instruction counting: preloads the keys,
then sends batches of exactly 16 requests (13 gets, 3 sets of 256-byte values: ~80/20) in one
write each and waits for all 16 replies before the next, so every server wake-up serves one
whole batch and two runs differ only in how many batches they serve. With MODE `get`, a batch is
100 gets instead (the cost of a pipelined get alone); with MODE `single`, one get (unpipelined:
every get is a wake-up, a read and a write of its own).

usage: [KEYS=N] lockstep_client.py PORT BATCHES [mix|get|single]

KEYS (default 10,000) sets how many keys are preloaded and cycled through: 100,000 (~30 MB of
items) takes the store well past the caches.
"""
import os
import socket
import sys

KEYS = int(os.environ.get("KEYS", "10000"))
VALUE = b"v" * 256


def key(i):
    return b"key:%08d" % (i % KEYS)


def exchange(sock, request, replies):
    sock.sendall(request)
    got = b""
    while got.count(b"\r\n") < replies or not got.endswith(b"\r\n"):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("server closed")
        got += chunk
    return got


def main():
    port, batches = int(sys.argv[1]), int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "mix"
    gets_only = mode in ("get", "single")
    per_batch = {"get": 100, "single": 1}.get(mode, 16)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for start in range(0, KEYS, 16):
        request = b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (key(i), len(VALUE), VALUE) for i in range(start, start + 16))
        exchange(sock, request, 16)
    n = 0
    for _ in range(batches):
        parts, lines = [], 0
        for j in range(per_batch):
            k = key(n * 7919)
            n += 1
            if not gets_only and j % 5 == 4 and j < 15:
                parts.append(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(VALUE), VALUE))
                lines += 1
            else:
                parts.append(b"get %s\r\n" % k)
                lines += 3  # VALUE line, data, END (every key was preloaded)
        exchange(sock, b"".join(parts), lines)


main()
