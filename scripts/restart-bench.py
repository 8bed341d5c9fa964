#!/usr/bin/env python3
"""How long a warm restart (-e) takes: fill a tern, stop it gracefully, start it again on the
same memory file, and time how long until it serves with every item back.

    scripts/restart-bench.py [--items N] [--key-bytes 10] [--value-bytes 32] [--memory MB]
                             [--file /dev/shm/tern-restart-bench.mem] [--tern target/release/tern]

Prints the load, the stop (heap sync + metadata write), and for the restart: the server's own
figure (`stats` restore_time_us: mapping the file to the store being ready) and the wall time
from exec until a `get` of the last key stored answers, plus a check of a sample of values.
Build first: cargo build --release -p tern. Use a tmpfs path, with room for --memory.
"""

import argparse
import os
import socket
import subprocess
import sys
import time

from servers import free_port


def connect(port, patience):
    deadline = time.monotonic() + patience
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port))
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)


def read_until(sock, end):
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError(f"connection closed; got {data[-200:]!r}")
        data += chunk
    return data


def stats(sock):
    sock.sendall(b"stats\r\n")
    lines = read_until(sock, b"END\r\n").decode().splitlines()
    return {l.split()[1]: l.split()[2] for l in lines if l.startswith("STAT ")}


def key(i, width):
    return (b"k%0*d" % (width - 1, i))


def value(i, size):
    seed = b"%d." % i
    return (seed * (size // len(seed) + 1))[:size]


def start(args, port):
    cmd = [args.tern, "serve", "-l", "127.0.0.1", "-p", str(port), "-m", str(args.memory),
           "-t", "2", "-e", args.file, "-v"]
    return subprocess.Popen(cmd, stderr=open(args.log, "ab"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--items", type=int, default=1_000_000)
    p.add_argument("--key-bytes", type=int, default=10)
    p.add_argument("--value-bytes", type=int, default=32)
    p.add_argument("--memory", type=int, default=256, help="-m, MB")
    p.add_argument("--file", default="/dev/shm/tern-restart-bench.mem")
    p.add_argument("--tern", default="target/release/tern")
    p.add_argument("--log", default="/tmp/tern-restart-bench.log")
    args = p.parse_args()
    for path in (args.file, args.file + ".meta"):
        if os.path.exists(path):
            os.remove(path)
    port = free_port()

    server = start(args, port)
    sock = connect(port, 10)
    t = time.monotonic()
    batch = []
    for i in range(args.items):
        v = value(i, args.value_bytes)
        batch.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (key(i, args.key_bytes), len(v), v))
        if len(batch) == 2000 or i == args.items - 1:
            sock.sendall(b"".join(batch))
            batch = []
    sock.sendall(b"mn\r\n")
    read_until(sock, b"MN\r\n")
    loaded = stats(sock)
    print(f"loaded {loaded['curr_items']} items, {int(loaded['bytes']) >> 20} MiB of keys and "
          f"values, in {time.monotonic() - t:.1f} s")
    sock.close()

    t = time.monotonic()
    server.terminate()
    server.wait()
    print(f"graceful stop (heap sync, metadata write, exit): {time.monotonic() - t:.3f} s; "
          f"metadata {os.path.getsize(args.file + '.meta') >> 10} KiB")

    t = time.monotonic()
    server = start(args, port)
    sock = connect(port, 30)
    last = key(args.items - 1, args.key_bytes)
    sock.sendall(b"get %s\r\n" % last)
    read_until(sock, b"END\r\n")
    ready = time.monotonic() - t
    st = stats(sock)
    print(f"restart: {st['restored_items']} items restored; restore_time_us "
          f"{st['restore_time_us']} ({int(st['restore_time_us']) / 1e6:.3f} s); "
          f"exec to first hit {ready:.3f} s")
    bad = 0
    step = max(1, args.items // 10_000)
    for i in range(0, args.items, step):
        sock.sendall(b"get %s\r\n" % key(i, args.key_bytes))
        reply = read_until(sock, b"END\r\n")
        v = value(i, args.value_bytes)
        if reply != b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key(i, args.key_bytes), len(v), v):
            bad += 1
    print(f"checked {len(range(0, args.items, step))} values: {bad} wrong")
    server.terminate()
    server.wait()
    for path in (args.file, args.file + ".meta"):
        if os.path.exists(path):
            os.remove(path)
    return 1 if bad or int(st["restored_items"]) != args.items else 0


if __name__ == "__main__":
    sys.exit(main())
