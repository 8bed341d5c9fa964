#!/usr/bin/env python3
"""Server RSS under a churn of large uploads (issue 26, item 3): CONNS connections each store
values of random size (MIN..MAX bytes) in a loop, sending each value in 64 KiB pieces, for
SECONDS; the server's RSS is sampled every 100 ms. Prints the peak RSS and the replies counted,
for each server given, one after the other at the same -m.

  scripts/churn-rss.py SERVER_BIN [SERVER_BIN ...] [--conns 1000] [--seconds 20] [--memory 64]
                       [--min 100] [--max 500000]

A server binary named memcached* runs as memcached (-U 0, -u root as root); any other as tern
serve. A measurement, not a test: it asserts nothing.
"""
import argparse
import os
import random
import socket
import subprocess
import threading
import time

from servers import free_port, rss_mib, wait_accepting


def client(port, seed, deadline, lo, hi, counts, lock):
    rng = random.Random(seed)
    try:
        s = socket.create_connection(("127.0.0.1", port))
    except OSError:
        with lock:
            counts["refused"] += 1
        return
    f = s.makefile("rb")
    piece = b"x" * 65536
    n = 0
    while time.monotonic() < deadline:
        size = rng.randint(lo, hi)
        try:
            s.sendall(b"set churn-%d-%d 0 0 %d\r\n" % (seed, n % 50, size))
            left = size
            while left:
                chunk = min(left, len(piece))
                s.sendall(piece[:chunk])
                left -= chunk
                time.sleep(0.001)  # a slow client: the value arrives over many reads
            s.sendall(b"\r\n")
            reply = f.readline().strip().decode(errors="replace")
        except OSError:
            reply = "closed"
        with lock:
            counts[reply] = counts.get(reply, 0) + 1
        if reply == "closed":
            return
        n += 1
    s.close()


def measure(binary, args):
    port = free_port()
    name = os.path.basename(binary)
    if name.startswith("memcached"):
        cmd = [binary, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", str(args.memory),
               "-c", str(args.conns + 100)]
        if os.geteuid() == 0:
            cmd += ["-u", "root"]
    else:
        cmd = [binary, "serve", "-p", str(port), "-l", "127.0.0.1", "-m", str(args.memory),
               "-c", str(args.conns + 100)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_accepting(port, 10)
        start_rss = rss_mib(server.pid)
        counts, lock = {"refused": 0}, threading.Lock()
        deadline = time.monotonic() + args.seconds
        threads = [threading.Thread(target=client, daemon=True,
                                    args=(port, i, deadline, args.min, args.max, counts, lock))
                   for i in range(args.conns)]
        for t in threads:
            t.start()
        peak = start_rss
        while time.monotonic() < deadline + 2:
            if server.poll() is not None:
                break
            peak = max(peak, rss_mib(server.pid))
            time.sleep(0.1)
        alive = server.poll() is None
        print(f"{name}: -m {args.memory}, {args.conns} connections, {args.seconds} s: RSS "
              f"{start_rss:.1f} MiB at start, peak {peak:.1f} MiB "
              f"(-m + {peak - args.memory:.1f} MiB); alive at the end: {alive}; replies {counts}")
    finally:
        server.kill()
        server.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("servers", nargs="+")
    p.add_argument("--conns", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--memory", type=int, default=64)
    p.add_argument("--min", type=int, default=100)
    p.add_argument("--max", type=int, default=500_000)
    args = p.parse_args()
    for binary in args.servers:
        measure(binary, args)


if __name__ == "__main__":
    main()
